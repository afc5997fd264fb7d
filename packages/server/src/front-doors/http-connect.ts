/**
 * The HTTP CONNECT front door, one socket at a time: read the head, dial through the relay, answer as
 * the Go server does, pump bytes both ways ({@link PayloadRelay} owns the packets and their framing).
 * Design: docs/design/protocol.md#3-http-connect-front-door
 */
import type { Socket } from "node:net";
import type { Logger, TimerHandle } from "@cluster-proxy/kit";
import type { DialFailure, PendingDial, TunnelConnection } from "../agents/backend.js";
import type { PayloadEnd, PayloadRelay } from "../routing/payload-relay.js";
import type { ServerMetrics } from "../metrics.js";
import {
  CONNECT_ESTABLISHED,
  backendDialTimeoutResponse,
  backendGoneResponse,
  dialErrorResponse,
  dialSendFailedResponse,
  noAgentResponse,
  DRAINING_RESPONSE,
  parseConnectHead,
  textResponse,
} from "./connect-request.js";
import { looksLikeTls } from "../listeners/first-bytes.js";
import { STREAM_BUFFER_BUDGET } from "./proxy-service.js";

/**
 * Go's `ReadHeaderTimeout` for the CONNECT server: the whole request head must arrive within this
 * time of the connection's start (an absolute deadline: a head trickled a byte at a time does not
 * extend it).
 */
export const CONNECT_HEAD_TIMEOUT_MS = 60_000;

/**
 * Bytes a client may send after its request head before the dial is answered (pipelined: they go
 * to the agent once the tunnel is open). The socket is read while the dial is pending, so that a
 * client that gives up (EOF, reset) is noticed at once and its dial cancelled (a dial may wait
 * for its agent during a new server's warm-up); past this many bytes reading pauses.
 */
export const DIALING_READ_LIMIT = 64 * 1024;

/** How long a rejected client may take to read the answer and close before the socket is destroyed. */
const REJECT_LINGER_MS = 5_000;

/** The plain CONNECT door's answer to a TLS ClientHello (the client then reports "not TLS" at once). */
export const TLS_ON_PLAIN_PORT_RESPONSE = textResponse(
  400,
  "Bad Request",
  "Client sent a TLS handshake to a plain HTTP port: this HTTP CONNECT port does not speak TLS.\n",
);

/** How a {@link ConnectDoorClient} is served. */
export interface ConnectSessionOptions {
  /** The door is plain (no TLS): a TLS ClientHello is answered at once. */
  plain?: boolean;
  /** Called when a TLS ClientHello arrives on a plain door. */
  onTlsOnPlainPort?: () => void;
  /** The request head deadline (ms; default {@link CONNECT_HEAD_TIMEOUT_MS}). */
  headTimeoutMs?: number;
}

type State = "head" | "dialing" | "open" | "closed";

/**
 * End a client socket with a TCP reset so the client sees an error, not a clean EOF. A TLS
 * socket (the mTLS door) has no TCP handle of its own to reset: it is destroyed instead.
 */
function resetSocket(socket: Socket): void {
  try {
    socket.resetAndDestroy();
  } catch {
    socket.destroy();
  }
}

/**
 * One client socket of the HTTP CONNECT door. `C` and `D` are the relay's handles of the
 * connection and of the pending dial ({@link PayloadRelay}), opaque here.
 */
export class ConnectDoorClient<C = TunnelConnection, D = PendingDial> implements PayloadEnd<C> {
  private state: State = "head";
  private head: Buffer = Buffer.alloc(0);
  private dial: D | undefined;
  /** The dial's address and the cluster the request's Proxy-Authorization named (for the no-agent answer). */
  private target: { address: string; cluster?: string } = { address: "" };
  private conn: C | undefined;
  private waitingForAgent = false;
  private pausedByAgent = false;
  /** Payload bytes written to the socket so far (with writableLength: what left it). */
  private written = 0;
  /** Ends the wait for the request head (cleared once it is complete or the socket closes). */
  private readonly headDeadline: TimerHandle;

  constructor(
    private readonly socket: Socket,
    private readonly relay: PayloadRelay<C, D>,
    private readonly metrics: ServerMetrics,
    private readonly log: Logger,
    private readonly options: ConnectSessionOptions = {},
  ) {
    metrics.httpConnections.inc();
    this.headDeadline = relay.clock.setTimeout(() => {
      if (this.state === "head") this.reject(textResponse(408, "Request Timeout", "request header timeout\n"));
    }, options.headTimeoutMs ?? CONNECT_HEAD_TIMEOUT_MS);
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("drain", () => {
      if (this.conn) this.relay.readerDrained(this.conn);
    });
    socket.on("error", (err) => this.log.debug({ err: err.message }, "CONNECT socket error"));
    socket.on("end", () => this.shutdown());
    socket.on("close", () => {
      this.shutdown();
      metrics.httpConnections.dec();
    });
  }

