/**
 * KubeApi's options against a loopback HTTP server: the request timeout (a request not answered in
 * time fails naming it; a watch is not bounded by it), the field manager and the selectors.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { KubeApi, KubeApiError, KubeResources, type KubeApiConfig, type WatchEvent } from "./kube-api.js";

describe("KubeApi options", () => {
  let server: http.Server;
  const urls: string[] = [];
  let config: KubeApiConfig;

  before(async () => {
    server = http.createServer((req, res) => {
      const url = new URL(req.url ?? "/", "http://x");
      urls.push(req.url ?? "");
      if (url.pathname.endsWith("/silent")) return; // accepted, never answered
      if (url.searchParams.get("watch") === "1") {
        // A watch that sends its one event after longer than the request timeout, then ends.
        res.writeHead(200, { "content-type": "application/json" });
        setTimeout(() => {
          res.end(
            `${JSON.stringify({ type: "ADDED", object: { metadata: { name: "late", resourceVersion: "2" } } })}\n`,
          );
        }, 400);
        return;
      }
      req.resume();
      req.on("end", () => {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ metadata: { name: "x", resourceVersion: "1" }, items: [] }));
      });
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const port = (server.address() as AddressInfo).port;
    config = {
      getCurrentCluster: () => ({ server: `http://127.0.0.1:${port}` }),
      applyToHTTPSOptions: () => Promise.resolve(),
    };
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  it("a request not answered within requestTimeoutMs fails naming it; a watch outlives it", async () => {
    const api = new KubeApi(config, { requestTimeoutMs: 200 });
    const started = Date.now();
    await assert.rejects(api.request("GET", "/api/v1/silent"), (err: unknown) => {
      assert.ok(err instanceof KubeApiError);
      assert.equal(err.reason, "Timeout");
      assert.match(err.message, /GET \/api\/v1\/silent: no answer within 0\.2 s/);
      return true;
    });
    assert.ok(Date.now() - started < 5_000);
    assert.deepEqual((await api.list(KubeResources.secret, { namespace: "ns" })).items, []);
    const events: WatchEvent[] = [];
    await api.watch(
      KubeResources.secret,
      { resourceVersion: "1" },
      (e) => events.push(e),
      new AbortController().signal,
    );
    assert.deepEqual(
      events.map((e) => e.type),
      ["ADDED"],
    );
  });

  it("writes carry the field manager; lists and watches the label and field selectors", async () => {
    const api = new KubeApi(config, { fieldManager: "cluster-proxy-gateway" });
    await api.apply(KubeResources.configMap, { metadata: { name: "x", namespace: "ns" } });
    assert.equal(new URL(urls.at(-1)!, "http://x").searchParams.get("fieldManager"), "cluster-proxy-gateway");
    await api.list(KubeResources.configMap, {
      namespace: "ns",
      labelSelector: "a=b",
      fieldSelector: "metadata.name=x",
    });
    const q = new URL(urls.at(-1)!, "http://x");
    assert.equal(q.pathname, "/api/v1/namespaces/ns/configmaps");
    assert.equal(q.searchParams.get("labelSelector"), "a=b");
    assert.equal(q.searchParams.get("fieldSelector"), "metadata.name=x");
    await api.watch(
      KubeResources.configMap,
      { namespace: "ns", fieldSelector: "metadata.name=x", resourceVersion: "1" },
      () => undefined,
      new AbortController().signal,
    );
    assert.equal(new URL(urls.at(-1)!, "http://x").searchParams.get("fieldSelector"), "metadata.name=x");
    await new KubeApi(config).apply(KubeResources.configMap, { metadata: { name: "x", namespace: "ns" } });
    assert.equal(
      new URL(urls.at(-1)!, "http://x").searchParams.get("fieldManager"),
      "cluster-proxy-addon-manager",
      "the default: the manager every cluster-proxy client has written with",
    );
  });
});

describe("KubeApi request signal", () => {
  it(
    "an aborted request closes its connection, waiting for the answer or reading its body",
    { timeout: 20_000 },
    async () => {
      const server = http.createServer((req, res) => {
        if (req.url?.endsWith("/half")) {
          res.writeHead(200, { "content-type": "application/json" });
          res.write('{"metadata":'); // the rest never comes
        }
        // otherwise: accepted, never answered
      });
      server.listen(0, "127.0.0.1");
      await once(server, "listening");
      const connections = (): Promise<number> =>
        new Promise((resolve, reject) => server.getConnections((err, n) => (err ? reject(err) : resolve(n))));
      try {
        const port = (server.address() as AddressInfo).port;
        const api = new KubeApi(
          {
            getCurrentCluster: () => ({ server: `http://127.0.0.1:${port}` }),
            applyToHTTPSOptions: () => Promise.resolve(),
          },
          { requestTimeoutMs: 60_000 },
        );
        const stop = new AbortController();
        const calls = ["/api/v1/silent", "/api/v1/half", "/api/v1/silent"].map((path) =>
          api.request("GET", path, undefined, undefined, stop.signal).then(
            () => undefined,
            (err: unknown) => err,
          ),
        );
        for (let open = await connections(); open < calls.length; open = await connections())
          await new Promise((resolve) => setTimeout(resolve, 10));
        const started = Date.now();
        stop.abort();
        for (const err of await Promise.all(calls))
          assert.ok(err instanceof KubeApiError && err.reason === "Transport", String(err));
        for (let open = await connections(); open > 0; open = await connections()) {
          assert.ok(Date.now() - started < 5_000, `${open} connections still open 5 s after the abort`);
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        await assert.rejects(api.request("GET", "/api/v1/silent", undefined, undefined, stop.signal), KubeApiError);
      } finally {
        server.closeAllConnections();
        server.close();
      }
    },
  );
});
