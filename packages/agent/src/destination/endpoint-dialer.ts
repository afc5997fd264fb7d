/**
 * Dialling endpoints inside the cluster: where a DIAL_REQ address goes (the cluster-name
 * mapping), the dial itself with a timeout, and the error texts, worded as Go's `net.Dial`
 * words them because clients and users match on them ("connection refused", "no such host",
 * "i/o timeout").
 */
import * as net from "node:net";
import { realClock, type Timers } from "@cluster-proxy/kit";
import { joinHostPort, parseHostPort } from "@cluster-proxy/protocol";
import { DESTINATION_REFUSED_CODE } from "./destination-policy.js";
import type { EndpointDialFailureReason } from "../metrics.js";

/** How the agent maps dial addresses: its own cluster name goes to the kube-apiserver. */
export interface EndpointAddressing {
  /** This agent's cluster name ("" = no mapping). */
  clusterName: string;
  /** Where `<clusterName>:<port>` goes: `host:port` exactly, or a bare host keeping the port. */
  apiserverAddress: string;
}

/** Strip `[` `]` from a bracketed IPv6 literal. */
function unbracket(host: string): string {
  return host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
}

/**
 * The address to actually dial for a DIAL_REQ address. `<clusterName>:<port>` (exact,
 * case-sensitive host match) goes to the apiserver address: that exact address when it has a
 * port, else its host with the requested port. Everything else is dialled as given. No DNS is
 * involved in the mapping, so cluster names that start with a digit work.
 */
export function resolveEndpointAddress(address: string, addressing: EndpointAddressing): string {
  const { clusterName, apiserverAddress } = addressing;
  if (!clusterName) return address;
  const requested = parseHostPort(address);
  const host = requested ? requested.host : address;
  if (host !== clusterName) return address;
  if (parseHostPort(apiserverAddress)) return apiserverAddress;
  // No port on the apiserver address: keep the requested one (if the request had none, the
  // dial fails with Go's "missing port in address").
  return requested ? joinHostPort(unbracket(apiserverAddress), requested.port) : apiserverAddress;
}

/** A failed endpoint dial: Go-style text for DIAL_RSP.error and the metric reason. */
export interface DialFailure {
  message: string;
  reason: EndpointDialFailureReason;
}

/** What the dialer opens sockets with (injectable so tests can simulate a dial that hangs). */
export type SocketConnector = (options: net.NetConnectOpts) => net.Socket;

/** The connector used when none is injected: `net.connect`. */
export const defaultConnector: SocketConnector = (options) => net.connect(options);

/** Go's wording of the socket errors a dial can end with. */
const GO_ERRNO_TEXT: Record<string, string> = {
  ECONNREFUSED: "connection refused",
  ECONNRESET: "connection reset by peer",
  EHOSTUNREACH: "no route to host",
  ENETUNREACH: "network is unreachable",
  ENETDOWN: "network is down",
  ETIMEDOUT: "i/o timeout",
  EADDRNOTAVAIL: "cannot assign requested address",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  EMFILE: "too many open files",
  ENFILE: "too many open files in system",
};

interface SystemError extends Error {
  code?: string;
  syscall?: string;
  hostname?: string;
  address?: string;
  port?: number;
  errors?: unknown[];
}

/**
 * Translate a Node socket error into Go's `net.Dial` error text, e.g.
 * `dial tcp 127.0.0.1:1: connect: connection refused` or
 * `dial tcp: lookup nosuch.example: no such host`.
 */
export function goDialErrorText(protocol: string, target: string, error: Error): string {
  let err = error as SystemError;
  // happy-eyeballs (autoSelectFamily) reports an AggregateError of the per-address attempts
  if (!err.code && Array.isArray(err.errors) && err.errors[0] instanceof Error) err = err.errors[0];
  const code = err.code ?? "";
  // the destination policy's refusal is our own text, sent as is
  if (code === DESTINATION_REFUSED_CODE) return err.message;
  const parsed = parseHostPort(target);
  const host = parsed?.host ?? target;
  switch (code) {
    case "ENOTFOUND":
      return `dial ${protocol}: lookup ${err.hostname ?? host}: no such host`;
    case "EAI_AGAIN":
      return `dial ${protocol}: lookup ${err.hostname ?? host}: temporary failure in name resolution (server misbehaving)`;
    case "EAI_FAIL":
    case "EAI_NODATA":
    case "EAI_NONAME":
      return `dial ${protocol}: lookup ${err.hostname ?? host}: no such host`;
  }
  const remote = err.address !== undefined && err.port !== undefined ? joinHostPort(err.address, err.port) : target;
  const text = GO_ERRNO_TEXT[code];
  if (text) return `dial ${protocol} ${remote}: ${err.syscall ?? "connect"}: ${text}`;
  return `dial ${protocol} ${remote}: ${err.message}`;
}

/**
 * Dial `target` (host:port) over TCP. Calls `done` exactly once: with a connected socket, or
 * with a failure worded like Go's. Returns a cancel function: after it, `done` is never called
 * and any socket (connecting or connected) is destroyed. The timeout is on `timers` (default the
 * kit's `realClock`).
 */
export function dialEndpoint(
  protocol: string,
  target: string,
  timeoutMs: number,
  done: (failure: DialFailure | undefined, socket?: net.Socket) => void,
  connect: SocketConnector = defaultConnector,
  timers: Timers = realClock,
): () => void {
  let settled = false;
  const finish = (failure: DialFailure | undefined, socket?: net.Socket): void => {
    if (settled) return;
    settled = true;
    done(failure, socket);
  };
  const family = protocol === "tcp4" ? 4 : protocol === "tcp6" ? 6 : 0;
  if (protocol !== "tcp" && family === 0) {
    finish({ message: `dial ${protocol}: unknown network ${protocol}`, reason: "unknown" });
    return () => undefined;
  }
  const hp = parseHostPort(target);
  if (!hp) {
    const why = /:\d*$/.test(target) && !target.endsWith("]") ? "invalid port" : "missing port in address";
    finish({ message: `dial ${protocol}: address ${target}: ${why}`, reason: "unknown" });
    return () => undefined;
  }
  const socket = connect({ host: hp.host, port: hp.port, ...(family ? { family } : {}) });
  const timer = timers.setTimeout(() => {
    socket.destroy();
    finish({ message: `dial ${protocol} ${target}: i/o timeout`, reason: "timeout" });
  }, timeoutMs);
  const onError = (err: Error): void => {
    timers.clearTimeout(timer);
    socket.destroy();
    const message = goDialErrorText(protocol, target, err);
    const code = (err as SystemError).code;
    const reason = code === "ETIMEDOUT" ? "timeout" : code === DESTINATION_REFUSED_CODE ? "policy" : "unknown";
    finish({ message, reason });
  };
  socket.once("error", onError);
  socket.once("connect", () => {
    timers.clearTimeout(timer);
    socket.off("error", onError);
    finish(undefined, socket);
  });
  return () => {
    if (settled) return;
    settled = true;
    timers.clearTimeout(timer);
    socket.destroy();
  };
}
