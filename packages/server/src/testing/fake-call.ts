/**
 * Test-only: the parts of an agent's {@link ServerCall} that a Backend uses, recording every frame
 * sent, for the relay's unit tests (no HTTP/2 underneath).
 */
import { EventEmitter } from "node:events";
import { decodeFlowControl, peekPacket, type FlowControl } from "@cluster-proxy/protocol";
import { FRAME_HEADER, type ServerCall } from "@cluster-proxy/tunnel";

/** An agent's stream as the relay sees it: sends always succeed and are kept in {@link sent}. */
export class FakeCall extends EventEmitter {
  readonly sent: Buffer[] = [];
  /** Whether the relay holds the shared stream (pause() without resume()). */
  paused = false;
  closed = false;
  bufferedBytes = 0;

  send(frame: Buffer): boolean {
    this.sent.push(frame);
    return true;
  }
  sendControl(frame: Buffer): boolean {
    return this.send(frame);
  }
  pause(): void {
    this.paused = true;
  }
  resume(): void {
    this.paused = false;
  }

  /** This fake where a Backend takes a ServerCall (it has only the parts a Backend uses). */
  asServerCall(): ServerCall {
    return this as unknown as ServerCall;
  }

  /** The konnectivity packets sent, as (type, random or connectID). */
  packets(): { type: number; random: bigint; connectID: bigint }[] {
    return this.sent.map((f) => peekPacket(f.subarray(FRAME_HEADER)));
  }

  /** The FLOW_PAUSE / FLOW_RESUME packets sent. */
  flows(): { type: FlowControl; connectID: bigint }[] {
    return this.sent.flatMap((f) => decodeFlowControl(f.subarray(FRAME_HEADER)) ?? []);
  }
}
