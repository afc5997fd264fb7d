/**
 * The per-connection flow-control signal (FLOW_PAUSE / FLOW_RESUME), our extension of the konnectivity
 * protocol, sent only to a peer that announced {@link FLOW_CONTROL_METADATA}.
 * Design: docs/design/protocol.md#15-our-extension-per-connection-flow-control
 */
import { encodeData } from "./packet.js";

/**
 * Metadata key by which our agents (Connect request) and servers (Connect response) announce
 * that they understand FLOW_PAUSE / FLOW_RESUME. Go peers ignore unknown metadata.
 */
export const FLOW_CONTROL_METADATA = "cluster-proxy-flow-control";

export const FlowControl = {
  PAUSE: 100,
  RESUME: 101,
} as const;
export type FlowControl = (typeof FlowControl)[keyof typeof FlowControl];

/** True for the packet types of {@link FlowControl}. */
export function isFlowControlType(type: number): type is FlowControl {
  return type === FlowControl.PAUSE || type === FlowControl.RESUME;
}

/** Encode a flow-control packet (`headroom` bytes left free in front, as for DATA). */
export function encodeFlowControl(type: FlowControl, connectID: bigint, headroom = 0): Buffer {
  // Same layout as an empty DATA packet: 08 <type> 22 <len> 08 <connectID>; both types are one
  // varint byte, like DATA's 4.
  const out = encodeData(connectID, new Uint8Array(0), headroom);
  out[headroom + 1] = type;
  return out;
}

/**
 * Decode a flow-control packet: its type and connectID, or undefined when `bytes` is not one (or
 * is malformed).
 */
export function decodeFlowControl(bytes: Uint8Array): { type: FlowControl; connectID: bigint } | undefined {
  if (bytes.length < 4 || bytes[0] !== 0x08 || !isFlowControlType(bytes[1] ?? -1) || bytes[2] !== 0x22) return;
  const type = bytes[1] as FlowControl;
  let p = 3;
  const varint = (): bigint | undefined => {
    let v = 0n;
    for (let shift = 0n; shift < 70n && p < bytes.length; shift += 7n) {
      const b = bytes[p++] ?? 0;
      v |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return v;
    }
    return undefined;
  };
  const len = varint();
  if (len === undefined || p + Number(len) > bytes.length) return;
  const end = p + Number(len);
  if (len === 0n) return { type, connectID: 0n };
  if (bytes[p] !== 0x08) return;
  p++;
  const id = varint();
  if (id === undefined || p > end) return;
  return { type, connectID: BigInt.asIntN(64, id) };
}
