import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import {
  NOT_FOUND_BODY,
  closeEndpointServer,
  createEndpointServer,
  listenEndpointServer,
  metricsEndpoint,
  probeEndpoint,
  reply,
  type MetricsRegistry,
} from "./endpoint-server.js";

const registry: MetricsRegistry = {
  metrics: () => Promise.resolve("up 1\n"),
  contentType: "text/plain; version=0.0.4",
};
const broken: MetricsRegistry = { metrics: () => Promise.reject(new Error("boom")), contentType: "text/plain" };

describe("endpoint server", () => {
  test("serves its endpoints by path (query ignored, ?verbose passed), 404 otherwise", async () => {
    const seen: boolean[] = [];
    const { server, address } = await listenEndpointServer(
      createEndpointServer({
        "/healthz": (_req, res) => reply(res, 200, "ok"),
        "/readyz": probeEndpoint((verbose) => {
          seen.push(verbose);
          return { status: 503, body: "not yet\n" };
        }),
        "/metrics": metricsEndpoint(registry),
        "/broken": metricsEndpoint(broken),
      }),
      { host: "127.0.0.1", port: 0, flag: "--health-port" },
    );
    after(() => closeEndpointServer(server));
    const get = (path: string): Promise<Response> => fetch(`http://127.0.0.1:${address.port}${path}`);
    const healthz = await get("/healthz?x=1");
    assert.deepEqual([healthz.status, await healthz.text()], [200, "ok"]);
    assert.equal(healthz.headers.get("content-length"), "2");
    const readyz = await get("/readyz?verbose");
    assert.deepEqual([readyz.status, await readyz.text()], [503, "not yet\n"]);
    assert.deepEqual(seen, [true]);
    const metrics = await get("/metrics");
    assert.equal(metrics.headers.get("content-type"), registry.contentType);
    assert.equal(await metrics.text(), "up 1\n");
    const failed = await get("/broken");
    assert.deepEqual([failed.status, await failed.text()], [500, "cannot collect metrics: boom\n"]);
    const missing = await get("/nothing");
    assert.deepEqual([missing.status, await missing.text()], [404, NOT_FOUND_BODY]);
  });

  test("a component's own 404 body", async () => {
    const { server, address } = await listenEndpointServer(createEndpointServer({}, "not found\n"), {
      host: "127.0.0.1",
      port: 0,
      flag: "--metrics",
    });
    after(() => closeEndpointServer(server));
    const missing = await fetch(`http://127.0.0.1:${address.port}/metrics`);
    assert.deepEqual([missing.status, await missing.text()], [404, "not found\n"]);
  });

  test("a listen failure names the flag and the address, through the component's error", async () => {
    const taken = await listenEndpointServer(createEndpointServer({}), { host: "127.0.0.1", port: 0, flag: "--a" });
    after(() => closeEndpointServer(taken.server));
    class ConfigProblem extends Error {}
    await assert.rejects(
      listenEndpointServer(
        createEndpointServer({}),
        { host: "127.0.0.1", port: taken.address.port, flag: "--health-port" },
        (message, cause) => new ConfigProblem(message, { cause }),
      ),
      (err: unknown) =>
        err instanceof ConfigProblem &&
        err.message.startsWith(`--health-port: cannot listen on 127.0.0.1:${taken.address.port}: `),
    );
  });
});