  private onData(chunk: Buffer): void {
    if (this.state === "open") {
      this.forward(chunk);
      return;
    }
    if (this.state === "dialing") {
      this.head = Buffer.concat([this.head, chunk]);
      if (this.head.length >= DIALING_READ_LIMIT) this.socket.pause();
      return;
    }
    if (this.state !== "head") return;
    if (this.head.length === 0 && this.options.plain && looksLikeTls(chunk)) {
      this.log.debug({}, "TLS ClientHello on the plain HTTP CONNECT port");
      this.options.onTlsOnPlainPort?.();
      this.reject(TLS_ON_PLAIN_PORT_RESPONSE);
      return;
    }
    this.head = this.head.length === 0 ? chunk : Buffer.concat([this.head, chunk]);
    const parsed = parseConnectHead(this.head);
    if (parsed.kind === "incomplete") return;
    if (parsed.kind === "reject") {
      this.log.debug({ reason: parsed.reason }, "refusing HTTP request");
      this.reject(parsed.response);
      return;
    }
    this.relay.clock.clearTimeout(this.headDeadline);
    this.head = Buffer.from(parsed.rest); // pipelined bytes, sent once the tunnel is open
    if (this.head.length >= DIALING_READ_LIMIT) this.socket.pause();
    this.state = "dialing";
    this.target = { address: parsed.address, cluster: parsed.cluster };
    this.dial = this.relay.dial(this, parsed.address);
  }

  /** Send client bytes to the agent, pausing the socket while the agent stream is over budget. */
  private forward(bytes: Buffer): void {
    const conn = this.conn;
    if (!conn || bytes.length === 0) return;
    const ok = this.relay.send(conn, bytes, STREAM_BUFFER_BUDGET);
    if (!ok && !this.waitingForAgent) {
      this.waitingForAgent = true;
      this.updateReading();
      this.relay.whenAgentDrained(conn, () => {
        this.waitingForAgent = false;
        this.updateReading();
      });
    }
  }

  /** Read the client unless the agent stream is backed up or the agent asked us to pause. */
  private updateReading(): void {
    if (this.state !== "open") return;
    if (this.waitingForAgent || this.pausedByAgent) this.socket.pause();
    else this.socket.resume();
  }

  private reject(response: Buffer): void {
    this.state = "closed";
    this.socket.end(response);
    // A client that never closes its side must not hold the socket.
    this.relay.clock.setTimeout(() => this.socket.destroy(), REJECT_LINGER_MS);
  }

  // ---- PayloadEnd ------------------------------------------------------------------------

  dialSucceeded(conn: C): void {
    this.dial = undefined;
    if (this.state !== "dialing") {
      this.relay.frontendClosed(conn);
      return;
    }
    this.conn = conn;
    this.state = "open";
    this.socket.write(CONNECT_ESTABLISHED);
    const pipelined = this.head;
    this.head = Buffer.alloc(0);
    this.forward(pipelined);
    this.updateReading();
  }

  dialFailed(failure: DialFailure): void {
    this.dial = undefined;
    if (this.state !== "dialing") return;
    this.log.debug({ kind: failure.kind, error: failure.text }, "CONNECT dial failed");
    switch (failure.kind) {
      case "no_agent":
      case "shutdown":
        this.reject(noAgentResponse(this.target.address, this.target.cluster ?? failure.cluster));
        return;
      case "draining":
        this.reject(DRAINING_RESPONSE);
        return;
      case "agent_error":
        this.reject(dialErrorResponse(failure.text));
        return;
      case "agent_gone":
        this.reject(backendGoneResponse(failure.text, failure.cluster ?? this.target.cluster));
        return;
      case "timeout":
        this.reject(backendDialTimeoutResponse());
        return;
      case "send_failed":
        this.reject(dialSendFailedResponse(failure.text));
        return;
      case "dial_closed":
        this.state = "closed";
        this.socket.destroy();
        return;
    }
  }

  data(_conn: C, payload: Uint8Array): number {
    if (this.state !== "open") return 0;
    this.written += payload.length;
    const started = performance.now();
    this.socket.write(payload);
    this.metrics.frontendWrite(started);
    return this.socket.writableLength;
  }

  delivered(_conn: C): number {
    return this.written - this.socket.writableLength;
  }

  buffered(_conn: C): number {
    return this.socket.writableLength;
  }

  pauseSource(_conn: C, paused: boolean): void {
    this.pausedByAgent = paused;
    this.updateReading();
  }

  /** The client stopped reading: reset the socket (the buffered bytes are dropped). */
  stallClose(_conn: C, why: string): void {
    this.log.debug({ why }, "CONNECT client stalled");
    this.conn = undefined;
    if (this.state === "closed") return;
    this.state = "closed";
    resetSocket(this.socket);
  }

  closed(_conn: C, cut?: string): void {
    this.conn = undefined;
    if (this.state === "closed") return;
    this.state = "closed";
    // A cut connection ends with a TCP reset so the client sees an error, not a clean EOF.
    if (cut) resetSocket(this.socket);
    else this.socket.end();
  }

  /** The client went away (or finished): tell the agent. */
  private shutdown(): void {
    this.relay.clock.clearTimeout(this.headDeadline);
    const previous = this.state;
    this.state = "closed";
    if (this.dial) {
      this.relay.cancelDial(this.dial);
      this.dial = undefined;
    }
    if (this.conn) {
      this.relay.frontendClosed(this.conn);
      this.conn = undefined;
    }
    if (previous !== "closed" && !this.socket.destroyed) this.socket.destroy();
  }
}
