/** The socket a successful dial returns: one tunnelled TCP connection as a `stream.Duplex`. */
import { Duplex } from "node:stream";
import { isIP } from "node:net";
import { PacketType, parseHostPort } from "@cluster-proxy/protocol";
import {
  ProtocolError,
  TunnelClosedError,
  sendData,
  sendPacket,
  type ClientCall,
  type StreamStatus,
} from "@cluster-proxy/tunnel";
import { type Logger } from "@cluster-proxy/kit";
import { finishProxyCall, packetOfFrame } from "./proxy-call.js";
import { errorMessage } from "@cluster-proxy/errors";

/** How long to wait for CLOSE_RSP after CLOSE_REQ before tearing the call down (as Go: 10 s). */
export const CLOSE_RESPONSE_TIMEOUT_MS = 10_000;

/** What the dial hands to a new {@link TunnelSocket}. Internal: sockets come from a dial. */
export interface TunnelSocketInit {
  call: ClientCall;
  connectID: bigint;
  address: string;
  random: bigint;
  logger: Logger;
  /** Called exactly once when the Proxy call is over. */
  release: () => void;
  /** Called when the socket's ref state changes (keeps the process alive or not). */
  setRef?: (ref: boolean) => void;
}

/**
 * One TCP connection to `address` inside a managed cluster, tunnelled through the hub.
 *
 * It behaves like a `net.Socket` for the usual consumers (HTTP clients, `tls.connect({socket})`,
 * `pipeline`):
 * - `write()` sends DATA packets (at most 64 KiB each); it returns false while the HTTP/2
 *   stream to the hub is full, and the write callback waits until the bytes are handed on.
 * - Incoming bytes are pushed as they arrive; when you stop reading, the tunnel stream is paused
 *   so HTTP/2 flow control pushes back on the sender.
 * - `'end'` (EOF) comes after every byte, when the remote end closed (CLOSE_RSP).
 * - **Half-close:** the konnectivity protocol has none. `end()` flushes what you wrote, then asks
 *   the hub to close the connection (CLOSE_REQ). Data the remote already had in flight is still
 *   delivered; then `'end'` follows. Do not expect to keep reading a response after `end()` the
 *   way a TCP half-close would allow: the remote side's socket is closed, not shut down.
 * - `destroy()` closes the connection at once (CLOSE_REQ) and discards unread data.
 * - If the tunnel itself dies (stream reset, session lost), the socket is destroyed with a
 *   `TunnelClosedError`.
 */
export class TunnelSocket extends Duplex {
  /** The id the agent gave this connection (int64). */
  readonly connectID: bigint;
  /** The `host:port` that was dialled (as sent in DIAL_REQ). */
  readonly address: string;
  /** The random id of the dial request, for correlating with server logs (int64). */
  readonly dialRandom: bigint;
  /** Host part of {@link address} (the remote end as the hub knows it). */
  readonly remoteAddress: string | undefined;
  /** Port part of {@link address}. */
  readonly remotePort: number | undefined;
  /** `IPv4`/`IPv6` when the dialled host is an IP literal, else undefined. */
  readonly remoteFamily: string | undefined;
  /** Always false: a TunnelSocket exists only once the dial succeeded. */
  readonly connecting = false;
  /** Always false (see {@link connecting}). */
  readonly pending = false;
  /** Bytes received from the remote end. */
  bytesRead = 0;
  /** Bytes accepted by `write()` and sent (or queued) to the hub. */
  bytesWritten = 0;

  private readonly call: ClientCall;
  private readonly logger: Logger;
  private readonly releaseCall: () => void;
  private readonly setRefHook: ((ref: boolean) => void) | undefined;
  private remoteClosed = false;
  private closeRequested = false;
  private callFinishing = false;
  private readPaused = false;
  private referenced = true;
  private pendingWrite: ((err?: Error | null) => void) | undefined;
  private closeWait: NodeJS.Timeout | undefined;
  private idleTimer: NodeJS.Timeout | undefined;

