/**
 * The aggregated path on loopback (docs/design/gateway.md, "The aggregated path"): the hub
 * apiserver, played here by a client holding a certificate of the hub's requestheader CA, states
 * the user in X-Remote-* headers; the gateway believes them only from that certificate with an
 * allowed name, valid now, and authorizes and impersonates exactly as for its own callers.
 *
 * The invariant, attacked with a corpus: the identity the cluster sees is the one the front proxy
 * stated on its own connection, or the one the caller's own credentials prove; identity headers
 * from anyone else are never believed and never forwarded.
 */
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import { after, before, describe, test } from "node:test";
import { aggregatedClusterPath, GATEWAY_API_ROOT } from "@cluster-proxy/api";
import { silentLogger, type Logger } from "@cluster-proxy/kit";
import { createCertificateAuthority, issueCertificate, type CertificateAndKey } from "@cluster-proxy/pki";
import type { EchoBody } from "./testing/fake-endpoint.js";
import { h2From, startGatewayFixture, type GatewayFixture } from "./testing/gateway-fixture.js";

const FRONT_PROXY_NAME = "front-proxy-client";
const TOKEN = "alice-token";
const DAY_MS = 86_400_000;

function echo(body: string): EchoBody {
  return JSON.parse(body) as EchoBody;
}

/** The values of every field named `name` that reached the endpoint, in order. */
function fields(e: EchoBody, name: string): string[] {
  return e.rawHeaders.filter((_, i) => i % 2 === 1 && e.rawHeaders[i - 1]!.toLowerCase() === name);
}

function requestHeaderData(ca: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    "requestheader-client-ca-file": ca,
    "requestheader-allowed-names": JSON.stringify([FRONT_PROXY_NAME]),
    "requestheader-username-headers": JSON.stringify(["X-Remote-User"]),
    "requestheader-group-headers": JSON.stringify(["X-Remote-Group"]),
    "requestheader-extra-headers-prefix": JSON.stringify(["X-Remote-Extra-"]),
    ...extra,
  };
}

