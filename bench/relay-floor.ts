/**
 * The floor of a Node.js tunnel with our architecture: the least a proxy-server and a proxy-agent
 * written in plain Node.js must do per new connection. Two processes speak konnectivity as ours
 * do (mutual TLS and HTTP/2 on the client door and the agent door, gRPC framing, packets read
 * with the protocol package's `peekPacket` and forwarded as they came, a TCP dial at the agent,
 * `setNoDelay` on it) and nothing else: one agent, no routing strategies, no flow control, no
 * metrics, no logging, no limits, no timeouts, and the target socket destroyed at once on CLOSE_REQ
 * (as Go's agent closes it; ours flushes it first). bench.ts times dials through it next to ours and
 * Go's (`node_floor` in `first_byte_ms`, `first_byte_reusable_ms` and `dials_per_s`): a target this
 * floor misses is out of reach of any Node.js implementation of the same design; what ours costs
 * above it is ours to cut.
 *
 * usage: relay-floor.ts server <server.crt> <server.key> <client-ca.crt> <agent-ca.crt>
 *          prints {"port":N,"agentPort":M} (client door, agent door; both on 127.0.0.1)
 *        relay-floor.ts agent <port> <ca.crt> <agent.crt> <agent.key>
 *          connects to 127.0.0.1:<port>; prints "connected" once the server's headers arrive
 *        relay-floor.ts handshakes <server.crt> <server.key> <agent-ca.crt>
 *          the agent door's TLS alone (mutual TLS, ALPN h2, node's default session tickets) and
 *          nothing after the handshake: the floor of a TLS handshake in Node.js
 *          (`hotpath.ts handshakes`); prints {"port":N}
 *        relay-floor.ts handshakes-h2 <server.crt> <server.key> <agent-ca.crt>
 *          the same TLS with node's HTTP/2 server on it (a session and its SETTINGS per
 *          connection, as every gRPC server in node has): the floor of the agent door's handshake
 *          (`hotpath.ts handshakes --paths=ours,floorh2`); prints {"port":N}
 */
import { readFileSync } from "node:fs";
import { connect as h2connect, createSecureServer, type ClientHttp2Stream, type ServerHttp2Stream } from "node:http2";
import { connect as tcpConnect, type AddressInfo, type Socket } from "node:net";
import { createServer as tlsCreateServer } from "node:tls";
import {
  AGENT_CONNECT_METHOD,
  Metadata,
  PROXY_METHOD,
  PacketType,
  decodePacket,
  encodeData,
  encodePacket,
  peekPacket,
  type Packet,
} from "@cluster-proxy/protocol";
import { frame, readMessages } from "./grpc-messages.js";

function grpcRespond(stream: ServerHttp2Stream, headers: Record<string, string> = {}): void {
  stream.respond({ ":status": 200, "content-type": "application/grpc", ...headers }, { waitForTrailers: true });
  stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
  stream.on("error", () => undefined);
  stream.on("end", () => stream.end());
}

function server(cert: string, key: string, clientCa: string, agentCa: string): void {
  let agent: ServerHttp2Stream | undefined;
  /** Client streams by the random of their pending dial, then by connectID. */
  const pending = new Map<bigint, ServerHttp2Stream>();
  const conns = new Map<bigint, ServerHttp2Stream>();
  const tls = {
    cert: readFileSync(cert),
    key: readFileSync(key),
    requestCert: true,
    rejectUnauthorized: true,
    allowHTTP1: false,
    // As our server's doors: TLS 1.3 session tickets after each handshake (node's own ticket keys),
    // so our SDK's dial() resumes here too.
  };
  const clients = createSecureServer({ ...tls, ca: readFileSync(clientCa) });
  clients.on("stream", (stream: ServerHttp2Stream, headers) => {
    if (headers[":path"] !== PROXY_METHOD) return void stream.respond({ ":status": 404 }, { endStream: true });
    grpcRespond(stream);
    readMessages(stream, (body, framed) => {
      const p = peekPacket(body);
      if (p.type === PacketType.DIAL_REQ) pending.set(p.random, stream);
      agent?.write(framed);
    });
  });
  const agents = createSecureServer({ ...tls, ca: readFileSync(agentCa) });
  agents.on("stream", (stream: ServerHttp2Stream, headers) => {
    if (headers[":path"] !== AGENT_CONNECT_METHOD) return void stream.respond({ ":status": 404 }, { endStream: true });
    grpcRespond(stream, { [Metadata.serverID]: "relay-floor", [Metadata.serverCount]: "1" });
    agent = stream;
    process.stdout.write("agent connected\n");
    readMessages(stream, (body, framed) => {
      const p = peekPacket(body);
      let client: ServerHttp2Stream | undefined;
      if (p.type === PacketType.DIAL_RSP) {
        client = pending.get(p.random);
        pending.delete(p.random);
        if (client) conns.set(p.connectID, client);
      } else {
        client = conns.get(p.connectID);
        if (p.type === PacketType.CLOSE_RSP) conns.delete(p.connectID);
      }
      client?.write(framed);
    });
  });
  clients.listen(0, "127.0.0.1", () => {
    agents.listen(0, "127.0.0.1", () => {
      const port = (clients.address() as AddressInfo).port;
      const agentPort = (agents.address() as AddressInfo).port;
      process.stdout.write(`${JSON.stringify({ port, agentPort })}\n`);
    });
  });
}

