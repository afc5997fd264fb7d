import assert from "node:assert/strict";
import { Resolver } from "node:dns/promises";
import { test } from "node:test";
import { clusterResolver, serveDns } from "../infra/env/dns.js";

test("the cluster DNS answers Service names and LoadBalancer hostnames to a real resolver", async () => {
  const resolve = clusterResolver((ns, name) =>
    ns === "default" && name === "kubernetes" ? ["10.200.101.1"] : ns === "x" && name === "empty" ? [] : null,
  );
  // Port 0 is not allowed for the pair (UDP and TCP must share it): pick a free one by retrying.
  let server;
  let port = 0;
  for (let i = 0; i < 20 && !server; i++) {
    port = 20_000 + Math.floor(Math.random() * 30_000);
    server = await serveDns("127.0.0.1", port, resolve).catch(() => undefined);
  }
  assert.ok(server, "no free port");
  try {
    const r = new Resolver({ timeout: 2_000, tries: 1 });
    r.setServers([`127.0.0.1:${port}`]);
    assert.deepEqual(await r.resolve4("kubernetes.default.svc.cluster.local"), ["10.200.101.1"]);
    assert.deepEqual(await r.resolve4("KUBERNETES.default.svc.cluster.local."), ["10.200.101.1"]);
    assert.deepEqual(await r.resolve4("10-200-30-7.lb.cpenv.test"), ["10.200.30.7"]);
    await assert.rejects(r.resolve4("nope.default.svc.cluster.local"), { code: "ENOTFOUND" });
    await assert.rejects(r.resolve4("example.com"), { code: "ENOTFOUND" });
    await assert.rejects(r.resolve4("300-1-1-1.lb.cpenv.test"), { code: "ENOTFOUND" });
    // Known names have no AAAA records: an empty answer, not NXDOMAIN.
    await assert.rejects(r.resolve6("kubernetes.default.svc.cluster.local"), { code: "ENODATA" });
    await assert.rejects(r.resolve4("empty.x.svc.cluster.local"), { code: "ENODATA" });
  } finally {
    await server.close();
  }
});
