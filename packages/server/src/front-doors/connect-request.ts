/**
 * HTTP CONNECT front door, wire side: parsing the request head and the exact responses the Go
 * proxy-server (v0.34+) writes for each outcome (docs/design/protocol.md, section 3).
 */
import { DESTINATION_POLICY_REFUSAL } from "@cluster-proxy/api";
import { DialErrors, parseHostPort } from "@cluster-proxy/protocol";

/** Largest request head we accept before answering 431. */
export const MAX_CONNECT_HEAD_BYTES = 16 * 1024;

/** The exact success response: no headers, the tunnel starts right after it. */
export const CONNECT_ESTABLISHED = Buffer.from("HTTP/1.1 200 Connection Established\r\n\r\n", "latin1");

/** Outcome of feeding bytes to {@link parseConnectHead}. */
export type ConnectHead =
  | { kind: "incomplete" }
  | {
      kind: "connect";
      address: string;
      rest: Buffer;
      /** The cluster a `Proxy-Authorization: Basic` header named (our extension), if any. */
      cluster?: string;
    }
  | { kind: "reject"; response: Buffer; reason: string };

const END_OF_HEAD = Buffer.from("\r\n\r\n", "latin1");

/**
 * Parse the request head in `buffered`. A CONNECT to `host:port` yields the dial address
 * (the request target verbatim, as Go uses it; the Host header is ignored) and the bytes the
 * client pipelined after the head.
 */
export function parseConnectHead(buffered: Buffer): ConnectHead {
  const end = buffered.indexOf(END_OF_HEAD);
  if (end < 0) {
    if (buffered.length > MAX_CONNECT_HEAD_BYTES) {
      return reject(431, "Request Header Fields Too Large", "request header too large\n", "head too large");
    }
    return { kind: "incomplete" };
  }
  const head = buffered.subarray(0, end).toString("latin1");
  const rest = buffered.subarray(end + END_OF_HEAD.length);
  const requestLine = head.split("\r\n", 1)[0] ?? "";
  const m = /^([A-Za-z]+) (\S+) HTTP\/1\.[01]$/.exec(requestLine);
  if (!m) return reject(400, "Bad Request", "malformed HTTP request line\n", "malformed request line");
  const method = m[1] ?? "";
  const target = m[2] ?? "";
  if (method !== "CONNECT") {
    return reject(
      405,
      "Method Not Allowed",
      "this proxy only supports CONNECT passthrough\n",
      `method ${method} not allowed`,
    );
  }
  if (!parseHostPort(target)) {
    return reject(
      400,
      "Bad Request",
      `CONNECT target "${target}" must be host:port with a port in 1-65535 (IPv6 as [addr]:port)\n`,
      `bad CONNECT target ${JSON.stringify(target)}`,
    );
  }
  const cluster = clusterFromProxyAuthorization(head);
  if (cluster === null) {
    return reject(
      400,
      "Bad Request",
      "Proxy-Authorization: Basic user name must be a cluster name (lower-case DNS labels) with an empty password\n",
      "bad cluster in Proxy-Authorization",
    );
  }
  const address = cluster ? qualifyWithCluster(target, cluster) : target;
  if (!address) {
    return reject(400, "Bad Request", "an IPv6 target cannot be qualified with a cluster name\n", "IPv6 with cluster");
  }
  return cluster ? { kind: "connect", address, rest, cluster } : { kind: "connect", address, rest };
}

/** The kube-apiserver's name inside every cluster (and in every apiserver certificate). */
export const APISERVER_SERVICE_NAME = "kubernetes.default.svc";

/**
 * The cluster named by the proxy URL's user name (`https://<cluster>:@proxy:8093` makes Go's
 * net/http, and so kubectl's `proxy-url`, send `Proxy-Authorization: Basic base64("<cluster>:")`).
 * undefined without such a header (other schemes are ignored, as Go's server ignores the header);
 * null when a Basic header names no valid cluster.
 */
export function clusterFromProxyAuthorization(head: string): string | undefined | null {
  const line = head
    .split("\r\n")
    .slice(1)
    .find((l) => /^proxy-authorization:/i.test(l));
  const m = /^proxy-authorization:\s*basic\s+(\S+)\s*$/i.exec(line ?? "");
  if (!m) return undefined;
  const decoded = Buffer.from(m[1]!, "base64").toString("utf8");
  const [user, ...password] = decoded.split(":");
  if (password.join(":") !== "" || !user || !/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(user)) return null;
  return user;
}

/**
 * `<host>:<port>` inside `cluster` (the `<host>.<cluster>:<port>` addressing). The apiserver's
 * in-cluster name `kubernetes.default.svc` becomes `<cluster>:<port>`, the cluster's kube-apiserver
 * as its agent knows it (--apiserver-address). A target that is already `<cluster>:<port>` or
 * `<host>.<cluster>:<port>` is kept; undefined for an IPv6 host.
 */
export function qualifyWithCluster(target: string, cluster: string): string | undefined {
  const hp = parseHostPort(target)!;
  if (hp.host.includes(":")) return undefined;
  if (hp.host === APISERVER_SERVICE_NAME) return `${cluster}:${hp.port}`;
  if (hp.host === cluster || hp.host.endsWith(`.${cluster}`)) return target;
  return `${hp.host}.${cluster}:${hp.port}`;
}