  /** @internal Sockets are created by `dial()`, `TunnelClient.dial()` and the agents. */
  constructor(init: TunnelSocketInit) {
    super({ allowHalfOpen: false, readableHighWaterMark: 256 * 1024, writableHighWaterMark: 64 * 1024 });
    this.call = init.call;
    this.connectID = init.connectID;
    this.address = init.address;
    this.dialRandom = init.random;
    this.logger = init.logger;
    this.releaseCall = init.release;
    this.setRefHook = init.setRef;
    const hp = parseHostPort(init.address);
    this.remoteAddress = hp?.host;
    this.remotePort = hp?.port;
    const family = hp ? isIP(hp.host) : 0;
    this.remoteFamily = family === 4 ? "IPv4" : family === 6 ? "IPv6" : undefined;
    this.call.on("message", this.onMessage);
    this.call.on("drain", this.onDrain);
    this.call.on("close", this.onCallClose);
    this.guardHandover();
  }

  /**
   * The socket reaches its user through a resolved promise, i.e. after the microtasks queued
   * behind `await`; an error emitted before then (the tunnel died in the same read as the
   * DIAL_RSP) would find no listener and crash the process. Until the next macrotask such an
   * error is held and then given to the user's listeners if they attached one (the socket is
   * destroyed either way, so 'close' still tells a user who listens to nothing else).
   */
  private guardHandover(): void {
    let held: Error | undefined;
    const hold = (err: Error): void => {
      held ??= err;
    };
    this.on("error", hold);
    setImmediate(() => {
      this.off("error", hold);
      if (held && this.listenerCount("error") > 0) this.emit("error", held);
    });
  }

  /** `'open'` while both directions are usable, like net.Socket. */
  get readyState(): "open" | "readOnly" | "writeOnly" | "closed" {
    if (this.destroyed) return "closed";
    if (this.readable && this.writable) return "open";
    if (this.readable) return "readOnly";
    if (this.writable) return "writeOnly";
    return "closed";
  }

  /** No-op (Nagle is a property of the agent's socket); returns this. */
  setNoDelay(_noDelay?: boolean): this {
    return this;
  }

  /** No-op (liveness is the HTTP/2 session's keepalive); returns this. */
  setKeepAlive(_enable?: boolean, _initialDelay?: number): this {
    return this;
  }

  /**
   * Emit `'timeout'` after `ms` without traffic in either direction, like net.Socket (the
   * socket stays open; 0 disables). `callback` is added as a one-time `'timeout'` listener.
   */
  setTimeout(ms: number, callback?: () => void): this {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    if (ms > 0 && Number.isFinite(ms)) {
      this.idleTimer = setTimeout(() => this.emit("timeout"), ms);
      this.idleTimer.unref();
      if (callback) this.once("timeout", callback);
    } else if (callback) {
      this.off("timeout", callback);
    }
    return this;
  }

  /** Let this socket keep the process alive (the default). */
  ref(): this {
    if (!this.referenced) {
      this.referenced = true;
      if (!this.callFinishing) this.setRefHook?.(true);
    }
    return this;
  }

  /** Do not keep the process alive for this socket alone (pooled keep-alive sockets). */
  unref(): this {
    if (this.referenced) {
      this.referenced = false;
      if (!this.callFinishing) this.setRefHook?.(false);
    }
    return this;
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    if (this.remoteClosed || this.closeRequested || this.call.closed) {
      callback(new TunnelClosedError(`connection to ${this.address} is closed`));
      return;
    }
    if (chunk.length === 0) {
      callback();
      return;
    }
    this.bytesWritten += chunk.length;
    this.idleTimer?.refresh();
    if (sendData(this.call, this.connectID, chunk)) callback();
    else this.pendingWrite = callback;
  }

  override _final(callback: (err?: Error | null) => void): void {
    if (!this.remoteClosed && !this.call.closed && !this.closeRequested) {
      this.requestClose();
      this.armCloseWait(() =>
        this.destroy(new TunnelClosedError(`no CLOSE_RSP for ${this.address} within ${CLOSE_RESPONSE_TIMEOUT_MS} ms`)),
      );
    }
    callback();
  }

