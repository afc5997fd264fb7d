/**
 * The floor of a Node.js proxy-server on the new-connection path: plain node:http2 with mutual
 * TLS and no session tickets, as our server's client door is configured, that answers each konnectivity dial itself
 * (DIAL_RSP at once, DATA echoed, CLOSE_RSP) instead of routing it to an agent. No agent hop, no
 * routing, no metrics, no flow control: what a new connection costs in node's TLS and HTTP/2
 * alone. bench.ts times the SDK's single-use `dial()` against it next to ours and Go's full path
 * (`first_byte_ms.node_floor`): if this floor is above the target's share of Go's full path,
 * the target cannot be reached by trimming a Node.js server.
 *
 * usage: dial-floor-server.ts <server.crt> <server.key> <client-ca.crt>; prints {"port":N}.
 */
import { constants as cryptoConstants } from "node:crypto";
import { readFileSync } from "node:fs";
import { constants, createSecureServer, type ServerHttp2Stream } from "node:http2";
import { PROXY_METHOD, PacketType, decodePacket, encodePacket, type Packet } from "@cluster-proxy/protocol";

const [cert, key, ca] = process.argv.slice(2) as [string, string, string];

/** One gRPC message: 0 (not compressed), 4-byte big-endian length, the bytes. */
function frame(packet: Packet): Buffer {
  const body = encodePacket(packet);
  const out = Buffer.allocUnsafe(5 + body.length);
  out[0] = 0;
  out.writeUInt32BE(body.length, 1);
  body.copy(out, 5);
  return out;
}

let nextConnectID = 1n;

function serveProxy(stream: ServerHttp2Stream): void {
  stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
  stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
  stream.on("error", () => undefined);
  let buffered: Buffer = Buffer.alloc(0);
  stream.on("data", (chunk: Buffer) => {
    buffered = buffered.length ? Buffer.concat([buffered, chunk]) : chunk;
    while (buffered.length >= 5) {
      const len = buffered.readUInt32BE(1);
      if (buffered.length < 5 + len) break;
      const p = decodePacket(buffered.subarray(5, 5 + len));
      buffered = buffered.subarray(5 + len);
      if (p.type === PacketType.DIAL_REQ && "dialRequest" in p) {
        const connectID = nextConnectID++;
        stream.write(
          frame({ type: PacketType.DIAL_RSP, dialResponse: { error: "", connectID, random: p.dialRequest.random } }),
        );
      } else if (p.type === PacketType.DATA && "data" in p) {
        stream.write(frame(p));
      } else if (p.type === PacketType.CLOSE_REQ && "closeRequest" in p) {
        const { connectID } = p.closeRequest;
        stream.write(frame({ type: PacketType.CLOSE_RSP, closeResponse: { error: "", connectID } }));
      }
    }
  });
  stream.on("end", () => stream.end());
}

const server = createSecureServer({
  cert: readFileSync(cert),
  key: readFileSync(key),
  ca: readFileSync(ca),
  requestCert: true,
  rejectUnauthorized: true,
  allowHTTP1: false,
  // As our server's doors: no TLS session tickets after each handshake.
  secureOptions: cryptoConstants.SSL_OP_NO_TICKET,
});
server.on("stream", (stream: ServerHttp2Stream, headers) => {
  if (headers[constants.HTTP2_HEADER_PATH] === PROXY_METHOD) serveProxy(stream);
  else stream.respond({ ":status": 404 }, { endStream: true });
});
server.listen(0, "127.0.0.1", () => {
  const address = server.address();
  process.stdout.write(`${JSON.stringify({ port: typeof address === "object" && address ? address.port : 0 })}\n`);
});