describe("the aggregated path: the hub apiserver as a front proxy", () => {
  let f: GatewayFixture;
  let frontProxyCa: CertificateAndKey;
  let frontProxy: { cert: Buffer; key: Buffer };
  const identity = { "x-remote-user": "bob", "x-remote-group": ["devs", "system:authenticated"] };
  const mc1 = aggregatedClusterPath("mc1");
  const warnings: string[] = [];
  const logger: Logger = { ...silentLogger, warn: (_, msg) => warnings.push(msg ?? ""), child: () => logger };

  before(async () => {
    const page = { body: Buffer.from("<script src=app.js></script>"), type: "text/html", cache: "no-cache" };
    f = await startGatewayFixture({ clientCa: true, fleet: { assets: new Map([["", page]]) }, logger });
    frontProxyCa = await createCertificateAuthority({ commonName: "front-proxy-ca", validityDays: 2 });
    const c = await issueCertificate(frontProxyCa, { commonName: FRONT_PROXY_NAME, usage: "client", validityDays: 1 });
    frontProxy = { cert: Buffer.from(c.certPem), key: Buffer.from(c.keyPem) };
    f.hub.setConfigMap(requestHeaderData(frontProxyCa.certPem), "extension-apiserver-authentication");
    f.hub.grantProxy("bob", "mc1", "get", "create");
    f.hub.grantProxy("alice", "mc1", "get");
    f.hub.tokens.set(TOKEN, { username: "alice", groups: ["team-a"], extra: {} });
  });
  after(() => f.close());

  test("the user the front proxy states reaches the cluster, impersonated with the prefix, and is audited", async () => {
    const r = await f.request(`${mc1}/api/v1/namespaces?limit=1`, {
      headers: { ...identity, "x-remote-extra-scopes": ["view", "edit"], "x-remote-extra-acme.com%2Fteam": "x" },
      ...frontProxy,
    });
    assert.equal(r.status, 200, r.body);
    const e = echo(r.body);
    assert.equal(e.url, "/api/v1/namespaces?limit=1");
    assert.equal(e.headers["impersonate-user"], "cluster:hub:bob");
    // One group per field, as the hub sent them (Node's `headers` would join them with ", ").
    assert.deepEqual(fields(e, "impersonate-group"), ["cluster:hub:devs", "cluster:hub:system:authenticated"]);
    assert.deepEqual(fields(e, "impersonate-extra-scopes"), ["view", "edit"]);
    assert.equal(e.headers["impersonate-extra-acme.com%2fteam"], "x");
    for (const name of Object.keys(e.headers)) assert.ok(!name.startsWith("x-remote-"), name);
    const rec = f.audit.at(-1)!;
    assert.equal(rec.user, "bob");
    assert.equal(rec.authentication, "front-proxy");
    const review = f.hub.accessReviews.at(-1)!;
    assert.equal(review.user.username, "bob");
    assert.deepEqual(review.attributes, {
      group: "cluster.open-cluster-management.io",
      resource: "managedclusters",
      subresource: "proxy",
      name: "mc1",
      verb: "get",
    });
  });

  test("hub authorization holds on this path: 403 naming managedclusters/proxy and the cluster", async () => {
    const r = await f.request(`${aggregatedClusterPath("mc2")}/api/v1/namespaces`, {
      headers: identity,
      ...frontProxy,
    });
    assert.equal(r.status, 403);
    assert.match(r.body, /managedclusters\/proxy/);
    assert.match(r.body, /mc2/);
  });

  test("over HTTP/2 too, and the proxy root maps to the cluster's root", async () => {
    const session = http2.connect(`https://127.0.0.1:${f.port}`, {
      ca: f.servingCa,
      servername: "localhost",
      ...frontProxy,
    });
    try {
      const s = session.request({ ":path": `${mc1}?timeout=5s`, ...identity });
      const chunks: Buffer[] = [];
      s.on("data", (c: Buffer) => chunks.push(c));
      const [status] = await Promise.all([
        new Promise<number>((resolve) => s.once("response", (h) => resolve(Number(h[":status"])))),
        new Promise((resolve) => s.once("end", resolve)),
      ]);
      assert.equal(status, 200);
      const e = echo(Buffer.concat(chunks).toString());
      assert.equal(e.url, "/?timeout=5s");
      assert.equal(e.headers["impersonate-user"], "cluster:hub:bob");
    } finally {
      session.close();
    }
  });

  test("the discovery documents are served without credentials", async () => {
    const v = await f.request(GATEWAY_API_ROOT);
    assert.equal(v.status, 200);
    const doc = JSON.parse(v.body) as { kind: string; resources: { name: string }[] };
    assert.equal(doc.kind, "APIResourceList");
    assert.deepEqual(
      doc.resources.map((r) => r.name),
      ["clusters", "clusters/proxy"],
    );
    const g = await f.request("/apis/gateway.proxy.open-cluster-management.io");
    assert.equal((JSON.parse(g.body) as { kind: string }).kind, "APIGroup");
  });

  test("the OpenAPI documents the hub polls are 404 at once: no review, no audit record", async () => {
    const reviews = f.hub.accessReviews.length;
    const audited = f.audit.length;
    for (const path of [
      "/openapi/v2",
      "/openapi/v3",
      "/openapi/v3/apis/gateway.proxy.open-cluster-management.io/v1alpha1",
    ]) {
      const r = await f.request(path, {
        headers: { "x-remote-user": "system:aggregator", "x-remote-group": "system:masters" },
        ...frontProxy,
      });
      assert.equal(r.status, 404, `${path}: ${r.body}`);
    }
    assert.equal(f.hub.accessReviews.length, reviews);
    assert.equal(f.audit.length, audited);
  });

  test("identity headers from anyone but the front proxy are neither believed nor forwarded (corpus)", async () => {
    const wrongCa = await createCertificateAuthority({ commonName: "front-proxy-ca", validityDays: 2 });
    const impostorSameName = await issueCertificate(wrongCa, { commonName: FRONT_PROXY_NAME, usage: "client" });
    const otherName = await issueCertificate(frontProxyCa, { commonName: "someone-else", usage: "client" });
    const serverOnly = await issueCertificate(frontProxyCa, {
      commonName: FRONT_PROXY_NAME,
      dnsNames: ["x"],
      usage: "server",
    });
    const asCert = (c: { certPem: string; keyPem: string }): { cert: Buffer; key: Buffer } => ({
      cert: Buffer.from(c.certPem),
      key: Buffer.from(c.keyPem),
    });
    const claims: Record<string, string | string[]>[] = [
      identity,
      { "x-remote-user": "system:admin" },
      { "X-Remote-User": "bob", "X-Remote-Group": "system:masters" },
      { "x-remote-user": ["bob", "system:admin"] },
    ];
    // No credentials but the claim: 401, whatever certificate that is not the front proxy's.
    for (const cert of [undefined, asCert(impostorSameName), asCert(otherName), asCert(serverOnly)])
      for (const headers of claims) {
        const r = await f.request(`${mc1}/api/v1/namespaces`, { headers, ...(cert ?? {}) });
        assert.equal(r.status, 401, `${JSON.stringify(headers)} with ${cert ? "a certificate" : "none"}: ${r.body}`);
      }
    // With the caller's own credentials: that identity, and the claim goes nowhere.
    for (const headers of claims) {
      const r = await f.request(`${mc1}/api/v1/namespaces`, {
        headers: { ...headers, authorization: `Bearer ${TOKEN}` },
      });
      assert.equal(r.status, 200, r.body);
      const e = echo(r.body);
      assert.equal(e.headers["impersonate-user"], "cluster:hub:alice");
      assert.equal(e.headers["impersonate-group"], "cluster:hub:team-a");
      for (const name of Object.keys(e.headers)) assert.ok(!name.startsWith("x-remote-"), name);
    }
    // A client certificate of --client-ca-file is its own user (carol), never the front proxy.
    f.hub.grantProxy("carol", "mc1", "get");
    const carol = await f.request(`${mc1}/api/v1/namespaces`, { headers: identity, ...f.client });
    assert.equal(carol.status, 200, carol.body);
    assert.equal(echo(carol.body).headers["impersonate-user"], "cluster:hub:carol");
  });

  test("the fleet view is the cluster `-`: its page and API as the user the front proxy states, nobody else", async () => {
    f.hub.setAddOn("mc1", {
      status: "True",
      reason: "ProxyAgentAvailable",
      message: "tunnel works through 1 of 1 proxy-server (s1)",
      lastTransitionTime: "2026-11-26T20:00:00Z",
    });
    const fleet = `${aggregatedClusterPath("-")}/fleet`;
    const redirect = await f.request(fleet, { headers: identity, ...frontProxy });
    assert.equal(redirect.status, 308);
    // Relative, so that it stays below the hub apiserver's path.
    assert.equal(new URL(redirect.headers.location!, `https://hub${fleet}`).pathname, `${fleet}/`);
    const page = await f.request(`${fleet}/`, { headers: identity, ...frontProxy });
    assert.equal(page.status, 200);
    assert.match(page.body, /<script/);
    const api = await f.request(`${fleet}/api/clusters`, { headers: identity, ...frontProxy });
    assert.equal(api.status, 200, api.body);
    assert.deepEqual(
      (JSON.parse(api.body) as { clusters: { cluster: string }[] }).clusters.map((c) => c.cluster),
      ["mc1"],
    );
    const review = f.hub.accessReviews.at(-1)!;
    assert.equal(review.user.username, "bob");
    const rec = f.audit.at(-1)!;
    assert.equal(rec.user, "bob");
    assert.equal(rec.path, `${fleet}/api/clusters`);
    // The claim without the front proxy's certificate is not believed: no credentials, 401; a
    // client certificate of --client-ca-file is its own viewer (carol).
    for (const headers of [identity, { "x-remote-user": "system:admin" }]) {
      const r = await f.request(`${fleet}/api/clusters`, { headers });
      assert.equal(r.status, 401, r.body);
      const carol = await f.request(`${fleet}/api/clusters`, { headers, ...f.client });
      assert.equal(carol.status, 200, carol.body);
      assert.equal(f.audit.at(-1)!.user, "carol");
    }
    const none = await f.request(`${fleet}/api/clusters`, { ...frontProxy });
    assert.equal(none.status, 401);
    assert.match(none.body, /without a user/);
  });

  test("the front proxy naming no user is 401; an expired front-proxy certificate is not believed", async () => {
    const none = await f.request(`${mc1}/api/v1/namespaces`, { ...frontProxy });
    assert.equal(none.status, 401);
    assert.match(none.body, /without a user/);
    f.advance(2 * DAY_MS);
    try {
      const r = await f.request(`${mc1}/api/v1/namespaces`, { headers: identity, ...frontProxy });
      assert.equal(r.status, 401, r.body);
    } finally {
      f.advance(-2 * DAY_MS);
    }
  });

  test("a front-proxy connection that outlives its certificate is no longer believed", async () => {
    const session = http2.connect(`https://127.0.0.1:${f.port}`, {
      ca: f.servingCa,
      servername: "localhost",
      ...frontProxy,
    });
    const status = (): Promise<number> =>
      new Promise((resolve, reject) => {
        const s = session.request({ ":path": `${mc1}/api`, ...identity });
        s.once("response", (h) => resolve(Number(h[":status"])));
        s.once("error", reject);
        s.resume();
      });
    try {
      assert.equal(await status(), 200);
      f.advance(2 * DAY_MS);
      assert.equal(await status(), 401, "the same connection, after the certificate's notAfter");
    } finally {
      f.advance(-2 * DAY_MS);
      session.close();
    }
  });

  test("the hub's settings are followed: other header names, a rotated CA, and a malformed update kept out", async () => {
    const custom = requestHeaderData(frontProxyCa.certPem, {
      "requestheader-username-headers": JSON.stringify(["X-Custom-User"]),
    });
    f.hub.setConfigMap(custom, "extension-apiserver-authentication");
    const r = await f.request(`${mc1}/api/v1/namespaces`, {
      headers: { "x-custom-user": "bob", "x-remote-user": "mallory" },
      ...frontProxy,
    });
    assert.equal(r.status, 200, r.body);
    assert.equal(echo(r.body).headers["impersonate-user"], "cluster:hub:bob");
    // From anyone else, the configured name is dropped like X-Remote-User.
    const viaToken = await f.request(`${mc1}/api/v1/namespaces`, {
      headers: { "x-custom-user": "bob", authorization: `Bearer ${TOKEN}` },
    });
    assert.equal(echo(viaToken.body).headers["x-custom-user"], undefined);
    // A malformed update keeps the last good settings.
    f.hub.setConfigMap({ ...custom, "requestheader-allowed-names": "not json" }, "extension-apiserver-authentication");
    const still = await f.request(`${mc1}/api/v1/namespaces`, { headers: { "x-custom-user": "bob" }, ...frontProxy });
    assert.equal(still.status, 200, still.body);
    // A rotated CA: the old front-proxy certificate is no longer believed.
    const rotated = await createCertificateAuthority({ commonName: "front-proxy-ca-2", validityDays: 2 });
    f.hub.setConfigMap(requestHeaderData(rotated.certPem), "extension-apiserver-authentication");
    assert.equal((await f.request(`${mc1}/api/v1/namespaces`, { headers: identity, ...frontProxy })).status, 401);
    // Deleted: the path is off, nobody's headers are believed.
    f.hub.setConfigMap(undefined, "extension-apiserver-authentication");
    assert.equal((await f.request(`${mc1}/api/v1/namespaces`, { headers: identity, ...frontProxy })).status, 401);
    f.hub.setConfigMap(requestHeaderData(frontProxyCa.certPem), "extension-apiserver-authentication");
  });

  test("a hub that lists no allowed names: any certificate of its requestheader CA is believed, as the hub does, and the gateway warns", async () => {
    const otherName = await issueCertificate(frontProxyCa, { commonName: "someone-else", usage: "client" });
    const other = { cert: Buffer.from(otherName.certPem), key: Buffer.from(otherName.keyPem) };
    assert.equal((await f.request(`${mc1}/api/v1/namespaces`, { headers: identity, ...other })).status, 401);
    warnings.length = 0;
    f.hub.setConfigMap(
      requestHeaderData(frontProxyCa.certPem, { "requestheader-allowed-names": "[]" }),
      "extension-apiserver-authentication",
    );
    try {
      assert.equal((await f.request(`${mc1}/api/v1/namespaces`, { headers: identity, ...other })).status, 200);
      assert.ok(
        warnings.some((w) => /no requestheader-allowed-names/.test(w)),
        JSON.stringify(warnings),
      );
    } finally {
      f.hub.setConfigMap(requestHeaderData(frontProxyCa.certPem), "extension-apiserver-authentication");
    }
  });

  test("a path under the group that is not clusters/<name>/proxy is 400", async () => {
    for (const path of [`${GATEWAY_API_ROOT}/clusters/mc1`, `${GATEWAY_API_ROOT}/clusters/mc1/proxyx/api`]) {
      const r = await f.request(path, { headers: identity, ...frontProxy });
      assert.equal(r.status, 400, path);
    }
  });
});

