/** Options shared by every way of reaching the hub: where the proxy server is and how to trust it. */
import { ConfigError } from "@cluster-proxy/errors";
import type * as tls from "node:tls";
import {
  loadTlsFilesSync,
  pemProblem,
  type FlagFile,
  type TlsFiles,
  type TlsSessionCache,
} from "@cluster-proxy/tunnel";
import { type Clock, type Logger } from "@cluster-proxy/kit";

/** Default time a dial may take before it is given up (konnectivity's 30 s backstop). */
export const DEFAULT_DIAL_TIMEOUT_MS = 30_000;

/** Default TCP keepalive idle time on a client's connection to the proxy server (see `tcpKeepaliveMs`). */
export const DEFAULT_TCP_KEEPALIVE_MS = 30_000;

/**
 * Where the hub's proxy server listens and the TLS material to reach it.
 *
 * Give either `udsPath` (a Unix socket, plain, protected by file permissions) or `host`/`port`
 * (TCP with mutual TLS: `ca` verifies the server, `cert`/`key` identify this client).
 */
export interface ProxyOptions {
  /** Host name or IP of the proxy server (default `127.0.0.1`). */
  host?: string;
  /** Port of the proxy server's front door (gRPC: 8090 by default in konnectivity deployments). */
  port?: number;
  /** Path of the server's Unix socket; when set, host/port and TLS are not used. */
  udsPath?: string;
  /** PEM CA bundle that the server certificate must chain to. */
  ca?: string | Buffer;
  /** PEM client certificate presented to the server. */
  cert?: string | Buffer;
  /** PEM private key of `cert`. */
  key?: string | Buffer;
  /** Name checked against the server certificate (default: `host` when it is a DNS name). */
  servername?: string;
}

/** Options of a {@link TunnelClient} and of the single-use {@link dial}. */
export interface TunnelClientOptions {
  /** Where the proxy server is. */
  proxy: ProxyOptions;
  /** Default limit for connecting plus dialing, in ms (default 30 000). */
  dialTimeoutMs?: number;
  /**
   * Interval of HTTP/2 keepalive pings on the session, in ms (default: off). Go proxy servers
   * answer pings more frequent than every 5 minutes with GOAWAY `too_many_pings`; only lower
   * this against servers that allow it.
   */
  keepaliveMs?: number;
  /**
   * TCP keepalive on the connection to the proxy server: ms of idle before the first probe
   * (default {@link DEFAULT_TCP_KEEPALIVE_MS}; 0: off). On Linux probes follow every second and a
   * server silent for 10 of them is dropped. Unlike pings it also guards a session the server is
   * draining (after its GOAWAY no ping can be sent): a server that vanished without a FIN mid-drain
   * then ends the dials still open through it within about this plus 10 s, instead of never.
   */
  tcpKeepaliveMs?: number;
  /** Where diagnostics go (default: nowhere). */
  logger?: Logger;
  /**
   * The clock of the dials' deadlines and of close()'s grace period (tests; default the kit's
   * `keepAliveClock`: a dial's wait keeps the process alive, as it is what its caller waits for).
   */
  clock?: Clock;
  /**
   * TLS session resumption with the proxy-server: where sessions are kept (default: the
   * process-wide cache every `dial`, `TunnelClient` and `dialConnect` shares, keyed by the
   * server's address and this client's certificate, key and CA, so a replaced certificate never
   * resumes the old one's sessions); `false`: every connection is a full handshake. A resumed
   * connection skips the certificate exchange; the server applies the same checks.
   */
  tlsSessions?: TlsSessionCache | false;
}

/** Per-dial options. */
export interface DialOptions {
  /** Abort the dial (sends DIAL_CLS); the promise rejects with a DialError of reason `context`. */
  signal?: AbortSignal;
  /** Give up after this many ms (sends DIAL_CLS); rejects with a DialError of reason `timeout`. */
  timeoutMs?: number;
}

/** Files holding the TLS material of a client, as usually mounted from a Secret. */
export interface ProxyTlsFiles {
  caFile?: string;
  certFile?: string;
  keyFile?: string;
}

/** PEM material loaded by {@link loadProxyTls}, ready to spread into {@link ProxyOptions}. */
export interface ProxyTls {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
}