function agent(port: string, ca: string, cert: string, key: string): void {
  const session = h2connect(`https://127.0.0.1:${port}`, {
    ca: readFileSync(ca),
    cert: readFileSync(cert),
    key: readFileSync(key),
  });
  const fail = (err: Error): never => {
    process.stderr.write(`relay-floor agent: ${err.message}\n`);
    process.exit(1);
  };
  session.on("error", fail);
  const stream: ClientHttp2Stream = session.request({
    ":method": "POST",
    ":path": AGENT_CONNECT_METHOD,
    "content-type": "application/grpc",
    te: "trailers",
    [Metadata.agentID]: "relay-floor-agent",
    [Metadata.agentIdentifiers]: "",
  });
  stream.on("error", fail);
  stream.on("response", () => process.stdout.write("connected\n"));
  const send = (p: Packet): boolean => stream.write(frame(encodePacket(p)));
  const sockets = new Map<bigint, Socket>();
  let nextConnectID = 1n;
  readMessages(stream, (body) => {
    const p = decodePacket(body);
    if ("dialRequest" in p) {
      const { address, random } = p.dialRequest;
      const colon = address.lastIndexOf(":");
      const socket = tcpConnect(Number(address.slice(colon + 1)), address.slice(0, colon));
      socket.setNoDelay(true);
      const connectID = nextConnectID++;
      socket.on("connect", () => {
        sockets.set(connectID, socket);
        send({ type: PacketType.DIAL_RSP, dialResponse: { error: "", connectID, random } });
      });
      socket.on("data", (chunk: Buffer) => stream.write(frame(encodeData(connectID, chunk))));
      socket.on("error", () => undefined);
      socket.on("close", () => {
        if (sockets.delete(connectID)) send({ type: PacketType.CLOSE_RSP, closeResponse: { error: "", connectID } });
      });
    } else if ("data" in p) {
      sockets.get(p.data.connectID)?.write(p.data.data);
    } else if ("closeRequest" in p) {
      sockets.get(p.closeRequest.connectID)?.destroy();
    }
  });
}

function handshakes(cert: string, key: string, agentCa: string, h2: boolean): void {
  const options = {
    cert: readFileSync(cert),
    key: readFileSync(key),
    ca: readFileSync(agentCa),
    requestCert: true,
    rejectUnauthorized: true,
    ALPNProtocols: ["h2"],
  };
  const s = h2
    ? createSecureServer(options).on("session", (session) => session.on("error", () => undefined))
    : tlsCreateServer(options, (socket) => {
        socket.on("error", () => undefined);
        socket.resume();
      });
  s.listen(0, "127.0.0.1", () => {
    process.stdout.write(`${JSON.stringify({ port: (s.address() as AddressInfo).port })}\n`);
  });
}

// Exit normally on SIGTERM, so that --cpu-prof writes its profile.
process.on("SIGTERM", () => process.exit(0));
const [role, ...args] = process.argv.slice(2) as [string, string, string, string, string];
if (role === "server") server(args[0]!, args[1]!, args[2]!, args[3]!);
else if (role === "agent") agent(args[0]!, args[1]!, args[2]!, args[3]!);
else if (role === "handshakes" || role === "handshakes-h2")
  handshakes(args[0]!, args[1]!, args[2]!, role !== "handshakes");
else throw new Error(`relay-floor.ts: unknown role ${role} (server, agent, handshakes or handshakes-h2)`);
