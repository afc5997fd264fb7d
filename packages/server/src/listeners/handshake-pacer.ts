/**
 * Admission and pacing of TLS handshakes on a port: at most `maxConcurrent` at a time, a connection
 * queued only with its complete ClientHello, turns round-robin over sources, shedding past `maxPending`.
 * Design: docs/design/decisions.md#the-handshake-pacer-and-its-ledger
 */
import * as net from "node:net";
import type * as tls from "node:tls";
import { realClock, type Clock } from "@cluster-proxy/kit";
import { AdmissionLedger, sourceKey, type AdmissionDropReason } from "./admission-ledger.js";
import { classifyFirstBytes, clientHelloTicket } from "./first-bytes.js";

/** The TLS alert record a shedding server answers a ClientHello with: fatal `user_canceled` (90). */
export const SHED_ALERT = Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 90]);

/** How long one handshake may hold a slot before the next waiting connection starts anyway. */
export const SLOT_MS = 2_000;

/**
 * What a handshake that offers a session ticket costs against `maxConcurrent`, a full handshake
 * costing 1: the server CPU of a resumed connection against a full one, measured (docs/design/
 * performance-notes.md, "What the pacer charges a resumption"). Only a ticket of one of the port's
 * keys (`resumable`) is charged this: any other turns into a full handshake, and is charged 1 (else
 * anyone could run 1 / this as many full handshakes at once as `maxConcurrent` allows). A ticket of
 * the port's keys can still end in a full handshake (the client offers no cipher suite of the
 * ticket's hash, or no PSK mode, or the ticket is past its lifetime): such a handshake is charged
 * the rest of a full slot afterwards, for as long again as it ran (see {@link HandshakePacer}).
 */
export const RESUMED_HANDSHAKE_COST = 0.5;

/** How long a refused connection may take to read our answer (a 400, an alert) before it is closed. */
const ANSWER_LINGER_MS = 2_000;

/** Why the pacer closed a connection before its handshake. */
export type DropReason =
  | AdmissionDropReason
  /** No complete ClientHello within `helloTimeoutMs`. */
  | "hello_timeout"
  /** A plain HTTP request on this TLS port (answered with a 400). */
  | "http_request"
  /** Bytes that are not TLS. */
  | "not_tls";

export interface HandshakePacerOptions {
  /** TLS handshakes in progress at most (>= 1). */
  maxConcurrent: number;
  /** Connections with a ClientHello waiting for their turn at most; beyond, new ones are shed (>= 0). */
  maxPending: number;
  /** Unfinished connections per source address (>= 1; default: no limit). */
  maxPerSource?: number;
  /** Connections waiting for their ClientHello (>= 1; default: no limit); the oldest is closed for a new one. */
  maxAwaitingHello?: number;
  /** A connection must have sent its ClientHello this long after it was accepted (ms; default 10 s). */
  helloTimeoutMs?: number;
  /** TCP keepalive idle time of accepted connections (ms; 0 or absent: off). */
  tcpKeepaliveMs?: number;
  /** What plain HTTP on this port is answered with (default: nothing, the connection is closed). */
  httpAnswer?: Buffer;
  /** The deadlines' clock (tests drive it; default the kit's `realClock`). */
  clock?: Clock;
  /**
   * The TLS server that handshakes a connection offering `ticket` (the first PSK identity of its
   * ClientHello), when not `tlsServer` (the previous ticket key's twin, see ticket-keys.ts).
   */
  route?: (ticket: Buffer) => net.Server | undefined;
  /**
   * Whether a server of this port may resume the session of `ticket` (it was made with one of the
   * port's ticket keys: key name and HMAC): only then is its handshake charged `resumedCost`. Absent: no ticket is
   * resumable, every handshake costs 1.
   */
  resumable?: (ticket: Buffer) => boolean;
  /** The cost of a handshake that offers a `resumable` ticket (default {@link RESUMED_HANDSHAKE_COST}). */
  resumedCost?: number;
  /** Called once per shed connection. */
  onShed?: (socket: net.Socket) => void;
  /** Called once per connection closed before its handshake, with why. */
  onDrop?: (socket: net.Socket, reason: DropReason, detail?: string) => void;
}

/** A snapshot of the pacer's queue (for metrics and tests). */
export interface PacerState {
  handshaking: number;
  /**
   * The handshakes in progress weighed by their cost (full 1, resumed `resumedCost`), and what
   * handshakes charged as resumptions that turned into full ones still owe: held against `maxConcurrent`.
   */
  load: number;
  /** Connections with a ClientHello waiting for a slot. */
  waiting: number;
  /** Connections that have not sent their ClientHello yet. */
  awaitingHello: number;
  shed: number;
}

/**
 * Accepts connections for `tlsServer` (a `tls.Server` or HTTP/2 secure server, which start the
 * handshake on their "connection" event) and feeds them to it at a bounded rate. Listen on
 * {@link server} instead of `tlsServer`.
 *
 * Whether a handshake resumed is known only when it ends (the TLS server tells nothing before),
 * so one charged `resumedCost` that did not end as a resumption (a full handshake, or one that
 * failed) owes `1 - resumedCost` of a slot for as long again as it ran (at most {@link SLOT_MS}):
 * over time it has held what a full handshake holds.
 */
