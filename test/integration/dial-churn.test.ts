/**
 * Dial churn end to end (the bench's dial-rate scenario), real processes on loopback: 16 loops
 * of dial through the hub, 16-byte echo, close, all on one TunnelClient (one HTTP/2 session).
 *
 * Regression: the client used to end every Proxy call with RST_STREAM CANCEL. nghttp2 (>= 1.57,
 * the "rapid reset" mitigation) in our Node server allows a burst of ~1,000 received resets per
 * session, refilled at 33/s, then sends GOAWAY INTERNAL_ERROR: after ~1,000 dials every tunnel
 * on the session died ("stream reset (HTTP/2 code 2)", echo timeouts). The Go server has no such
 * limit, so only our server lost connections.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { TunnelClient } from "@cluster-proxy/client";
import { type TunnelSocket } from "@cluster-proxy/client";
import { Harness, echoServer, type ServerPorts } from "../framework/harness.js";
import { errorMessage } from "@cluster-proxy/errors";

const LOOPS = 16;
const DIALS_PER_LOOP = 200;
/** Generous: 3,200 cycles take ~1.5 s on a 2-core machine. */
const TIME_LIMIT_MS = 25_000;

/** Write 16 bytes and resolve once they came back; rejects on error, EOF or after `ms`. */
function echoOnce(s: TunnelSocket, msg: Buffer, ms: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let got = 0;
    const done = (err?: Error): void => {
      clearTimeout(timer);
      s.off("data", onData);
      s.off("end", onEnd);
      s.off("error", done);
      if (err) reject(err);
      else resolve();
    };
    const onData = (c: Buffer): void => {
      got += c.length;
      if (got >= msg.length) done();
    };
    const onEnd = (): void => done(new Error(`connection ended after ${got} of ${msg.length} bytes`));
    const timer = setTimeout(() => done(new Error(`echo timed out after ${ms} ms (${got} bytes)`)), ms);
    s.on("data", onData);
    s.once("end", onEnd);
    s.once("error", done);
    s.write(msg);
  });
}

describe("dial churn: many short tunnelled connections on one client session", () => {
  const h = new Harness();
  let ports: ServerPorts;
  let client: TunnelClient;
  let echoPort = 0;

  before(async () => {
    await h.init(["churn"]);
    echoPort = await echoServer(h);
    ports = (await h.startServer()).ports;
    await h.startAgent("churn", ports.agent);
    client = h.tunnelClient(ports.server);
  });
  after(async () => {
    await h.close();
  });

  test(
    `${LOOPS} loops x ${DIALS_PER_LOOP} dials (dial, 16-byte echo, close) without a failure`,
    { timeout: 60_000 },
    async () => {
      const msg = Buffer.alloc(16, 7);
      const failures = new Map<string, number>();
      const fail = (e: unknown): void => {
        const key = String(errorMessage(e) ?? e).replace(/:\d+/g, ":<port>");
        failures.set(key, (failures.get(key) ?? 0) + 1);
      };
      let ok = 0;
      const t0 = performance.now();
      const deadline = t0 + TIME_LIMIT_MS;
      const loop = async (): Promise<void> => {
        for (let i = 0; i < DIALS_PER_LOOP && performance.now() < deadline; i++) {
          try {
            const s = await client.dial(`127.0.0.1.churn:${echoPort}`);
            s.on("error", () => undefined); // reported through echoOnce; late errors are irrelevant
            try {
              await echoOnce(s, msg, 5_000);
              ok++;
            } finally {
              s.destroy();
            }
          } catch (e) {
            fail(e);
          }
        }
      };
      await Promise.all(Array.from({ length: LOOPS }, loop));
      const ms = performance.now() - t0;
      assert.deepEqual(
        Object.fromEntries(failures),
        {},
        `${ok} cycles ok in ${Math.round(ms)} ms; failures by message`,
      );
      assert.equal(ok, LOOPS * DIALS_PER_LOOP, `only ${ok} cycles completed within ${TIME_LIMIT_MS} ms`);
      assert.ok(ms < TIME_LIMIT_MS, `took ${Math.round(ms)} ms`);
    },
  );
});
