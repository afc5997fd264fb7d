/**
 * The agent upgrade door (`--agent-upgrade-port`, entrypoint type PortForward): answers the agent's
 * `Upgrade: cluster-proxy-agent-tunnel` with 101 and hands the socket to the agent port; grants nothing.
 * Design: docs/design/portforward.md#the-path
 */
import * as http from "@cluster-proxy/kit/http";
import type * as net from "node:net";
import { AGENT_UPGRADE_PROTOCOL } from "@cluster-proxy/api";

/** Why the door refused a connection. */
export type UpgradeRefusal = "not_upgrade" | "wrong_method" | "wrong_protocol" | "bad_request" | "header_timeout";

export interface AgentUpgradeDoorOptions {
  /** The whole request head must have arrived this long after the connection was accepted (ms). */
  headerTimeoutMs: number;
  /** Receives each upgraded socket, paused, with any bytes after the head pushed back. */
  handOver: (socket: net.Socket) => void;
  /** Called once per refused request. */
  onRefused?: (reason: UpgradeRefusal, remote: string | undefined) => void;
}

/** Largest request head accepted (the apiserver adds its X-Forwarded-* headers). */
const MAX_HEAD_BYTES = 16 * 1024;

function answer(status: number, text: string, extra = ""): string {
  const body = `${text}\n`;
  return (
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ""}\r\nConnection: close\r\n${extra}` +
    `Content-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
  );
}

/** Whether a `Connection`/`Upgrade` header value lists `token` (case-insensitive). */
function lists(value: string | undefined, token: string): boolean {
  return (value ?? "")
    .split(",")
    .map((t) => t.trim().toLowerCase())
    .includes(token.toLowerCase());
}

/** An HTTP server (not yet listening) that is the agent upgrade door. */
export function createAgentUpgradeDoor(options: AgentUpgradeDoorOptions): http.Server {
  const refused = (reason: UpgradeRefusal, socket: net.Socket): void =>
    options.onRefused?.(reason, socket.remoteAddress);
  const server = http.createServer(
    {
      headersTimeout: options.headerTimeoutMs,
      requestTimeout: options.headerTimeoutMs,
      connectionsCheckingInterval: Math.max(50, Math.min(1_000, Math.floor(options.headerTimeoutMs / 4))),
      maxHeaderSize: MAX_HEAD_BYTES,
      keepAlive: false,
    },
    (req, res) => {
      refused("not_upgrade", req.socket);
      res.shouldKeepAlive = false;
      res.writeHead(426, {
        Connection: "close",
        Upgrade: AGENT_UPGRADE_PROTOCOL,
        "Content-Type": "text/plain; charset=utf-8",
      });
      res.end(`this port only upgrades to ${AGENT_UPGRADE_PROTOCOL} (the cluster-proxy agent's tunnel)\n`);
    },
  );
  server.on("upgrade", (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
    socket.on("error", () => undefined);
    if (req.method !== "GET") {
      refused("wrong_method", socket);
      socket.end(answer(400, `only GET upgrades (got ${req.method ?? "?"})`));
      return;
    }
    if (!lists(req.headers.upgrade, AGENT_UPGRADE_PROTOCOL) || !lists(req.headers.connection, "upgrade")) {
      refused("wrong_protocol", socket);
      socket.end(answer(400, `only Upgrade: ${AGENT_UPGRADE_PROTOCOL} is served here`));
      return;
    }
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${AGENT_UPGRADE_PROTOCOL}\r\n\r\n`,
    );
    socket.pause();
    // The http server accepts its sockets half-open, and the agent port's TLS socket made over this
    // one inherits that: a FIN from the apiserver (the agent has gone) would only end the reading
    // half, and the agent's session would stay open with no news of its end for ever (a draining
    // server cannot ping). Accepted on the agent port itself, a socket closes on the peer's FIN.
    socket.allowHalfOpen = false;
    if (head.length > 0) socket.unshift(head);
    options.handOver(socket);
  });
  server.on("clientError", (err: NodeJS.ErrnoException, socket: net.Socket) => {
    const timedOut = err.code === "ERR_HTTP_REQUEST_TIMEOUT" || err.code === "ERR_HTTP_HEADERS_TIMEOUT";
    refused(timedOut ? "header_timeout" : "bad_request", socket);
    if (socket.writable && !timedOut) socket.end(answer(400, "malformed request"));
    else socket.destroy();
  });
  return server;
}
