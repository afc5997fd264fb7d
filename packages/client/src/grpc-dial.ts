/**
 * The dial handshake on one Proxy call: DIAL_REQ out, wait for the DIAL_RSP with our random,
 * DIAL_CLS on timeout or abort. Wire-compatible with Go's konnectivity client.
 */
import { constants as http2Constants } from "node:http2";
import { DialErrors, PacketType } from "@cluster-proxy/protocol";
import { DialError, sendPacket, type ClientCall, type StreamStatus } from "@cluster-proxy/tunnel";
import { keepAliveClock, type Logger, type Timers } from "@cluster-proxy/kit";
import { dialAbortError, dialTimeoutError } from "./dial-limits.js";
import { finishProxyCall, packetOfFrame } from "./proxy-call.js";
import { TunnelSocket } from "./tunnel-socket.js";
import { errorMessage } from "@cluster-proxy/errors";

/**
 * Dial failures that mean the proxy-server was going away before the dial reached any agent: the
 * server refused the stream (REFUSED_STREAM, or a GOAWAY that excluded it) or answered with its
 * draining refusal ({@link DialErrors.serverDraining}). No byte of the tunnel was sent or
 * delivered, so the dial may be sent again on a new connection (see {@link isServerGoingAway}).
 */
const goingAway = new WeakSet<Error>();

/** Whether `err` is a dial failure of a proxy-server going away (safe to dial again elsewhere). */
export function isServerGoingAway(err: unknown): boolean {
  return err instanceof Error && goingAway.has(err);
}

/** Everything one dial on an open Proxy call needs. */
export interface CallDialInit {
  call: ClientCall;
  address: string;
  random: bigint;
  timeoutMs: number;
  signal?: AbortSignal | undefined;
  logger: Logger;
  /** The timer of `timeoutMs` (default the kit's `keepAliveClock`). */
  timers?: Timers;
  /** Called exactly once when the call is over (after a failed dial, or when the socket is done). */
  release: () => void;
  /** Forwarded to the socket (process keep-alive bookkeeping). */
  setRef?: (ref: boolean) => void;
}

/** Send DIAL_REQ on `call` and resolve with the socket once the agent has connected. */
export function dialOnCall(init: CallDialInit): Promise<TunnelSocket> {
  const { call, address, random, signal, logger } = init;
  const timers = init.timers ?? keepAliveClock;
  return new Promise<TunnelSocket>((resolve, reject) => {
    let settled = false;
    const cleanup = (): void => {
      settled = true;
      timers.clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      call.off("message", onMessage);
      call.off("close", onClose);
    };
    const fail = (err: DialError, sendDialClose: boolean): void => {
      if (settled) return;
      cleanup();
      if (sendDialClose) sendPacket(call, { type: PacketType.DIAL_CLS, closeDial: { random } });
      logger.debug({ address, random, reason: err.reason, error: err.message }, "dial failed");
      finishProxyCall(call, init.release);
      reject(err);
    };
    const onMessage = (frame: Buffer): void => {
      let packet;
      try {
        packet = packetOfFrame(frame);
      } catch (err) {
        fail(
          new DialError(`malformed packet from the proxy server: ${errorMessage(err)}`, "unknown", { cause: err }),
          true,
        );
        return;
      }
      if ("dialResponse" in packet) {
        const rsp = packet.dialResponse;
        if (rsp.random !== random) {
          logger.debug({ random: rsp.random, expected: random }, "DIAL_RSP for another dial ignored");
          return;
        }
        if (rsp.error) {
          const err = new DialError(rsp.error, "endpoint");
          if (rsp.error === DialErrors.serverDraining) goingAway.add(err);
          fail(err, false);
          return;
        }
        cleanup();
        const socket = new TunnelSocket({
          call,
          connectID: rsp.connectID,
          address,
          random,
          logger,
          release: init.release,
          ...(init.setRef ? { setRef: init.setRef } : {}),
        });
        resolve(socket);
        return;
      }
      if ("closeDial" in packet) {
        if (packet.closeDial.random === random) {
          fail(new DialError(`dial to ${address} was closed by the proxy server`, "dialclosed"), false);
        }
        return;
      }
      logger.debug({ type: packet.type, address }, "packet before DIAL_RSP ignored");
    };
    const onClose = (status: StreamStatus): void => {
      const err = new DialError(
        `tunnel closed before the dial to ${address} completed: ${status.details}`,
        "tunnelclosed",
      );
      // Refused unprocessed (the server's GOAWAY named an earlier stream, or it reset ours with
      // REFUSED_STREAM): the DIAL_REQ never reached the server's relay.
      if (call.http2Stream.rstCode === http2Constants.NGHTTP2_REFUSED_STREAM) goingAway.add(err);
      fail(err, false);
    };
    const abortError = (): DialError => dialAbortError(address, signal);
    const onAbort = (): void => fail(abortError(), true);
    const timer = timers.setTimeout(
      () => fail(dialTimeoutError(address, init.timeoutMs), true),
      Math.max(0, init.timeoutMs),
    );
    call.on("message", onMessage);
    call.on("close", onClose);
    if (signal?.aborted) {
      fail(abortError(), false); // nothing sent yet: no DIAL_CLS needed
      return;
    }
    signal?.addEventListener("abort", onAbort, { once: true });
    sendPacket(call, {
      type: PacketType.DIAL_REQ,
      dialRequest: { protocol: "tcp", address, random },
    });
  });
}
