/**
 * Bounded random-bytes run against every listening port of a real proxy-server process (gRPC
 * client port, agent port, HTTP CONNECT port, health port), plus garbage inside an established
 * mTLS CONNECT tunnel and random frames inside a valid gRPC Proxy stream. Afterwards the server
 * is alive, /healthz answers 200 and a good client still echoes byte-exact. Loopback only;
 * fixed-seed PRNG (FUZZ_SEED=<n> to change), bounded in count and time.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import * as net from "node:net";
import { TunnelClient, dialConnect } from "@cluster-proxy/client";
import { PROXY_METHOD, PacketType, encodeData, encodePacket } from "@cluster-proxy/protocol";
import { connectSession, frameMessage, openCall } from "@cluster-proxy/tunnel";
import { Harness, echoServer, type ServerPorts } from "../framework/harness.js";
import { httpGet } from "../framework/http.js";
import { type Proc } from "../framework/process.js";

const SEED = Number(process.env["FUZZ_SEED"] ?? 0xf022);
const CONNECTIONS = 300;
const MAX_LEN = 64 * 1024;
const PARALLEL = 16;
const PER_CONNECTION_MS = 2000;

/** mulberry32: a small deterministic PRNG. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomBytes(rand: () => number, n: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = (rand() * 256) | 0;
  return b;
}

/** A TLS 1.2/1.3 ClientHello record prefix (record header + handshake header + version + random). */
function clientHelloPrefix(rand: () => number): Buffer {
  const body = Buffer.concat([Buffer.from([0x03, 0x03]), randomBytes(rand, 32), Buffer.from([0x00])]);
  const hs = Buffer.concat([Buffer.from([0x01, 0x00, 0x01, 0xfc]), body]);
  return Buffer.concat([Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00]), hs]);
}

/** An HTTP/2 client preface followed by garbage, and a CONNECT head, for variety. */
const H2_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

function payloadFor(rand: () => number): Buffer {
  const len = Math.floor(rand() * MAX_LEN);
  const garbage = randomBytes(rand, len);
  const pick = rand();
  if (pick < 0.25) return Buffer.concat([clientHelloPrefix(rand), garbage]);
  if (pick < 0.35) return Buffer.concat([H2_PREFACE, garbage]);
  if (pick < 0.45) return Buffer.concat([Buffer.from("CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n"), garbage]);
  if (pick < 0.5) return Buffer.concat([Buffer.from("GET /healthz HTTP/1.1\r\nHost: x\r\n"), garbage]);
  return garbage;
}

/** Connect, write the bytes, wait briefly for the peer to answer or close, then destroy. */
function blast(port: number, bytes: Buffer, rand: () => number): Promise<void> {
  return new Promise((resolve) => {
    const s = net.connect({ host: "127.0.0.1", port });
    const done = (): void => {
      clearTimeout(timer);
      s.destroy();
      resolve();
    };
    const timer = setTimeout(done, PER_CONNECTION_MS);
    s.on("error", done);
    s.on("close", done);
    s.on("data", () => undefined);
    s.on("connect", () => {
      // sometimes in pieces, sometimes ending cleanly, sometimes just dropping the socket
      const split = Math.floor(rand() * bytes.length);
      s.write(bytes.subarray(0, split));
      s.write(bytes.subarray(split));
      const how = rand();
      if (how < 0.4) s.end();
      else if (how < 0.6) setTimeout(done, 20);
    });
  });
}

function echoOnce(s: net.Socket | NodeJS.ReadWriteStream, bytes: Buffer, timeoutMs = 10_000): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    const timer = setTimeout(() => reject(new Error(`echo of ${bytes.length} bytes timed out at ${n}`)), timeoutMs);
    const onData = (c: Buffer): void => {
      chunks.push(c);
      n += c.length;
      if (n >= bytes.length) {
        clearTimeout(timer);
        s.off("data", onData);
        resolve(Buffer.concat(chunks));
      }
    };
    s.on("data", onData);
    s.once("error", (e: Error) => {
      clearTimeout(timer);
      reject(e);
    });
    s.write(bytes);
  });
}

