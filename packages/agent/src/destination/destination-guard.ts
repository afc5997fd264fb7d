/**
 * Enforcing the destination policy at dial time ({@link guardedConnector}): literal addresses judged
 * before connecting, names judged, resolved through the socket's `lookup` hook and judged per address.
 * Design: docs/design/decisions.md#agent-identity-exact-grants-only-destination-policy-judged-after-resolution
 */
import * as dns from "node:dns";
import * as net from "node:net";
import { joinHostPort } from "@cluster-proxy/protocol";
import {
  DESTINATION_POLICY_REFUSAL,
  DestinationRefusedError,
  type DestinationPolicy,
  type PolicyVerdict,
} from "./destination-policy.js";
import type { SocketConnector } from "./endpoint-dialer.js";
import { canonicalAddress } from "./destination-address.js";

/** Resolves a name to all its addresses (dns.lookup with `all: true`; injectable for tests). */
export type Resolver = (
  hostname: string,
  options: dns.LookupAllOptions,
  callback: (err: NodeJS.ErrnoException | null, addresses: dns.LookupAddress[]) => void,
) => void;

const systemResolver: Resolver = (hostname, options, callback) => dns.lookup(hostname, options, callback);

/** The refusal text for a dial: `dial to <host:port>[ (resolves to ...)] refused by ... (<why>)`. */
export function refusalMessage(target: string, because: string, resolved?: readonly string[]): string {
  const via = resolved?.length ? ` (resolves to ${resolved.join(", ")})` : "";
  return `dial to ${target}${via} ${DESTINATION_POLICY_REFUSAL} (${because})`;
}

/** A socket that fails with `err` on the next tick, as a refused connect would. */
function failedSocket(err: Error): net.Socket {
  const socket = new net.Socket();
  process.nextTick(() => socket.destroy(err));
  return socket;
}

/**
 * A connector that enforces `policy` in front of `base`. `onRefused` is called once per refused
 * dial with the message (for logs and metrics).
 */
export function guardedConnector(
  policy: DestinationPolicy,
  base: SocketConnector,
  onRefused: (message: string) => void,
  resolve: Resolver = systemResolver,
): SocketConnector {
  const refuse = (message: string): net.Socket => {
    onRefused(message);
    return failedSocket(new DestinationRefusedError(message));
  };
  return (options) => {
    const tcp = options as net.TcpNetConnectOpts;
    const host = tcp.host ?? "localhost";
    const port = tcp.port;
    const target = joinHostPort(host, port);
    // An address in any spelling (127.1, 0x7f.1, 2130706433, ...) is judged, and dialled, as
    // the canonical address; the resolver would have read it the same way.
    const literal = net.isIP(host) ? host : canonicalAddress(host)?.ip;
    if (literal !== undefined) {
      const verdict = policy.check({ ip: literal, port });
      if (verdict.allowed !== true) return refuse(refusalMessage(target, reason(verdict)));
      return base(literal === host ? options : { ...tcp, host: literal });
    }
    const early = policy.check({ name: host, port });
    if (early.allowed === false) return refuse(refusalMessage(target, early.because));
    return base({ ...tcp, lookup: guardedLookup(policy, port, onRefused, resolve) });
  };
}

/**
 * A socket `lookup` hook that resolves a name with `resolve` and hands on only the addresses
 * `policy` allows for (name, address, `port`); when none is left it fails with a
 * {@link DestinationRefusedError} naming the policy and the addresses (and calls `onRefused`), so
 * the socket never connects to an address that was not judged.
 */
export function guardedLookup(
  policy: DestinationPolicy,
  port: number,
  onRefused: (message: string) => void,
  resolve: Resolver = systemResolver,
): net.LookupFunction {
  return (hostname, lookupOptions, callback) => {
    resolve(hostname, { ...lookupOptions, all: true }, (err, addresses) => {
      if (err) return callback(err, []);
      const allowed: dns.LookupAddress[] = [];
      let because = "";
      for (const a of addresses) {
        const verdict = policy.check({ name: hostname, ip: a.address, port });
        if (verdict.allowed === true) allowed.push(a);
        else because ||= reason(verdict);
      }
      if (allowed.length === 0) {
        const message = refusalMessage(
          joinHostPort(hostname, port),
          because || "no address",
          addresses.map((a) => a.address),
        );
        onRefused(message);
        return callback(new DestinationRefusedError(message), []);
      }
      if (lookupOptions.all) return callback(null, allowed);
      return callback(null, allowed[0]!.address, allowed[0]!.family);
    });
  };
}

/** A {@link Resolver} from a socket `lookup` hook (asked for every address). */
export function resolverOf(lookup: net.LookupFunction): Resolver {
  return (hostname, options, callback) =>
    lookup(hostname, { ...options, all: true }, (err, address, family) => {
      if (err) return callback(err, []);
      if (Array.isArray(address)) return callback(null, address);
      return callback(null, [{ address, family: family ?? (net.isIP(address) === 6 ? 6 : 4) }]);
    });
}

function reason(verdict: PolicyVerdict): string {
  return verdict.allowed === false ? verdict.because : "undecided";
}
