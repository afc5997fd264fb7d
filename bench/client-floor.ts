/**
 * The floor of a Node.js client's new connection: the least a konnectivity client in plain Node.js
 * must do to open a single-use tunnel and get its first byte back. Per connection: `tls.connect`
 * with one TLS context for the process and the last session's ticket (TLS 1.3 resumption, as our
 * SDK's `dial()` does), `http2.connect` on that socket, one `/ProxyService/Proxy` stream, DIAL_REQ,
 * on DIAL_RSP one byte of DATA, on its echo CLOSE_REQ with the call half-closed and the session
 * closed. No socket object for the caller, no timeouts, no retries, no error explanations, no TCP
 * keepalive and no transport between the session and the socket (which our SDK keeps against
 * deadlocks between two node HTTP/2 peers: docs/design/flow-control.md). bench.ts and hotpath.ts
 * time it next to our SDK's `dial()` (`FIRST_BYTE.clientFloor*`): what our SDK costs above it is
 * ours to cut.
 */
import { connect as h2connect } from "node:http2";
import { connect as tlsConnect, createSecureContext, type SecureContext } from "node:tls";
import { PROXY_METHOD, PacketType, decodePacket, encodeData, encodePacket } from "@cluster-proxy/protocol";
import type { ProxyOptions } from "@cluster-proxy/client";
import { frame, readMessages } from "./grpc-messages.js";
import { withTimeout } from "./lib.js";

/** A plain Node.js single-use client for one proxy-server: one TLS context, the last ticket. */
class ClientFloor {
  private readonly context: SecureContext;
  private session: Buffer | undefined;

  constructor(private readonly proxy: ProxyOptions) {
    this.context = createSecureContext({ ca: proxy.ca, cert: proxy.cert, key: proxy.key });
  }

  /** One new connection to `address` (host:port behind the proxy-server): ms to the echoed byte. */
  firstByte(address: string): Promise<number> {
    const t0 = performance.now();
    return withTimeout(
      new Promise<number>((resolve, reject) => {
        const socket = tlsConnect({
          host: this.proxy.host ?? "127.0.0.1",
          port: this.proxy.port,
          secureContext: this.context,
          ALPNProtocols: ["h2"],
          ...(this.session ? { session: this.session } : {}),
        });
        socket.on("session", (ticket: Buffer) => (this.session = ticket));
        socket.on("error", reject);
        socket.once("secureConnect", () => {
          const session = h2connect(`https://${this.proxy.host ?? "127.0.0.1"}`, { createConnection: () => socket });
          session.on("error", reject);
          const call = session.request({
            ":method": "POST",
            ":path": PROXY_METHOD,
            "content-type": "application/grpc",
            te: "trailers",
          });
          call.on("error", reject);
          const dialRequest = { protocol: "tcp", address, random: 1n };
          call.write(frame(encodePacket({ type: PacketType.DIAL_REQ, dialRequest })));
          let connectID = 0n;
          readMessages(call, (body) => {
            const p = decodePacket(body);
            if ("dialResponse" in p) {
              if (p.dialResponse.error) return reject(new Error(`dial ${address}: ${p.dialResponse.error}`));
              connectID = p.dialResponse.connectID;
              call.write(frame(encodeData(connectID, Buffer.from("x"))));
            } else if ("data" in p) {
              resolve(performance.now() - t0);
              // CLOSE_REQ, and the call half-closed: the server then ends it and the session closes.
              call.end(frame(encodePacket({ type: PacketType.CLOSE_REQ, closeRequest: { connectID } })));
              session.close();
            }
          });
        });
      }),
      20_000,
      "client floor first byte",
    );
  }
}

/** `count` connections of a {@link ClientFloor} to `address` through `proxy`, one at a time (ms each). */
export async function clientFloorFirstBytes(
  proxy: ProxyOptions,
  address: string,
  count: number,
  maxMs: number,
): Promise<number[]> {
  const client = new ClientFloor(proxy);
  const out: number[] = [];
  const deadline = performance.now() + maxMs;
  for (let i = 0; i < count && performance.now() < deadline; i++) out.push(await client.firstByte(address));
  return out;
}