export class HandshakePacer {
  /** The listening server; its connections are fed to the TLS server. */
  readonly server: net.Server;
  private readonly ledger: AdmissionLedger<net.Socket>;
  private handshaking = 0;
  /** {@link handshaking} weighed by cost. */
  private load = 0;
  /** What ended handshakes owe (see the class comment), and how many owe it. */
  private debt = 0;
  private debtors = 0;
  private shedCount = 0;
  /** The ticket each waiting connection's ClientHello offers (none: a full handshake). */
  private readonly tickets = new WeakMap<net.Socket, Buffer>();
  /** The cost of each connection with a ClientHello (see {@link costOf}). */
  private readonly costs = new WeakMap<net.Socket, number>();
  /** TLS servers whose "secureConnection" ends a turn. */
  private readonly watched = new WeakSet<net.Server>();
  /** Raw sockets whose handshake runs, and what ends their turn (told whether it resumed, when known). */
  private readonly inHandshake = new Map<net.Socket, (resumed?: boolean) => void>();
  /** Sockets waiting for their ClientHello, and what stops reading it. */
  private readonly readingHello = new Map<net.Socket, () => void>();
  private readonly clock: Clock;

  constructor(
    private readonly tlsServer: net.Server,
    private readonly options: HandshakePacerOptions,
  ) {
    this.clock = options.clock ?? realClock;
    this.ledger = new AdmissionLedger({
      maxPerSource: options.maxPerSource ?? Number.MAX_SAFE_INTEGER,
      maxAwaitingHello: options.maxAwaitingHello ?? Number.MAX_SAFE_INTEGER,
      maxQueued: options.maxPending,
    });
    this.server = net.createServer({ pauseOnConnect: true }, (socket) => this.accept(socket));
    this.watch(tlsServer);
  }

  private watch(tlsServer: net.Server): void {
    if (this.watched.has(tlsServer)) return;
    this.watched.add(tlsServer);
    // The TLS server wraps each raw socket in a TLSSocket whose `_parent` is the raw socket.
    tlsServer.on("secureConnection", (tlsSocket: tls.TLSSocket & { _parent?: net.Socket }) => {
      if (tlsSocket._parent) this.inHandshake.get(tlsSocket._parent)?.(tlsSocket.isSessionReused());
    });
  }

  /**
   * Whether a handshake of `cost` may start now: it fits under `maxConcurrent` with the load (else
   * a full handshake starting beside a resumption that turns out full would take the port past
   * `maxConcurrent` full handshakes for as long as both run, which no debt pays back), or
   * nothing holds the port.
   */
  private fits(cost: number): boolean {
    const held = this.load + this.debt;
    return held < 1e-9 || held + cost <= this.options.maxConcurrent + 1e-9;
  }

  /**
   * What `socket`'s handshake costs: {@link RESUMED_HANDSHAKE_COST} for a `resumable` ticket, else
   * 1 (checked once per connection).
   */
  private costOf(socket: net.Socket): number {
    let cost = this.costs.get(socket);
    if (cost === undefined) {
      const ticket = this.tickets.get(socket);
      const resumable = ticket !== undefined && this.options.resumable?.(ticket) === true;
      cost = resumable ? (this.options.resumedCost ?? RESUMED_HANDSHAKE_COST) : 1;
      this.costs.set(socket, cost);
    }
    return cost;
  }

  state(): PacerState {
    const counts = this.ledger.counts();
    return {
      handshaking: this.handshaking,
      load: this.load + this.debt,
      waiting: counts.queued,
      awaitingHello: counts.awaitingHello,
      shed: this.shedCount,
    };
  }

  /** Drop every connection still waiting for its ClientHello or its turn (at shutdown). */
  dropWaiting(): void {
    for (const [socket, stop] of [...this.readingHello]) {
      stop();
      this.ledger.finished(socket);
      socket.destroy();
    }
    for (let socket = this.ledger.next(); socket; socket = this.ledger.next()) socket.destroy();
  }

  private accept(socket: net.Socket): void {
    socket.on("error", () => undefined);
    const arrival = this.ledger.arrive(socket, sourceKey(socket.remoteAddress));
    for (const { conn, reason } of arrival.evicted) this.drop(conn, reason);
    if (!arrival.admitted) {
      this.drop(socket, "source_limit");
      return;
    }
    const keepalive = this.options.tcpKeepaliveMs ?? 0;
    if (keepalive > 0) socket.setKeepAlive(true, keepalive);
    socket.once("close", () => {
      this.readingHello.get(socket)?.();
      this.ledger.finished(socket);
    });
    this.readHello(socket);
  }

