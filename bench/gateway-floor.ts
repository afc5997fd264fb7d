/**
 * The floor of a gateway of our design in plain Node.js: HTTP/1.1 over TLS in (keep-alive), each
 * request a stream of one HTTP/2 session with the gateway identity over one konnectivity tunnel
 * connection (gRPC `Proxy` stream, DIAL_REQ to the endpoint, DATA packets), a fixed impersonation,
 * the answer relayed; nothing else (no authentication, authorization, audit, metrics, limits,
 * timeouts or retries). Path (i) of bench/gateway.ts: a target it misses is out of reach of a
 * Node.js gateway of this design. usage: gateway-floor.ts <config.json> ({@link FloorConfig});
 * prints {"port":N} once it listens on 127.0.0.1 and its endpoint session is up.
 */
import { readFileSync } from "node:fs";
import * as http from "node:http";
import * as http2 from "node:http2";
import * as https from "node:https";
import type { AddressInfo } from "node:net";
import { Duplex } from "node:stream";
import * as tls from "node:tls";
import { PROXY_METHOD, PacketType, decodePacket, encodeData, encodePacket, type Packet } from "@cluster-proxy/protocol";
import { frame, readMessages } from "./grpc-messages.js";

/** What the floor is given (file paths are PEM files). */
export interface FloorConfig {
  proxyServer: { host: string; port: number; ca: string; cert: string; key: string };
  /** The endpoint's dial address (`gatewayEndpointAddress(cluster)`) and the TLS it is reached with. */
  endpoint: { address: string; servername: string; ca: string; cert: string; key: string };
  serving: { cert: string; key: string };
  /** The cluster whose path prefix (`/<cluster>`) the floor strips. */
  cluster: string;
  /** Impersonate-User and Impersonate-Group of every request, as the gateway would set them. */
  impersonateUser: string;
  impersonateGroups: string[];
}

/** A tunnel connection to `address` through the proxy-server: a Duplex over one `Proxy` stream. */
function tunnelDial(session: http2.ClientHttp2Session, address: string): Promise<Duplex> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": PROXY_METHOD,
      "content-type": "application/grpc",
      te: "trailers",
    });
    const random = BigInt(Math.floor(Math.random() * 2 ** 48));
    let connectID = -1n;
    const socket = new Duplex({
      write(chunk: Buffer, _enc, cb) {
        stream.write(frame(encodeData(connectID, chunk)), cb);
      },
      read() {
        stream.resume();
      },
      destroy(err, cb) {
        stream.close();
        cb(err);
      },
    });
    readMessages(stream, (body) => {
      const p: Packet = decodePacket(body);
      if ("dialResponse" in p) {
        if (p.dialResponse.error) return reject(new Error(`dial ${address}: ${p.dialResponse.error}`));
        connectID = p.dialResponse.connectID;
        resolve(socket);
      } else if ("data" in p) {
        if (!socket.push(p.data.data)) stream.pause();
      } else if ("closeResponse" in p) socket.push(null);
    });
    // Before DIAL_RSP the dial fails with the stream's error; after it, the connection does.
    stream.on("error", (err) => {
      reject(err);
      socket.destroy(err);
    });
    stream.write(frame(encodePacket({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address, random } })));
  });
}

async function main(config: FloorConfig): Promise<void> {
  const ps = config.proxyServer;
  const tunnel = http2.connect(`https://${ps.host}:${ps.port}`, {
    ca: readFileSync(ps.ca),
    cert: readFileSync(ps.cert),
    key: readFileSync(ps.key),
  });
  tunnel.on("error", (err) => fail(err));
  const e = config.endpoint;
  const inner = tls.connect({
    socket: await tunnelDial(tunnel, e.address),
    servername: e.servername,
    ca: readFileSync(e.ca),
    cert: readFileSync(e.cert),
    key: readFileSync(e.key),
    ALPNProtocols: ["h2"],
    // The chain is verified against the agent CA; the name check of the gateway (the cluster's URI SAN) is left out.
    checkServerIdentity: () => undefined,
  });
  const endpoint = http2.connect(`https://${e.servername}`, { createConnection: () => inner });
  endpoint.on("error", (err) => fail(err));
  await new Promise<void>((resolve) => endpoint.once("remoteSettings", () => resolve()));

  const prefix = `/${config.cluster}`;
  const server = https.createServer(
    { cert: readFileSync(config.serving.cert), key: readFileSync(config.serving.key) },
    (req: http.IncomingMessage, res: http.ServerResponse) => {
      const headers: http2.OutgoingHttpHeaders = {
        ":method": req.method,
        ":path": (req.url ?? "/").slice(prefix.length) || "/",
        "cluster-proxy-target": "kube",
        "impersonate-user": config.impersonateUser,
        "impersonate-group": config.impersonateGroups,
      };
      if (req.headers.accept) headers.accept = req.headers.accept;
      const up = endpoint.request(headers, { endStream: true });
      up.on("response", (head) => {
        const out: http.OutgoingHttpHeaders = {};
        for (const [k, v] of Object.entries(head)) if (!k.startsWith(":") && v !== undefined) out[k] = v;
        res.writeHead(Number(head[":status"]), out);
        up.pipe(res);
      });
      up.on("error", () => res.destroy());
    },
  );
  server.listen(0, "127.0.0.1", () => {
    process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`);
  });
}

function fail(err: Error): never {
  process.stderr.write(`gateway-floor: ${err.message}\n`);
  process.exit(1);
}

// Exit normally on SIGTERM, so that --cpu-prof writes its profile.
process.on("SIGTERM", () => process.exit(0));
main(JSON.parse(readFileSync(process.argv[2]!, "utf8")) as FloorConfig).catch(fail);
