/**
 * Pacing of TLS handshakes on a port (issue 18: overload must degrade into slower success).
 *
 * A reconnect storm (every agent of a fleet dialling a restarted server within a second) used to
 * start every TLS handshake at once: the server's one thread worked on all of them in turn, each
 * finished late, the agents' deadlines expired, and their retries added more handshakes: the storm
 * fed itself. The pacer accepts the TCP connections itself and hands at most
 * `maxConcurrent` of them to the TLS server at a time, first come first served. The others wait,
 * accepted and untouched (a client sees a slow handshake, not an error), with no deadline of their
 * own: the TLS server's handshake timeout starts when a connection's turn comes. A handshake
 * holds its slot at most {@link SLOT_MS}: a peer that connects and sends nothing (or a very slow
 * one) cannot stall the queue; its handshake goes on, outside the count.
 *
 * Only when `maxPending` connections already wait does the server shed: a new connection gets a
 * TLS `user_canceled` alert as soon as its ClientHello arrives, so the client learns that the
 * server is overloaded (our agent backs off by `--sync-interval-cap` instead of retrying at once;
 * other clients see a TLS alert, not a hang). Shedding costs no handshake.
 */
import * as net from "node:net";

/** The TLS alert record a shedding server answers a ClientHello with: fatal `user_canceled` (90). */
export const SHED_ALERT = Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 90]);

/** How long one handshake may hold a slot before the next waiting connection starts anyway. */
export const SLOT_MS = 2_000;

/** How long a shed connection may take to send its ClientHello before it is dropped. */
const SHED_LINGER_MS = 5_000;

export interface HandshakePacerOptions {
  /** TLS handshakes in progress at most (>= 1). */
  maxConcurrent: number;
  /** Connections waiting for their turn at most; beyond, new ones are shed (>= 0). */
  maxPending: number;
  /** Called once per shed connection. */
  onShed?: (socket: net.Socket) => void;
}

/** A snapshot of the pacer's queue (for metrics and tests). */
export interface PacerState {
  handshaking: number;
  waiting: number;
  shed: number;
}

/**
 * Accepts connections for `tlsServer` (a `tls.Server` or HTTP/2 secure server, which start the
 * handshake on their "connection" event) and feeds them to it at a bounded rate. Listen on
 * {@link server} instead of `tlsServer`.
 */
export class HandshakePacer {
  /** The listening server; its connections are fed to the TLS server. */
  readonly server: net.Server;
  /** Connections waiting for a slot, oldest first (a Set: closing one is O(1)). */
  private readonly waiting = new Set<net.Socket>();
  private handshaking = 0;
  private shedCount = 0;
  /** Raw sockets whose handshake runs, and what ends their turn. */
  private readonly inHandshake = new Map<net.Socket, () => void>();

  constructor(
    private readonly tlsServer: net.Server,
    private readonly options: HandshakePacerOptions,
  ) {
    this.server = net.createServer({ pauseOnConnect: true }, (socket) => this.accept(socket));
    // The TLS server wraps each raw socket in a TLSSocket whose `_parent` is the raw socket.
    tlsServer.on("secureConnection", (tlsSocket: net.Socket & { _parent?: net.Socket }) => {
      if (tlsSocket._parent) this.inHandshake.get(tlsSocket._parent)?.();
    });
  }

  state(): PacerState {
    return { handshaking: this.handshaking, waiting: this.waiting.size, shed: this.shedCount };
  }

  /** Drop every connection still waiting (at shutdown). */
  dropWaiting(): void {
    const waiting = [...this.waiting];
    this.waiting.clear();
    for (const socket of waiting) socket.destroy();
  }

  private accept(socket: net.Socket): void {
    if (this.handshaking < this.options.maxConcurrent) {
      this.begin(socket);
      return;
    }
    if (this.waiting.size >= this.options.maxPending) {
      this.shed(socket);
      return;
    }
    this.waiting.add(socket);
    socket.on("error", () => undefined);
    socket.once("close", () => this.waiting.delete(socket));
  }

  private begin(socket: net.Socket): void {
    this.handshaking++;
    let holding = true;
    const release = (): void => {
      if (!holding) return;
      holding = false;
      clearTimeout(slot);
      this.handshaking--;
      this.next();
    };
    const slot = setTimeout(release, SLOT_MS);
    slot.unref();
    this.inHandshake.set(socket, () => {
      this.inHandshake.delete(socket);
      release();
    });
    // A failed handshake destroys the raw socket; a good one shows as "secureConnection".
    socket.once("close", () => this.inHandshake.get(socket)?.());
    socket.resume();
    this.tlsServer.emit("connection", socket);
  }

  private next(): void {
    for (const socket of this.waiting) {
      if (this.handshaking >= this.options.maxConcurrent) return;
      this.waiting.delete(socket);
      if (!socket.destroyed) this.begin(socket);
    }
  }

  private shed(socket: net.Socket): void {
    this.shedCount++;
    this.options.onShed?.(socket);
    socket.on("error", () => undefined);
    const timer = setTimeout(() => socket.destroy(), SHED_LINGER_MS);
    timer.unref();
    socket.once("close", () => clearTimeout(timer));
    socket.once("data", () => socket.end(SHED_ALERT));
    socket.resume();
  }
}
