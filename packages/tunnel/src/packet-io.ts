/** Sending konnectivity packets on gRPC streams, chunking DATA under the Go peers' limit. */
import { MAX_DATA_CHUNK, encodeData, encodePacket, type Packet } from "@cluster-proxy/protocol";
import { FRAME_HEADER, sealFrame } from "./grpc/framing.js";
import type { GrpcStream } from "./grpc/stream.js";

/**
 * Encode and send one packet: DATA as data, every other type as a control frame (bounded, see
 * {@link GrpcStream.sendControl}). Returns false when the stream wants the caller to wait for "drain".
 */
export function sendPacket(stream: GrpcStream, packet: Packet): boolean {
  const frame = sealFrame(encodePacket(packet, FRAME_HEADER));
  return "data" in packet ? stream.send(frame) : stream.sendControl(frame);
}

/**
 * Send bytes as DATA packets of at most {@link MAX_DATA_CHUNK} bytes each (one copy per chunk).
 * Returns false when the stream wants the caller to wait for "drain".
 */
export function sendData(stream: GrpcStream, connectID: bigint, bytes: Uint8Array): boolean {
  let ok = true;
  for (let off = 0; off < bytes.length; off += MAX_DATA_CHUNK) {
    const chunk = bytes.subarray(off, Math.min(bytes.length, off + MAX_DATA_CHUNK));
    ok = stream.send(sealFrame(encodeData(connectID, chunk, FRAME_HEADER))) && ok;
  }
  return ok;
}