/** The PEM options of {@link ProxyOptions} and what each must hold. */
const PEM_FIELDS = [
  { field: "ca", kind: "certificate" },
  { field: "cert", kind: "certificate" },
  { field: "key", kind: "key" },
] as const;

/**
 * What {@link pemProblem} said of each buffer already checked ("" : nothing wrong), with a copy of
 * the bytes it read: every single-use `dial` builds a client that checks its options, mostly the
 * same buffers each time, and parsing a CA, a certificate and a key costs about 0.2 ms of CPU (a
 * resumed TLS connection about 1.2 ms). A buffer whose bytes changed since (overwritten in place)
 * is checked again: comparing them costs microseconds.
 */
const checkedPems = {
  certificate: new WeakMap<Buffer, CheckedPem>(),
  key: new WeakMap<Buffer, CheckedPem>(),
};

interface CheckedPem {
  bytes: Buffer;
  problem: string;
}

function checkedPem(value: string | Buffer, kind: "certificate" | "key"): string | undefined {
  if (typeof value === "string") return pemProblem(value, kind);
  const memo = checkedPems[kind];
  let checked = memo.get(value);
  if (checked === undefined || !checked.bytes.equals(value)) {
    checked = { bytes: Buffer.from(value), problem: pemProblem(value, kind) ?? "" };
    memo.set(value, checked);
  }
  return checked.problem === "" ? undefined : checked.problem;
}

/**
 * The `ConfigError` naming the option for TLS material that is not what the option says (a CA
 * bundle without a certificate, a key that does not parse), or undefined when all is well: given
 * such a "CA", node trusts nothing and every connection fails as if the server's certificate
 * were wrong. `who` starts the message (e.g. `TunnelClient`).
 */
export function proxyTlsError(proxy: Pick<ProxyOptions, "ca" | "cert" | "key">, who: string): ConfigError | undefined {
  for (const { field, kind } of PEM_FIELDS) {
    const value = proxy[field];
    if (value === undefined) continue;
    const problem = checkedPem(value, kind);
    if (problem) return new ConfigError(`${who}: proxy.${field} ${problem}`);
  }
  return undefined;
}

/**
 * Read CA, certificate and key files (synchronously) into {@link ProxyTls}:
 * `{ proxy: { host, port, ...loadProxyTls({ caFile, certFile, keyFile }) } }`.
 * Throws a `TlsFileError` (code `CP_ERR_TLS_FILE`) naming the option (or, with `flags`, the flag
 * it came from) and the file that cannot be read or does not hold what it should (e.g. a
 * `caFile` without a PEM certificate, a key that is not the certificate's).
 */
export function loadProxyTls(files: ProxyTlsFiles, flags: Partial<Record<keyof ProxyTlsFiles, string>> = {}): ProxyTls {
  const named = (option: keyof ProxyTlsFiles): FlagFile | undefined => {
    const path = files[option];
    return path === undefined || path === "" ? undefined : { flag: flags[option] ?? option, path };
  };
  const tlsFiles: TlsFiles = {};
  const ca = named("caFile");
  const cert = named("certFile");
  const key = named("keyFile");
  if (ca) tlsFiles.ca = ca;
  if (cert) tlsFiles.cert = cert;
  if (key) tlsFiles.key = key;
  return loadTlsFilesSync(tlsFiles);
}

/** The node:tls options for the TLS fields of {@link ProxyOptions}. */
export function tlsOptionsOf(proxy: ProxyOptions): tls.ConnectionOptions {
  const out: tls.ConnectionOptions = {};
  if (proxy.ca !== undefined) out.ca = proxy.ca;
  if (proxy.cert !== undefined) out.cert = proxy.cert;
  if (proxy.key !== undefined) out.key = proxy.key;
  if (proxy.servername !== undefined) out.servername = proxy.servername;
  return out;
}

/** Human-readable location of the proxy server, for messages. */
export function describeProxy(proxy: ProxyOptions): string {
  if (proxy.udsPath) return `unix:${proxy.udsPath}`;
  const host = proxy.host ?? "127.0.0.1";
  return `${host.includes(":") ? `[${host}]` : host}:${proxy.port ?? "?"}`;
}
