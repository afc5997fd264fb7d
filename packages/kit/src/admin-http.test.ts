import assert from "node:assert/strict";
import { once } from "node:events";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { after, describe, test } from "node:test";
import { adminPortHandler, healthPortHandler } from "./admin-http.js";
import type { MetricsRegistry } from "./endpoint-server.js";
import { PROCESS_STATS_PATH } from "./process-stats.js";

const registry: MetricsRegistry = {
  metrics: () => Promise.resolve("up 1\n"),
  contentType: "text/plain; version=0.0.4",
};

async function serve(handler: http.RequestListener): Promise<{ get(path: string): Promise<Response> }> {
  const server = http.createServer(handler);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  after(() => {
    server.closeAllConnections();
    server.close();
  });
  const { port } = server.address() as AddressInfo;
  return { get: (path) => fetch(`http://127.0.0.1:${port}${path}`) };
}

describe("health port", () => {
  test("serves /healthz, the component's readiness on /readyz and /ready, /metrics, and 404 otherwise", async () => {
    let ready = false;
    const seen: boolean[] = [];
    const port = await serve(
      healthPortHandler({
        registry,
        readiness: (verbose) => {
          seen.push(verbose);
          return ready ? { status: 200, body: verbose ? "all ok\n" : "ok" } : { status: 503, body: "not yet\n" };
        },
      }),
    );
    const healthz = await port.get("/healthz");
    assert.deepEqual([healthz.status, await healthz.text()], [200, "ok"]);
    const notReady = await port.get("/readyz");
    assert.deepEqual([notReady.status, await notReady.text()], [503, "not yet\n"]);
    ready = true;
    const readyz = await port.get("/readyz?verbose");
    assert.deepEqual([readyz.status, await readyz.text()], [200, "all ok\n"]);
    const legacy = await port.get("/ready");
    assert.deepEqual([legacy.status, await legacy.text()], [200, "ok"]);
    assert.deepEqual(seen, [false, true, false]);
    const metrics = await port.get("/metrics");
    assert.equal(metrics.headers.get("content-type"), registry.contentType);
    assert.equal(await metrics.text(), "up 1\n");
    const missing = await port.get("/debug/process");
    assert.deepEqual([missing.status, await missing.text()], [404, "404 page not found\n"]);
  });
});

describe("admin port", () => {
  test("serves /metrics, and the process statistics only with profiling", async () => {
    const plain = await serve(adminPortHandler(registry));
    assert.equal(await (await plain.get("/metrics")).text(), "up 1\n");
    assert.equal((await plain.get(PROCESS_STATS_PATH)).status, 404);
    assert.equal((await plain.get("/healthz")).status, 404);
    const profiling = await serve(adminPortHandler(registry, true));
    const stats = await profiling.get(PROCESS_STATS_PATH);
    assert.equal(stats.status, 200);
    assert.equal(typeof ((await stats.json()) as { rssBytes: unknown }).rssBytes, "number");
  });

  test("a registry that fails answers 500 with the reason", async () => {
    const failing = await serve(
      adminPortHandler({ metrics: () => Promise.reject(new Error("collector broke")), contentType: "text/plain" }),
    );
    const res = await failing.get("/metrics");
    assert.deepEqual([res.status, await res.text()], [500, "cannot collect metrics: collector broke\n"]);
  });
});