describe("fuzz: random bytes against every listening port", { timeout: 120_000 }, () => {
  const h = new Harness();
  let ports: ServerPorts;
  let server: Proc;
  let echoPort = 0;
  let tlsOpts: { ca: Buffer; cert: Buffer; key: Buffer };

  before(async () => {
    await h.init(["east"]);
    echoPort = await echoServer(h);
    const s = await h.startServer();
    ports = s.ports;
    server = s.proc;
    await h.startAgent("east", ports.agent);
    tlsOpts = h.clientTls();
  });
  after(() => h.close());

  const stillServing = async (): Promise<void> => {
    assert.equal(server.child.exitCode, null, `server exited\n${server.output().slice(-4000)}`);
    assert.equal(server.child.signalCode, null, `server killed\n${server.output().slice(-4000)}`);
    assert.equal((await httpGet(`http://127.0.0.1:${ports.health}/healthz`)).status, 200);
    const client = new TunnelClient({
      proxy: { host: "127.0.0.1", port: ports.server, ...tlsOpts },
      dialTimeoutMs: 10_000,
    });
    try {
      const s = await client.dial(`127.0.0.1.east:${echoPort}`);
      const data = randomBytes(prng(SEED + 1), 200_000);
      assert.ok((await echoOnce(s, data)).equals(data), "byte-exact echo through the gRPC tunnel");
      s.destroy();
    } finally {
      await client.close();
    }
    const c = await dialConnect(`127.0.0.1.east:${echoPort}`, {
      proxy: { host: "127.0.0.1", port: ports.httpConnect, ...tlsOpts },
    });
    const data = randomBytes(prng(SEED + 2), 100_000);
    assert.ok((await echoOnce(c, data)).equals(data), "byte-exact echo through the CONNECT tunnel");
    c.destroy();
  };

  test(`${CONNECTIONS} random-bytes connections across the four ports (seed ${SEED})`, async () => {
    const t0 = Date.now();
    const rand = prng(SEED);
    const targets = [ports.server, ports.agent, ports.httpConnect, ports.health];
    const jobs = Array.from({ length: CONNECTIONS }, (_, i) => ({
      port: targets[i % targets.length]!,
      bytes: payloadFor(rand),
      rand: prng(SEED + 100 + i),
    }));
    let next = 0;
    await Promise.all(
      Array.from({ length: PARALLEL }, async () => {
        while (next < jobs.length && Date.now() - t0 < 40_000) {
          const job = jobs[next++]!;
          await blast(job.port, job.bytes, job.rand);
        }
      }),
    );
    assert.equal(next, jobs.length, "all connections ran within the time bound");
    await stillServing();
  });

  test(`garbage inside an established mTLS CONNECT tunnel (seed ${SEED})`, async () => {
    const rand = prng(SEED + 3);
    for (let i = 0; i < 10; i++) {
      const c = await dialConnect(`127.0.0.1.east:${echoPort}`, {
        proxy: { host: "127.0.0.1", port: ports.httpConnect, ...tlsOpts },
      });
      const bytes = payloadFor(rand);
      if (bytes.length > 0) assert.ok((await echoOnce(c, bytes)).equals(bytes), "garbage echoed byte-exact");
      c.destroy();
    }
    await stillServing();
  });

  test(`random frames inside a valid gRPC Proxy stream (seed ${SEED})`, async () => {
    const rand = prng(SEED + 4);
    const session = await connectSession({
      host: "127.0.0.1",
      port: ports.server,
      tls: { ...tlsOpts, servername: "localhost" },
    });
    try {
      for (let i = 0; i < 10; i++) {
        const call = openCall(session, PROXY_METHOD);
        call.on("message", () => undefined);
        const closed = new Promise<void>((r) => call.once("close", () => r()));
        for (let j = 0; j < 20; j++) {
          const pick = rand();
          let msg: Buffer;
          if (pick < 0.4) msg = randomBytes(rand, Math.floor(rand() * 4096));
          else if (pick < 0.55)
            msg = encodeData(BigInt(Math.floor(rand() * 2 ** 31)), randomBytes(rand, Math.floor(rand() * 1024)));
          else if (pick < 0.65)
            msg = encodePacket({
              type: PacketType.DIAL_REQ,
              dialRequest: {
                protocol: "tcp",
                address: randomBytes(rand, 12).toString("latin1"),
                random: BigInt(j + 1),
              },
            });
          else if (pick < 0.75)
            msg = encodePacket({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: BigInt(j) } });
          else if (pick < 0.85) msg = encodePacket({ type: Math.floor(rand() * 1000) - 500, unknown: true });
          else msg = Buffer.concat([encodeData(1n, Buffer.from("x")), randomBytes(rand, 16)]);
          if (pick > 0.97) {
            // a frame with a bogus prefix (compressed flag / wrong length)
            const bad = frameMessage(msg);
            bad[0] = (rand() * 256) | 0;
            call.send(bad);
          } else call.send(frameMessage(msg));
        }
        if (rand() < 0.5) call.end();
        else call.abort({ code: 1, details: "fuzz done" });
        await Promise.race([closed, new Promise((r) => setTimeout(r, 2000))]);
      }
    } finally {
      session.destroy();
    }
    await stillServing();
  });
});