  override _read(): void {
    if (this.readPaused) {
      this.readPaused = false;
      this.call.resume();
    }
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    const pending = this.pendingWrite;
    this.pendingWrite = undefined;
    pending?.(err ?? new TunnelClosedError(`connection to ${this.address} was destroyed`));
    if (this.remoteClosed || this.call.closed) {
      this.finishCall();
    } else {
      // Tell the hub, then keep the call open until CLOSE_RSP (bounded) so the server does not
      // have to clean up after an abandoned stream. Anything still arriving is dropped.
      if (!this.closeRequested) this.requestClose();
      if (this.readPaused) {
        this.readPaused = false;
        this.call.resume();
      }
      if (this.closeWait) clearTimeout(this.closeWait);
      this.closeWait = undefined;
      this.armCloseWait(() => this.finishCall());
    }
    callback(err);
  }

  private requestClose(): void {
    this.closeRequested = true;
    sendPacket(this.call, { type: PacketType.CLOSE_REQ, closeRequest: { connectID: this.connectID } });
  }

  /** Run `onExpiry` if CLOSE_RSP does not come in time; a paused reader postpones the deadline. */
  private armCloseWait(onExpiry: () => void): void {
    const timer = setTimeout(() => {
      if (this.readPaused && !this.destroyed) {
        timer.refresh();
        return;
      }
      onExpiry();
    }, CLOSE_RESPONSE_TIMEOUT_MS);
    timer.unref();
    this.closeWait = timer;
  }

  private finishCall(): void {
    if (this.callFinishing) return;
    this.callFinishing = true;
    if (this.closeWait) clearTimeout(this.closeWait);
    this.closeWait = undefined;
    if (!this.referenced) this.setRefHook?.(true); // hand back the unref we took
    finishProxyCall(this.call, () => {
      this.call.off("message", this.onMessage);
      this.call.off("drain", this.onDrain);
      this.releaseCall();
    });
  }

  private readonly onMessage = (frame: Buffer): void => {
    let packet;
    try {
      packet = packetOfFrame(frame);
    } catch (err) {
      this.destroy(new ProtocolError(`malformed packet from the proxy server: ${errorMessage(err)}`, { cause: err }));
      return;
    }
    if ("data" in packet) {
      const { connectID, data } = packet.data;
      if (connectID !== this.connectID) {
        this.logger.warn({ connectID, expected: this.connectID }, "DATA for an unknown connection; closing it");
        sendPacket(this.call, { type: PacketType.CLOSE_REQ, closeRequest: { connectID } });
        return;
      }
      if (this.destroyed || this.remoteClosed || data.length === 0) return;
      this.bytesRead += data.length;
      this.idleTimer?.refresh();
      if (!this.push(Buffer.from(data.buffer, data.byteOffset, data.byteLength)) && !this.readPaused) {
        this.readPaused = true;
        this.call.pause();
      }
      return;
    }
    if ("closeResponse" in packet) {
      if (packet.closeResponse.connectID !== this.connectID && packet.closeResponse.connectID !== 0n) {
        this.logger.debug({ connectID: packet.closeResponse.connectID }, "CLOSE_RSP for another connection ignored");
        return;
      }
      this.remoteClosed = true;
      if (packet.closeResponse.error) {
        // The hub cut the connection (e.g. the agent went away): an error, not a clean end.
        this.destroy(new TunnelClosedError(`connection to ${this.address} cut: ${packet.closeResponse.error}`));
      } else if (!this.destroyed) this.push(null);
      this.finishCall();
      return;
    }
    this.logger.debug(
      { type: packet.type, address: this.address },
      "unexpected packet on an established tunnel ignored",
    );
  };

  private readonly onDrain = (): void => {
    const pending = this.pendingWrite;
    this.pendingWrite = undefined;
    pending?.();
  };

  private readonly onCallClose = (status: StreamStatus): void => {
    const pending = this.pendingWrite;
    this.pendingWrite = undefined;
    // The call we ended ourselves (every connection's normal end): no one to tell, no error to build.
    if (!pending && this.callFinishing) return;
    const err = new TunnelClosedError(`tunnel to ${this.address} closed: ${status.details}`);
    pending?.(err);
    if (!this.callFinishing) {
      // Lost without our doing: release now; the stream is gone already.
      this.finishCall();
      if (!this.remoteClosed && !this.destroyed) this.destroy(err);
    }
  };
}
