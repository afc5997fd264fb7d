/**
 * Why the tunnel's gRPC layer is hand-written: one bidi stream over TLS on loopback, the client
 * sends 256 MiB in messages of a given size, the server counts them and answers once. Compares
 * @grpc/grpc-js (raw-buffer serializers, its largest windows) with our framing on node:http2.
 * Also times DATA packet encoding: @bufbuild/protobuf's BinaryWriter against our encodeData.
 * Prints a table and writes bench/results/grpc-transport.json. Run: npm run transport (in bench/).
 */
import { once } from "node:events";
import * as http2 from "node:http2";
import { mkdtemp, mkdir, readFile, writeFile } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { writeStandaloneCerts } from "@cluster-proxy/pki";
import { encodeData } from "@cluster-proxy/protocol";
import {
  TUNNEL_HTTP2_OPTIONS,
  connectSession,
  frameMessage,
  openCall,
  serveGrpc,
  widenSessionWindow,
} from "@cluster-proxy/tunnel";

const TOTAL = 256 * 1024 * 1024;
const RUNS = Number(process.env["RUNS"] ?? 3);
const METHOD = "/Bench/Stream";

const dir = await mkdtemp(join(tmpdir(), "cp-bench-"));
const certs = await writeStandaloneCerts(dir, { clusters: [], hubHosts: ["localhost", "127.0.0.1"] });
const [ca, clientCa, cert, key, clientCert, clientKey] = await Promise.all([
  readFile(certs.ca.cert),
  readFile(certs.clientCa.cert),
  readFile(certs.server.cert),
  readFile(certs.server.key),
  readFile(certs.client.cert),
  readFile(certs.client.key),
]);

async function grpcJs(size: number): Promise<number> {
  const server = new grpc.Server({ "grpc-node.max_session_memory": 512, "grpc.max_receive_message_length": 8 << 20 });
  server.register(
    METHOD,
    (call: grpc.ServerDuplexStream<Buffer, Buffer>) => {
      let n = 0;
      call.on("data", (b: Buffer) => {
        n += b.length;
        if (n >= TOTAL) {
          call.write(Buffer.from("done"));
          call.end();
        }
      });
    },
    (b: Buffer) => b,
    (b: Buffer) => b,
    "bidi",
  );
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(
      "127.0.0.1:0",
      grpc.ServerCredentials.createSsl(clientCa, [{ private_key: key, cert_chain: cert }], true),
      (e, p) => (e ? reject(e) : resolve(p)),
    ),
  );
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createSsl(ca, clientKey, clientCert), {
    "grpc.ssl_target_name_override": "localhost",
    "grpc-node.flow_control_window": 16 << 20,
    "grpc-node.max_session_memory": 512,
  });
  const call = client.makeBidiStreamRequest(
    METHOD,
    (b: Buffer) => b,
    (b: Buffer) => b,
  );
  const msg = Buffer.alloc(size, 1);
  const t0 = performance.now();
  const done = once(call, "data");
  for (let sent = 0; sent < TOTAL; sent += size) if (!call.write(msg)) await once(call, "drain");
  await done;
  const secs = (performance.now() - t0) / 1000;
  call.on("error", () => undefined);
  call.cancel();
  client.close();
  server.forceShutdown();
  return TOTAL / secs / 1e6;
}

async function ours(size: number): Promise<number> {
  const server = http2.createSecureServer({ ...TUNNEL_HTTP2_OPTIONS, key, cert, ca: clientCa, requestCert: true });
  server.on("session", widenSessionWindow);
  serveGrpc(server, {
    [METHOD]: (call) => {
      call.sendHeaders();
      let n = 0;
      call.on("message", (f) => {
        n += f.length - 5;
        if (n >= TOTAL) call.send(frameMessage(Buffer.from("done")));
      });
    },
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const session = await connectSession({
    host: "127.0.0.1",
    port: (server.address() as AddressInfo).port,
    tls: { ca, cert: clientCert, key: clientKey, servername: "localhost" },
  });
  const call = openCall(session, METHOD);
  const msg = Buffer.alloc(size, 1);
  const t0 = performance.now();
  const done = once(call, "message");
  for (let sent = 0; sent < TOTAL; sent += size) if (!call.send(frameMessage(msg))) await once(call, "drain");
  await done;
  const secs = (performance.now() - t0) / 1000;
  session.destroy();
  server.close();
  return TOTAL / secs / 1e6;
}

function encodeBench(size: number): { writer: number; ours: number } {
  const payload = Buffer.alloc(size, 7);
  const n = 20_000;
  let t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const w = new BinaryWriter();
    w.tag(1, WireType.Varint).int32(4);
    w.tag(4, WireType.LengthDelimited).fork();
    w.tag(1, WireType.Varint).int64(BigInt(i + 1));
    w.tag(3, WireType.LengthDelimited).bytes(payload);
    w.join();
    frameMessage(w.finish()); // the gRPC prefix costs the writer one more copy
  }
  const writer = n / ((performance.now() - t0) / 1000);
  t0 = performance.now();
  for (let i = 0; i < n; i++) encodeData(BigInt(i + 1), payload, 5);
  return { writer, ours: n / ((performance.now() - t0) / 1000) };
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const rows: Record<string, unknown>[] = [];
for (const size of [4 * 1024, 32 * 1024]) {
  const g: number[] = [];
  const o: number[] = [];
  for (let r = 0; r < RUNS; r++) {
    g.push(await grpcJs(size));
    o.push(await ours(size));
  }
  const enc = encodeBench(size);
  rows.push({
    message_bytes: size,
    grpc_js_mb_s: { median: median(g), min: Math.min(...g), max: Math.max(...g) },
    ours_mb_s: { median: median(o), min: Math.min(...o), max: Math.max(...o) },
    ratio_ours_over_grpc_js: median(o) / median(g),
    data_encode_per_s: { protobuf_writer: enc.writer, ours: enc.ours, ratio: enc.ours / enc.writer },
  });
  console.log(
    `${String(size / 1024).padStart(3)} KiB messages: grpc-js ${median(g).toFixed(0)} MB/s [${Math.min(...g).toFixed(0)}-${Math.max(...g).toFixed(0)}], ours ${median(o).toFixed(0)} MB/s [${Math.min(...o).toFixed(0)}-${Math.max(...o).toFixed(0)}], ratio ${(median(o) / median(g)).toFixed(2)}x; DATA encode ours/BinaryWriter ${(enc.ours / enc.writer).toFixed(2)}x`,
  );
}
const out = join(import.meta.dirname, "results");
await mkdir(out, { recursive: true });
await writeFile(
  join(out, "grpc-transport.json"),
  JSON.stringify(
    {
      runs: RUNS,
      total_bytes: TOTAL,
      node: process.version,
      machine: `${(await import("node:os")).cpus().length} cores`,
      rows,
    },
    null,
    2,
  ),
);
console.log(`wrote ${join(out, "grpc-transport.json")} (${RUNS} runs each, medians with [min-max])`);