describe("the aggregated path: the hub apiserver is not one client of the per-client connection cap", () => {
  const CAP = 2;
  let f: GatewayFixture;
  let frontProxy: { cert: Buffer; key: Buffer };
  let stranger: { cert: Buffer; key: Buffer };

  before(async () => {
    f = await startGatewayFixture({ clientCa: true, limits: { maxConnectionsPerClient: CAP } });
    const ca = await createCertificateAuthority({ commonName: "front-proxy-ca", validityDays: 2 });
    const c = await issueCertificate(ca, { commonName: FRONT_PROXY_NAME, usage: "client", validityDays: 1 });
    frontProxy = { cert: Buffer.from(c.certPem), key: Buffer.from(c.keyPem) };
    // Same CA, a name the hub does not allow: not the front proxy, counted like anyone.
    const s = await issueCertificate(ca, { commonName: "someone-else", usage: "client", validityDays: 1 });
    stranger = { cert: Buffer.from(s.certPem), key: Buffer.from(s.keyPem) };
    f.hub.setConfigMap(requestHeaderData(ca.certPem), "extension-apiserver-authentication");
    f.hub.grantProxy("bob", "mc1", "get");
  });
  after(() => f.close());

  /** An HTTP/2 connection from `localAddress` with `cert`, once it answered one request (its status). */
  const connect = async (
    localAddress: string,
    cert: { cert: Buffer; key: Buffer },
  ): Promise<{ session: http2.ClientHttp2Session; status: number }> => {
    const session = h2From(f, localAddress, cert);
    const status = await new Promise<number>((resolve) => {
      const req = session.request({
        ":path": `${aggregatedClusterPath("mc1")}/api`,
        "x-remote-user": "bob",
        "x-remote-group": "system:authenticated",
      });
      req.on("response", (h) => resolve(Number(h[":status"])));
      req.on("error", () => resolve(0));
      req.on("close", () => resolve(0));
      req.resume();
      req.end();
    });
    return { session, status };
  };

  test("the front proxy holds more connections than the cap from one address; others from it are still capped", async () => {
    const held: http2.ClientHttp2Session[] = [];
    try {
      for (let i = 0; i < CAP * 3; i++) {
        const c = await connect("127.0.0.21", frontProxy);
        held.push(c.session);
        assert.equal(c.status, 200, `front-proxy connection ${i + 1}`);
      }
      // A caller from the hub's own address without the front proxy's certificate counts as before.
      for (let i = 0; i < CAP; i++) {
        const c = await connect("127.0.0.21", stranger);
        held.push(c.session);
        assert.equal(c.status, 401, `connection ${i + 1} of a caller that is not the front proxy`);
      }
      const over = await connect("127.0.0.21", stranger);
      held.push(over.session);
      // (The cap is taken on arrival, before the handshake shows who connects: while others hold
      // the cap of the hub's own address, a new front-proxy connection from it is closed too.)
      assert.equal(over.status, 0, "a non-front-proxy connection over the cap is closed on arrival");
    } finally {
      for (const s of held) s.destroy();
    }
  });
});