function reject(status: number, text: string, body: string, reason: string): ConnectHead {
  return { kind: "reject", response: textResponse(status, text, body), reason };
}

/** A complete `Connection: close` text/plain response, as Go's `http.Error` writes it. */
export function textResponse(status: number, statusText: string, body: string): Buffer {
  const b = Buffer.from(body, "utf8");
  return Buffer.concat([
    Buffer.from(
      `HTTP/1.1 ${status} ${statusText}\r\nContent-Type: text/plain; charset=utf-8\r\n` +
        `X-Content-Type-Options: nosniff\r\nContent-Length: ${b.length}\r\nConnection: close\r\n\r\n`,
      "latin1",
    ),
    b,
  ]);
}

/**
 * The answer to a CONNECT that arrives while the server drains (SIGTERM): nothing went to any
 * agent, so the client may send it again on a new connection (another replica behind the Service).
 */
export const DRAINING_RESPONSE = textResponse(503, "Service Unavailable", `${DialErrors.serverDraining}\n`);

/** The raw response the Go server writes when no strategy finds an agent. */
export const NO_AGENT_RESPONSE = Buffer.from(
  `HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n\r\ncurrently no tunnels available: ${DialErrors.noAgent}`,
  "latin1",
);

/**
 * The answer when no agent serves `address`. Go clients (kubectl among them) report only the
 * status line's reason phrase of a failed CONNECT, so that is where the explanation goes:
 *
 * - the `Proxy-Authorization` header named `cluster` (our extension): 503 `No agent available for
 *   cluster <cluster>`, its agent is not connected (or does not serve the address);
 * - no header and the in-cluster apiserver name (`kubernetes.default.svc`): Go's status and body,
 *   with a reason phrase saying the proxy URL names no cluster (what a kubeconfig whose proxy-url
 *   lost its `<cluster>:@` user, or a client that dropped the header, sends);
 * - otherwise exactly Go's bytes ({@link NO_AGENT_RESPONSE}).
 */
export function noAgentResponse(address: string, cluster?: string): Buffer {
  if (cluster !== undefined) {
    return textResponse(
      503,
      `No agent available for cluster ${cluster}`,
      `currently no tunnels available: ${DialErrors.noAgent} for ${address} (no agent of cluster ${cluster} is connected to this proxy-server, or none serves this address)\n`,
    );
  }
  if (parseHostPort(address)?.host === APISERVER_SERVICE_NAME) {
    return Buffer.from(
      `HTTP/1.1 500 No agent available for ${address}: name the cluster in the proxy URL (https://<cluster>:@host:port)\r\n` +
        `Content-Type: text/plain\r\n\r\ncurrently no tunnels available: ${DialErrors.noAgent}`,
      "latin1",
    );
  }
  return NO_AGENT_RESPONSE;
}

const STATUS_TEXT: Record<number, string> = {
  403: "Forbidden",
  502: "Bad Gateway",
  503: "Service Unavailable",
  504: "Gateway Timeout",
};

/** Text our agent puts in every DIAL_RSP error its destination policy refuses (from the error catalog). */
export { DESTINATION_POLICY_REFUSAL };

/**
 * HTTP status for an agent's dial error text: our agent's destination-policy refusals 403 (the
 * Go server would answer 502: it does not know the text), timeouts 504, file-descriptor
 * exhaustion 503, everything else (refused, reset, unreachable, DNS, TLS, unknown) 502.
 */
export function dialErrorStatus(errorText: string): 403 | 502 | 503 | 504 {
  if (errorText.includes(DESTINATION_POLICY_REFUSAL)) return 403;
  const t = errorText.toLowerCase();
  if (t.includes("timeout") || t.includes("deadline") || t.includes("timed out")) return 504;
  if (t.includes("too many open files")) return 503;
  return 502;
}

/** The response for an agent's DIAL_RSP error: mapped status, body = the agent's error text. */
export function dialErrorResponse(errorText: string): Buffer {
  const status = dialErrorStatus(errorText);
  return textResponse(status, STATUS_TEXT[status] ?? "Bad Gateway", errorText);
}

/**
 * 503: the agent stream went away before it answered the dial (its link is down: the agent pod
 * left, or its tunnel through the hub apiserver was cut) and no other agent took the dial. The Go
 * server answers `502 Backend context error`; a link that is down is a service unavailable for
 * now, and Go clients report only the reason phrase, so that names the cluster as
 * {@link noAgentResponse} does; the body is the relay's text.
 */
export function backendGoneResponse(detail: string, cluster?: string): Buffer {
  return textResponse(
    503,
    cluster === undefined ? "Service Unavailable" : `No agent available for cluster ${cluster}`,
    `${detail}\n`,
  );
}

/** 504: `--backend-dial-timeout` elapsed. */
export function backendDialTimeoutResponse(): Buffer {
  return textResponse(504, "Gateway Timeout", `Backend dial timeout: ${DialErrors.backendDialTimeout}`);
}

/** 502 (or 504 on a timeout): the DIAL_REQ could not be sent to the agent. */
export function dialSendFailedResponse(detail: string): Buffer {
  const status = dialErrorStatus(detail) === 504 ? 504 : 502;
  return textResponse(status, STATUS_TEXT[status] ?? "Bad Gateway", `Failed to tunnel dial request: ${detail}`);
}