  /** Read the first bytes until they make a complete ClientHello, then queue the connection. */
  private readHello(socket: net.Socket): void {
    let bytes: Buffer = Buffer.alloc(0);
    const stop = (): void => {
      this.clock.clearTimeout(deadline);
      socket.off("data", onData);
      this.readingHello.delete(socket);
    };
    const deadline = this.clock.setTimeout(
      () => this.drop(socket, "hello_timeout"),
      this.options.helloTimeoutMs ?? 10_000,
    );
    const onData = (chunk: Buffer): void => {
      bytes = bytes.length === 0 ? chunk : Buffer.concat([bytes, chunk]);
      const seen = classifyFirstBytes(bytes);
      switch (seen.kind) {
        case "incomplete":
          return;
        case "http":
          this.answerAndDrop(socket, this.options.httpAnswer, "http_request");
          return;
        case "not-tls":
          this.drop(socket, "not_tls", seen.reason);
          return;
        case "client-hello":
          stop();
          socket.pause();
          this.noteTicket(socket, bytes);
          // The TLS server reads what the socket holds before reading on (TLSSocket's set-up).
          socket.unshift(bytes);
          this.helloed(socket);
      }
    };
    this.readingHello.set(socket, stop);
    socket.on("data", onData);
    socket.resume();
  }

  private noteTicket(socket: net.Socket, hello: Buffer): void {
    const ticket = clientHelloTicket(hello);
    if (ticket) this.tickets.set(socket, ticket);
  }

  private helloed(socket: net.Socket): void {
    // Past maxPending only one that starts at once: none waits before it, and it fits.
    const startsNow = this.ledger.peek() === undefined && this.fits(this.costOf(socket));
    if (this.ledger.helloed(socket, startsNow) === "shed") {
      this.shed(socket);
      return;
    }
    this.next();
  }

  private begin(socket: net.Socket, cost: number): void {
    const ticket = this.tickets.get(socket);
    this.tickets.delete(socket);
    this.costs.delete(socket);
    const server = (ticket ? this.options.route?.(ticket) : undefined) ?? this.tlsServer;
    this.watch(server);
    this.handshaking++;
    this.load += cost;
    const began = this.clock.now();
    let holding = true;
    const release = (): void => {
      if (!holding) return;
      holding = false;
      this.clock.clearTimeout(slot);
      this.handshaking--;
      this.load = this.handshaking === 0 ? 0 : this.load - cost;
      this.next();
    };
    const slot = this.clock.setTimeout(release, SLOT_MS);
    this.inHandshake.set(socket, (resumed) => {
      this.inHandshake.delete(socket);
      this.ledger.finished(socket);
      // Owed before the slot is let go, so the turn that takes it sees the debt.
      if (cost < 1 && resumed !== true) this.owe(1 - cost, Math.min(this.clock.now() - began, SLOT_MS));
      release();
    });
    // A failed handshake destroys the raw socket; a good one shows as "secureConnection".
    socket.once("close", () => this.inHandshake.get(socket)?.());
    server.emit("connection", socket);
  }

  /** Hold `share` of a slot for `ms` more (see the class comment). */
  private owe(share: number, ms: number): void {
    if (ms <= 0) return;
    this.debt += share;
    this.debtors++;
    this.clock.setTimeout(() => {
      this.debtors--;
      this.debt = this.debtors === 0 ? 0 : this.debt - share;
      this.next();
    }, ms);
  }

  private next(): void {
    // In admission order whatever each costs: a cheap resumption never overtakes a full
    // handshake that waits longer; it only lets more handshakes run at once.
    for (let socket = this.ledger.peek(); socket; socket = this.ledger.peek()) {
      if (socket.destroyed) {
        this.ledger.next();
        this.ledger.finished(socket);
        continue;
      }
      const cost = this.costOf(socket);
      if (!this.fits(cost)) return;
      this.ledger.next();
      this.begin(socket, cost);
    }
  }

  /** Close `socket` before its handshake (it never had a turn). */
  private drop(socket: net.Socket, reason: DropReason, detail?: string): void {
    this.readingHello.get(socket)?.();
    this.ledger.finished(socket);
    this.options.onDrop?.(socket, reason, detail);
    socket.destroy();
  }

  /** Send `answer` (if any), then close; read and discard what the client still sends meanwhile. */
  private answerAndDrop(socket: net.Socket, answer: Buffer | undefined, reason: DropReason): void {
    if (!answer) {
      this.drop(socket, reason);
      return;
    }
    this.readingHello.get(socket)?.();
    this.ledger.finished(socket);
    this.options.onDrop?.(socket, reason);
    this.linger(socket);
    socket.end(answer);
  }

  private shed(socket: net.Socket): void {
    this.shedCount++;
    this.options.onShed?.(socket);
    this.linger(socket);
    socket.end(SHED_ALERT);
  }

  /**
   * Keep reading (and discarding) a socket we answered and ended, so that the answer is not lost
   * to a reset for unread bytes; close it after {@link ANSWER_LINGER_MS} at most.
   */
  private linger(socket: net.Socket): void {
    const timer = this.clock.setTimeout(() => socket.destroy(), ANSWER_LINGER_MS);
    socket.once("close", () => this.clock.clearTimeout(timer));
    socket.removeAllListeners("data");
    socket.on("data", () => undefined);
    socket.resume();
  }
}
