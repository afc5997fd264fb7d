/**
 * The gateway end to end on loopback: a fake hub, a fake agent endpoint through the injected
 * dialer. Authentication paths, authorization and its messages, impersonation, the identity
 * headers of the contract, the service allowlist, error mapping, streaming, upgrades, audit,
 * metrics, HTTP/2, the serving certificate reload and the per-cluster pool.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { writeFile } from "node:fs/promises";
import type * as http from "node:http";
import * as http2 from "node:http2";
import * as https from "node:https";
import * as net from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { ConfigError, parseGatewayOptions, type GatewayOptionsInput } from "@cluster-proxy/api";
import { DialError } from "@cluster-proxy/client";
import { issueCertificate } from "@cluster-proxy/pki";
import type { EchoBody } from "./testing/fake-endpoint.js";
import { startGatewayFixture, type GatewayFixture } from "./testing/gateway-fixture.js";
import { FakeHub } from "./testing/fake-hub.js";
import { Gateway } from "./gateway.js";
import { TlsFileError } from "@cluster-proxy/tunnel";
import { ManualClock, recordingLogger } from "@cluster-proxy/kit/testing";

const ALICE = "system:serviceaccount:default:alice";
const TOKEN = "alice-token-secret-value";

function echo(body: string): EchoBody {
  return JSON.parse(body) as EchoBody;
}

describe("gateway", () => {
  let f: GatewayFixture;
  const bearer = { authorization: `Bearer ${TOKEN}` };
  before(async () => {
    f = await startGatewayFixture({ options: { clientCaFile: "" } });
    f.hub.tokens.set(TOKEN, { username: ALICE, uid: "u-1", groups: ["system:serviceaccounts", "team-a"], extra: {} });
    f.hub.grantProxy(ALICE, "mc1", "get", "create", "update", "patch", "delete");
  });
  after(() => f.close());

  test("a hub token reaches the cluster as the caller, impersonated with the prefix; the token is not forwarded", async () => {
    const r = await f.request("/mc1/api/v1/namespaces/default/pods?limit=1", { headers: bearer });
    assert.equal(r.status, 200, r.body);
    const e = echo(r.body);
    assert.equal(e.url, "/api/v1/namespaces/default/pods?limit=1");
    assert.equal(e.headers["impersonate-user"], `cluster:hub:${ALICE}`);
    assert.equal(e.headers["impersonate-group"], "cluster:hub:system:serviceaccounts, cluster:hub:team-a");
    assert.equal(e.headers["impersonate-uid"], "u-1");
    assert.equal(e.headers["cluster-proxy-target"], "kube");
    assert.equal(e.headers.authorization, undefined);
    assert.ok(!r.body.includes(TOKEN));
    assert.deepEqual(f.endpoint.dialed.slice(-1), ["gateway.cluster-proxy.invalid.mc1:443"]);
  });

  test("no credentials and a garbage token are 401", async () => {
    assert.equal((await f.request("/mc1/api")).status, 401);
    const r = await f.request("/mc1/api", { headers: { authorization: "Bearer garbage" } });
    assert.equal(r.status, 401);
    assert.match(r.body, /not recognised/);
    assert.equal((await f.request("/mc1/api", { headers: { authorization: "Basic Zm9vOmJhcg==" } })).status, 401);
  });

  test("a caller the hub does not allow gets 403 naming the permission and the cluster", async () => {
    const r = await f.request("/mc2/api/v1/pods", { headers: bearer });
    assert.equal(r.status, 403);
    assert.equal(
      r.body.trim(),
      `user "${ALICE}" may not "get" managedclusters/proxy "mc2" in group cluster.open-cluster-management.io`,
    );
  });

  test("an unknown cluster is 404 only for a caller allowed to reach it; others get 403", async () => {
    f.hub.grantProxy(ALICE, "gone", "get");
    const r = await f.request("/gone/api", { headers: bearer });
    assert.equal(r.status, 404);
    assert.equal(r.body.trim(), 'cluster "gone" is not a managed cluster of this hub');
    assert.equal((await f.request("/nothere/api", { headers: bearer })).status, 403);
  });

  test("the hub verb follows the HTTP method; other methods are 405", async () => {
    const verbs: Record<string, string> = {
      GET: "get",
      HEAD: "get",
      POST: "create",
      PUT: "update",
      PATCH: "patch",
      DELETE: "delete",
    };
    for (const [method, verb] of Object.entries(verbs)) {
      f.advance(60_000);
      const before = f.hub.accessReviews.length;
      const r = await f.request(`/mc1/api/v1/namespaces/default/configmaps/verb-${method}`, {
        method,
        headers: bearer,
      });
      assert.equal(r.status, 200, `${method}: ${r.body}`);
      assert.equal(f.hub.accessReviews[before]?.attributes.verb, verb, method);
    }
    assert.equal((await f.request("/mc1/api", { method: "OPTIONS", headers: bearer })).status, 405);
  });

  test("malformed URLs are 400 with a one-line message", async () => {
    for (const path of ["/", "/MC1/api", "/mc1/../mc2/api", "/mc1/api/%2e%2e/x", "/mc1//api", "/mc1/a%2Fb"]) {
      const r = await f.request(path, { headers: bearer });
      assert.equal(r.status, 400, path);
      assert.equal(r.body.trim().split("\n").length, 1);
    }
  });

  test("Impersonate-* headers are honoured only when the hub allows each", async () => {
    const headers = { ...bearer, "impersonate-user": "bob", "impersonate-group": "ops" };
    let r = await f.request("/mc1/api", { headers });
    assert.equal(r.status, 403);
    assert.match(r.body, /may not "impersonate" users "bob"/);
    f.hub.grant(ALICE, { group: "", resource: "users", name: "bob", verb: "impersonate" });
    f.advance(60_000);
    r = await f.request("/mc1/api", { headers });
    assert.equal(r.status, 403);
    assert.match(r.body, /may not "impersonate" groups "ops"/);
    f.hub.grant(ALICE, { group: "", resource: "groups", name: "ops", verb: "impersonate" });
    f.advance(60_000);
    r = await f.request("/mc1/api", { headers });
    // bob himself needs the cluster permission now.
    assert.equal(r.status, 403);
    assert.match(r.body, /user "bob" may not "get" managedclusters\/proxy "mc1"/);
    f.hub.grantProxy("bob", "mc1", "get");
    f.advance(60_000);
    r = await f.request("/mc1/api", { headers: { ...headers, "impersonate-extra-acme.com%2Fteam": "x" } });
    assert.equal(r.status, 403);
    assert.match(r.body, /userextras\/acme.com\/team "x"/);
    f.hub.grant(ALICE, {
      group: "authentication.k8s.io",
      resource: "userextras",
      subresource: "acme.com/team",
      name: "x",
      verb: "impersonate",
    });
    f.advance(60_000);
    r = await f.request("/mc1/api", { headers: { ...headers, "impersonate-extra-acme.com%2Fteam": "x" } });
    assert.equal(r.status, 200, r.body);
    const e = echo(r.body);
    assert.equal(e.headers["impersonate-user"], "cluster:hub:bob");
    assert.equal(e.headers["impersonate-group"], "cluster:hub:ops, cluster:hub:system:authenticated");
    assert.equal(e.headers["impersonate-extra-acme.com%2fteam"], "x");
  });

  test("the hub failing TokenReview or SubjectAccessReview is 503, saying so", async () => {
    f.hub.failTokenReview = true;
    let r = await f.request("/mc1/api", { headers: { authorization: "Bearer fresh-token-1" } });
    f.hub.failTokenReview = false;
    assert.equal(r.status, 503);
    assert.match(r.body, /TokenReview failed/);
    f.hub.tokens.set("carl-token", { username: "carl", groups: [], extra: {} });
    f.hub.failAccessReview = true;
    r = await f.request("/mc1/api", { headers: { authorization: "Bearer carl-token" } });
    f.hub.failAccessReview = false;
    assert.equal(r.status, 503);
    assert.match(r.body, /SubjectAccessReview failed/);
  });

  test("responses stream before they end (a watch)", async () => {
    const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
      https
        .get(
          {
            host: "127.0.0.1",
            port: f.port,
            path: "/mc1/stream?watch=1",
            ca: f.servingCa,
            agent: false,
            headers: bearer,
          },
          resolve,
        )
        .on("error", reject);
    });
    assert.equal(res.statusCode, 200);
    const [first] = (await once(res, "data")) as [Buffer];
    assert.equal(first.toString(), "first\n");
    f.endpoint.release();
    let rest = "";
    res.on("data", (c: Buffer) => (rest += c.toString()));
    await once(res, "end");
    assert.equal(rest, "last\n");
  });

  test("a body of a declared length ends the caller's answer with its last byte, before the endpoint's END_STREAM", async () => {
    const session = http2.connect(`https://127.0.0.1:${f.port}`, { ca: f.servingCa, servername: "localhost" });
    try {
      const stream = session.request({ ":path": "/mc1/sized", ...bearer });
      let body = "";
      stream.on("data", (c: Buffer) => (body += c.toString()));
      const ended = once(stream, "end").then(() => "ended");
      const limit = new Promise<string>((resolve) =>
        setTimeout(() => resolve("not ended within 10 s"), 10_000).unref(),
      );
      // The endpoint still holds its stream open: the caller's stream ended without waiting for it.
      assert.equal(await Promise.race([ended, limit]), "ended");
      assert.equal(body, "sized\n");
      await f.endpoint.heldCount(1);
    } finally {
      f.endpoint.release();
      session.close();
    }
  });

  test("a watch with no events yet gets its response head at once, over HTTP/1.1 and HTTP/2", async () => {
    const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
      https
        .get(
          {
            host: "127.0.0.1",
            port: f.port,
            path: "/mc1/quiet?watch=1",
            ca: f.servingCa,
            agent: false,
            headers: bearer,
          },
          resolve,
        )
        .on("error", reject);
    });
    assert.equal(res.statusCode, 200);
    const session = http2.connect(`https://127.0.0.1:${f.port}`, { ca: f.servingCa, servername: "localhost" });
    const stream = session.request({ ":path": "/mc1/quiet?watch=1", ...bearer });
    const [headers] = (await once(stream, "response")) as [http2.IncomingHttpHeaders];
    assert.equal(headers[":status"], 200);
    f.endpoint.release();
    res.resume();
    stream.resume();
    await Promise.all([once(res, "end"), once(stream, "end")]);
    session.close();
  });

  test("request bodies reach the endpoint", async () => {
    const r = await f.request("/mc1/api/v1/namespaces/default/configmaps", {
      method: "POST",
      headers: bearer,
      body: '{"a":1}',
    });
    assert.equal(r.status, 200);
    assert.equal((JSON.parse(r.body) as { body: string }).body, '{"a":1}');
  });

  test("an upgrade is relayed both ways with half-close", async () => {
    const socket = await f.tlsConnect();
    socket.write(
      `GET /mc1/api/v1/namespaces/default/pods/p/exec?command=sh HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n`,
    );
    let got = "";
    socket.on("data", (c: Buffer) => (got += c.toString()));
    await waitFor(() => got.includes("\r\n\r\n"));
    assert.match(got, /^HTTP\/1.1 101/);
    socket.write("ping");
    await waitFor(() => got.endsWith("ping"));
    socket.end();
    await once(socket, "end");
    assert.ok(got.endsWith("pingbye"), got);
    await waitFor(() => f.audit.some((a) => a.upgrade && a.code === 101));
    const rec = f.audit.find((a) => a.upgrade && a.code === 101)!;
    assert.equal(rec.subresource, "exec");
    assert.equal(rec.bytesIn, 4);
  });

  test("audit records hold who, what and the decision, and never the token", async () => {
    const n = f.audit.length;
    await f.request("/mc2/api/v1/namespaces/ns1/secrets/s1", { headers: bearer });
    const rec = f.audit[n]!;
    assert.equal(rec.user, ALICE);
    assert.equal(rec.cluster, "mc2");
    assert.equal(rec.decision, "deny");
    assert.equal(rec.code, 403);
    assert.equal(rec.verb, "get");
    assert.equal(rec.resource, "secrets");
    assert.equal(rec.namespace, "ns1");
    assert.equal(rec.name, "s1");
    assert.equal(rec.authentication, "token");
    for (const a of f.audit) assert.ok(!JSON.stringify(a).includes(TOKEN));
  });

  test("metrics label existing clusters only", async () => {
    await f.request("/nosuch/api", { headers: bearer });
    const text = await (await fetch(`http://127.0.0.1:${f.healthPort}/metrics`)).text();
    assert.match(text, /cluster_proxy_gateway_requests_total\{cluster="mc1",code="200",verb="get"\}/);
    assert.match(text, /cluster_proxy_gateway_requests_total\{cluster="_unknown",code="403"/);
    assert.ok(!text.includes('cluster="nosuch"'));
    assert.match(text, /cluster_proxy_gateway_authentication_failures_total\{reason="no-credentials"\}/);
    assert.match(text, /cluster_proxy_gateway_authorization_denials_total\{reason="cluster-proxy-denied"\}/);
    assert.equal((await fetch(`http://127.0.0.1:${f.healthPort}/readyz`)).status, 200);
  });

  test("an HTTP/2 client works", async () => {
    const session = http2.connect(`https://127.0.0.1:${f.port}`, { ca: f.servingCa, servername: "localhost" });
    const stream = session.request({ ":path": "/mc1/api/v1/pods", ...bearer });
    const [headers] = (await once(stream, "response")) as [http2.IncomingHttpHeaders];
    let body = "";
    stream.on("data", (c: Buffer) => (body += c.toString()));
    await once(stream, "end");
    session.close();
    assert.equal(headers[":status"], 200);
    assert.equal(echo(body).headers["impersonate-user"], `cluster:hub:${ALICE}`);
  });

  test("the serving certificate is reloaded without a restart", async () => {
    const fresh = await issueCertificate(f.servingAuthority, {
      commonName: "gateway-2",
      dnsNames: ["localhost"],
      ipAddresses: ["127.0.0.1"],
      usage: "server",
      validityDays: 1,
    });
    await writeFile(join(f.dir, "serving.crt"), fresh.certPem);
    await writeFile(join(f.dir, "serving.key"), fresh.keyPem);
    assert.equal(await f.gateway.reloadServingCertificate(), "reloaded");
    const socket = await f.tlsConnect();
    assert.match(socket.getPeerX509Certificate()?.subject ?? "", /CN=gateway-2/);
    socket.destroy();
  });

  test("a renewed gateway identity is used for new connections without a restart", async () => {
    assert.equal((await f.request("/mc1/api", { headers: bearer })).status, 200);
    const fresh = await issueCertificate(f.gatewayAuthority, {
      commonName: "gateway-renewed",
      usage: "client",
      validityDays: 1,
    });
    await writeFile(join(f.dir, "identity.crt"), fresh.certPem);
    await writeFile(join(f.dir, "identity.key"), fresh.keyPem);
    assert.equal(await f.gateway.reloadIdentity(), "reloaded");
    assert.equal((await f.request("/mc1/api", { headers: bearer })).status, 200);
    assert.match(f.endpoint.clientSubjects.at(-1) ?? "", /CN=gateway-renewed/);
  });

  test("requests multiplex on one HTTP/2 session: many requests at once, one dial", async () => {
    const before = f.endpoint.dialed.length;
    const sessions = f.gateway.pool.sessionsFor("mc1");
    const dials = sessions.dials;
    const maxBefore = f.endpoint.maxOpenStreams;
    for (let i = 0; i < 5; i++) assert.equal((await f.request("/mc1/api", { headers: bearer })).status, 200);
    const many = await Promise.all(
      Array.from({ length: 40 }, () => f.request("/mc1/hold", { headers: bearer })).concat([
        f.endpoint.heldCount(40).then(() => {
          f.endpoint.release();
          return { status: 200, body: "", headers: {} };
        }),
      ]),
    );
    for (const r of many) assert.equal(r.status, 200);
    assert.ok(sessions.dials - dials <= 1, `dials: ${sessions.dials - dials}`);
    assert.ok(f.endpoint.dialed.length - before <= 1);
    assert.ok(Math.max(maxBefore, f.endpoint.maxOpenStreams) >= 40, `streams at once: ${f.endpoint.maxOpenStreams}`);
  });
});

describe("a bad TLS file is the same CP_ERR_TLS_FILE, naming the flag and file, at start and on reload", () => {
  test("--serving-key and --identity-key at start against their reloaders", async () => {
    const logger = recordingLogger();
    const errors = (): Record<string, unknown>[] => logger.lines.filter((l) => l.level === "error").map((l) => l.obj);
    const f = await startGatewayFixture({ logger });
    const again = (): Gateway => new Gateway(f.options, { hub: new FakeHub(), dialer: f.endpoint.dialer() });
    const same = (atStart: unknown, flag: string): void => {
      assert.ok(atStart instanceof TlsFileError, String(atStart));
      assert.equal(atStart.code, "CP_ERR_TLS_FILE");
      assert.equal(atStart.flag, flag);
      const refusal = errors().at(-1);
      assert.deepEqual(
        { code: refusal?.["code"], flag: refusal?.["flag"], err: refusal?.["err"] },
        { code: atStart.code, flag: atStart.flag, err: atStart.message },
      );
    };
    try {
      await writeFile(join(f.dir, "serving.key"), "not a key\n");
      assert.equal(await f.gateway.reloadServingCertificate(), "failed");
      const late = again();
      const atStart = await late.start().then(
        () => assert.fail("started with a bad --serving-key"),
        (err: unknown) => err,
      );
      await late.close(0);
      same(atStart, "--serving-key");
      assert.match(String(errors().at(-1)?.["err"]), /^--serving-key: .*serving\.key: not a PEM private key/);

      await writeFile(join(f.dir, "identity.key"), f.servingAuthority.keyPem);
      assert.equal(await f.gateway.reloadIdentity(), "failed");
      const unmatched = again();
      const atIdentity = await unmatched.start().then(
        () => assert.fail("started with an --identity-key not of --identity-cert"),
        (err: unknown) => err,
      );
      await unmatched.close(0);
      same(atIdentity, "--identity-key");
      assert.match(
        String(errors().at(-1)?.["err"]),
        /^--identity-key: .*: does not match the certificate in --identity-cert /,
      );
    } finally {
      await f.close();
    }
  });
});

/** A gateway over `f`'s files with `change` to its options (not started). */
function gatewayOver(
  f: GatewayFixture,
  change: GatewayOptionsInput,
  through: { tunnel?: boolean; auditLog?: boolean } = {},
): Gateway {
  return new Gateway(parseGatewayOptions({ ...f.options, ...change }), {
    hub: new FakeHub(),
    // Without a dialer the gateway dials through a TunnelClient: it reads --proxy-*.
    ...(through.tunnel ? {} : { dialer: f.endpoint.dialer() }),
    ...(through.auditLog ? {} : { audit: { write: () => undefined, close: () => undefined } }),
    bindAddress: "127.0.0.1",
    fleet: { assets: new Map() },
    serviceAccountTokenFile: join(f.dir, "sa.token"),
  });
}

/** Resolves once a connection to `port` on loopback is refused. */
async function refused(port: number): Promise<void> {
  const socket = net.connect(port, "127.0.0.1");
  const [err] = (await once(socket, "error")) as [NodeJS.ErrnoException];
  assert.equal(err.code, "ECONNREFUSED");
}

/** Let promise callbacks and I/O callbacks of this turn run. */
const turns = async (n = 5): Promise<void> => {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
};

describe("gateway: one component shape (options parsed, files read at start; start, drain and close each once)", () => {
  test("constructed over files that are missing it does not throw; start rejects naming the flag (CP_ERR_TLS_FILE)", async () => {
    const f = await startGatewayFixture();
    try {
      const missing = join(f.dir, "missing.pem");
      // In the order the flags are read at start. The fixture's --proxy-* name no file: they are
      // read only when the gateway dials through a TunnelClient (no injected dialer).
      const cases: [GatewayOptionsInput, { tunnel?: boolean }, string][] = [
        [{ oidcIssuerUrl: "https://127.0.0.1:1", oidcClientId: "gateway", oidcCaFile: missing }, {}, "--oidc-ca-file"],
        [{}, { tunnel: true }, "--proxy-cert"],
        [{ identityCert: missing }, {}, "--identity-cert"],
        [{ identityKey: missing }, {}, "--identity-key"],
        [{ agentCa: missing }, {}, "--agent-ca"],
        [{ clientCaFile: missing }, {}, "--client-ca-file"],
        [{ servingCert: missing }, {}, "--serving-cert"],
        [{ servingKey: missing }, {}, "--serving-key"],
      ];
      for (const [change, through, flag] of cases) {
        const g = gatewayOver(f, change, through);
        const err = await g.start().then(
          () => assert.fail(`started without ${flag}`),
          (e: unknown) => e,
        );
        await g.close(0);
        assert.ok(err instanceof TlsFileError, `${flag}: ${String(err)}`);
        assert.equal(err.code, "CP_ERR_TLS_FILE");
        assert.equal(err.flag, flag);
        assert.match(err.message, new RegExp(`^${flag}: ${f.dir}/\\S+: cannot read: ENOENT`));
      }
      // The audit log is opened at start too: a ConfigError naming --audit-log.
      const g = gatewayOver(f, { auditLog: join(f.dir, "no-such-dir", "audit.log") }, { auditLog: true });
      await assert.rejects(
        g.start(),
        (err: unknown) =>
          err instanceof ConfigError && /^--audit-log: \S+audit\.log: cannot open: ENOENT/.test(err.message),
      );
      await g.close(0);
    } finally {
      await f.close();
    }
  });

  test("start twice is one start; a start after close rejects; a close during the start fails it", async () => {
    const f = await startGatewayFixture();
    try {
      const g = gatewayOver(f, {});
      const first = g.start();
      assert.equal(g.start(), first, "a second start gets the first one's promise");
      const { port, healthPort } = await first;
      assert.equal((await fetch(`http://127.0.0.1:${healthPort}/readyz`)).status, 200);
      await g.close(0);
      await assert.rejects(g.start(), /gateway is closed/);
      await refused(port);
      await refused(healthPort);

      const closedEarly = gatewayOver(f, {});
      const starting = closedEarly.start();
      const closing = closedEarly.close(0);
      await assert.rejects(starting, /closed while starting/);
      await closing;

      const never = gatewayOver(f, {});
      await never.close();
      await assert.rejects(never.start(), /gateway is closed/);
    } finally {
      await f.close();
    }
  });

  test("close waits for a request in flight up to its grace, on the gateway's clock, then cuts it", async () => {
    const clock = new ManualClock();
    const f = await startGatewayFixture({ clock });
    try {
      f.hub.tokens.set(TOKEN, { username: ALICE, groups: [], extra: {} });
      f.hub.grantProxy(ALICE, "mc1", "get");
      const held = f.request("/mc1/hold", { headers: { authorization: `Bearer ${TOKEN}` } }).then(
        (r) => r,
        (err: unknown) => err,
      );
      await f.endpoint.heldCount(1);
      let closed = false;
      const closing = f.gateway.close(10_000).then(() => void (closed = true));
      // The port closes in the same turn as the grace starts (the gateway's clock also runs the
      // timers that close stops, so the count of armed ones says nothing).
      await refused(f.port);
      clock.advance(9_999);
      await turns();
      assert.equal(closed, false, "closed before the grace was over");
      clock.advance(1);
      await closing;
      const cut = await held;
      assert.ok(cut instanceof Error, `the request in flight was answered: ${JSON.stringify(cut)}`);
    } finally {
      await f.close();
    }
  });
});

async function waitFor(check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setImmediate(r));
  }
}

describe("gateway: pool bound, client certificates, pass-through, services, tunnel errors", () => {
  test("the sessions are bounded: with every stream of every session busy, the next request waits", async () => {
    const f = await startGatewayFixture({ options: { maxConnectionsPerCluster: 2 } });
    try {
      f.endpoint.setMaxStreams(1);
      f.hub.tokens.set(TOKEN, { username: ALICE, groups: [], extra: {} });
      f.hub.grantProxy(ALICE, "mc1", "get");
      const h = { authorization: `Bearer ${TOKEN}` };
      const held = [f.request("/mc1/hold", { headers: h }), f.request("/mc1/hold", { headers: h })];
      await f.endpoint.heldCount(2);
      let third = false;
      const queued = f.request("/mc1/api", { headers: h }).then((r) => {
        third = true;
        return r;
      });
      // Both sessions carry their one stream: the third request waits for a free stream.
      const sessions = f.gateway.pool.sessionsFor("mc1");
      await waitFor(() => sessions.queued === 1);
      assert.equal(third, false);
      assert.equal(f.endpoint.sessions, 2);
      f.endpoint.release();
      assert.equal((await queued).status, 200);
      await Promise.all(held);
      assert.equal(f.endpoint.sessions, 2);
    } finally {
      await f.close();
    }
  });

  test("client certificates authenticate (CN user, O groups)", async () => {
    const f = await startGatewayFixture({ clientCa: true });
    try {
      f.hub.grantProxy("group:devs", "mc1", "get");
      const r = await f.request("/mc1/api", { cert: f.client.cert, key: f.client.key });
      assert.equal(r.status, 200, r.body);
      const e = echo(r.body);
      assert.equal(e.headers["impersonate-user"], "cluster:hub:carol");
      assert.equal(e.headers["impersonate-group"], "cluster:hub:devs");
      assert.equal(f.audit.at(-1)?.authentication, "x509");
      assert.equal((await f.request("/mc1/api")).status, 401);
      // Over HTTP/2 the certificate counts as well.
      const session = http2.connect(`https://127.0.0.1:${f.port}`, {
        ca: f.servingCa,
        servername: "localhost",
        cert: f.client.cert,
        key: f.client.key,
      });
      try {
        const stream = session.request({ ":path": "/mc1/api" });
        const [head] = (await once(stream, "response")) as [http2.IncomingHttpHeaders];
        stream.resume();
        await once(stream, "end");
        assert.equal(head[":status"], 200);
        assert.equal(f.audit.at(-1)?.authentication, "x509");
      } finally {
        session.close();
      }
    } finally {
      await f.close();
    }
  });

  test("pass-through: an unrecognised token goes to the cluster unchanged, without hub authorization", async () => {
    const f = await startGatewayFixture({ options: { passthroughUnrecognizedTokens: true } });
    try {
      const r = await f.request("/mc1/api/v1/pods", { headers: { authorization: "Bearer cluster-local-token" } });
      assert.equal(r.status, 200, r.body);
      const e = echo(r.body);
      assert.equal(e.headers.authorization, "Bearer cluster-local-token");
      assert.equal(e.headers["cluster-proxy-passthrough"], "true");
      assert.equal(e.headers["impersonate-user"], undefined);
      assert.equal(f.hub.accessReviews.length, 0);
      const rec = f.audit.at(-1)!;
      assert.equal(rec.authentication, "passthrough");
      assert.ok(!JSON.stringify(rec).includes("cluster-local-token"));
      const svc = await f.request("/mc1/api/v1/namespaces/m/services/web:80/proxy-service/", {
        headers: { authorization: "Bearer cluster-local-token" },
      });
      assert.equal(svc.status, 403);
    } finally {
      await f.close();
    }
  });

  test("services: default deny, the allowlist by cluster and cluster set, hot reload, a bad update keeps the last good list", async () => {
    const f = await startGatewayFixture();
    try {
      f.hub.tokens.set(TOKEN, { username: ALICE, groups: [], extra: {} });
      f.hub.grantProxy(ALICE, "mc1", "get");
      f.hub.grantProxy(ALICE, "mc2", "get");
      f.hub.addCluster("mc2", { "cluster.open-cluster-management.io/clusterset": "prod" });
      const h = { authorization: `Bearer ${TOKEN}` };
      const grafana = (cluster: string): Promise<{ status: number; body: string }> =>
        f.request(`/${cluster}/api/v1/namespaces/monitoring/services/http:grafana:3000/proxy-service/d/x?y=1`, {
          headers: h,
        });
      let r = await grafana("mc1");
      assert.equal(r.status, 403);
      assert.equal(r.body.trim(), 'service monitoring/grafana port 3000 (http) is not exposed on cluster "mc1"');
      f.hub.setConfigMap({
        services: "- clusters: [mc1]\n  namespace: monitoring\n  service: grafana\n  port: 3000\n",
      });
      r = await grafana("mc1");
      assert.equal(r.status, 200, r.body);
      const e = echo(r.body);
      assert.equal(e.url, "/d/x?y=1");
      assert.equal(e.headers["cluster-proxy-target"], "service");
      assert.equal(e.headers["cluster-proxy-service"], "http://grafana.monitoring.svc:3000");
      assert.equal(e.headers.authorization, undefined);
      assert.equal((await grafana("mc2")).status, 403);
      f.hub.setConfigMap({ services: "- clusterSets: [prod]\n  namespace: monitoring\n  service: grafana\n" });
      assert.equal((await grafana("mc2")).status, 200);
      assert.equal((await grafana("mc1")).status, 403);
      f.hub.setConfigMap({
        services: "- clusterSets: [prod]\n  namespace: monitoring\n  service: grafana\n  colour: red\n",
      });
      assert.equal((await grafana("mc2")).status, 200, "the last good list stays");
      assert.match(f.hub.events.at(-1)?.message ?? "", /unknown key "colour"/);
      f.hub.setConfigMap(undefined);
      assert.equal((await grafana("mc2")).status, 403);
    } finally {
      await f.close();
    }
  });

  test("the tunnel's errors map to 503, 504 and 502", async () => {
    let mode: "none" | "timeout" | "endpoint" = "none";
    const f = await startGatewayFixture({
      dialer: () => () =>
        Promise.reject(
          mode === "none"
            ? new DialError("No agent available", "endpoint")
            : mode === "timeout"
              ? new DialError("dial timed out", "timeout")
              : new DialError("dial tcp: lookup gateway.cluster-proxy.invalid: no such host", "endpoint"),
        ),
    });
    try {
      f.hub.tokens.set(TOKEN, { username: ALICE, groups: [], extra: {} });
      f.hub.grantProxy(ALICE, "mc1", "get");
      const h = { authorization: `Bearer ${TOKEN}` };
      let r = await f.request("/mc1/api", { headers: h });
      assert.equal(r.status, 503);
      assert.match(r.body, /cluster "mc1" has no connected agent/);
      mode = "timeout";
      r = await f.request("/mc1/api", { headers: h });
      assert.equal(r.status, 504);
      mode = "endpoint";
      r = await f.request("/mc1/api", { headers: h });
      assert.equal(r.status, 502);
      assert.match(r.body, /cluster "mc1".*no such host/);
    } finally {
      await f.close();
    }
  });
});

describe("gateway: shutdown and removed clusters", () => {
  test("SIGTERM path: readyz turns 503, no new connections, in-flight requests finish, then upgrades close", async () => {
    const f = await startGatewayFixture();
    try {
      f.hub.tokens.set(TOKEN, { username: ALICE, groups: [], extra: {} });
      f.hub.grantProxy(ALICE, "mc1", "get", "create");
      const held = f.request("/mc1/hold", { headers: { authorization: `Bearer ${TOKEN}` } });
      await f.endpoint.heldCount(1);
      const up = await f.tlsConnect();
      up.write(
        `GET /mc1/api/v1/namespaces/a/pods/p/attach HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`,
      );
      let got = "";
      up.on("data", (c: Buffer) => (got += c.toString()));
      await waitFor(() => got.includes("101"));
      const upClosed = once(up, "close");
      const closing = f.gateway.close(10_000);
      assert.equal((await fetch(`http://127.0.0.1:${f.healthPort}/readyz`)).status, 503);
      await assert.rejects(f.request("/mc1/api"), /ECONNREFUSED/);
      assert.equal(up.destroyed, false, "upgrades stay while requests are in flight");
      f.endpoint.release();
      assert.equal((await held).status, 200);
      await closing;
      await upClosed;
    } finally {
      await f.close();
    }
  });

  test("drain (--shutdown-delay): not ready but still serving new connections; callers are moved off (Connection: close, GOAWAY)", async () => {
    const clock = new ManualClock();
    const f = await startGatewayFixture({ options: { shutdownDelay: 5_000 }, clock });
    const session = http2.connect(`https://127.0.0.1:${f.port}`, { ca: f.servingCa, servername: "localhost" });
    try {
      f.hub.tokens.set(TOKEN, { username: ALICE, groups: [], extra: {} });
      f.hub.grantProxy(ALICE, "mc1", "get");
      const bearer = { authorization: `Bearer ${TOKEN}` };
      const h2 = (): Promise<number> =>
        new Promise((resolve, reject) => {
          const s = session.request({ ":path": "/mc1/api", ...bearer });
          s.on("response", (h) => resolve(Number(h[":status"])));
          s.on("error", reject);
          s.resume();
        });
      assert.equal(await h2(), 200);
      const goaway = once(session, "goaway");
      const armed = clock.armed;
      const draining = f.gateway.drain();
      assert.equal(f.gateway.drain(), draining, "a second drain gets the first one's promise");
      assert.equal(clock.armed, armed + 1, "one --shutdown-delay, on the gateway's clock");
      let drained = false;
      void draining.then(() => (drained = true));
      assert.equal((await fetch(`http://127.0.0.1:${f.healthPort}/readyz`)).status, 503);
      await goaway;
      // A new connection during the delay (the Service has not caught up): served, and told to go.
      const r = await f.request("/mc1/api", { headers: bearer });
      assert.equal(r.status, 200, r.body);
      assert.equal(r.headers.connection, "close");
      clock.advance(4_999);
      await turns();
      assert.equal(drained, false, "drained before --shutdown-delay was over");
      clock.advance(1);
      assert.equal(await draining, true);
      await f.gateway.close(5_000);
      await assert.rejects(f.request("/mc1/api", { headers: bearer }), /ECONNREFUSED/);
    } finally {
      session.destroy();
      await f.close();
    }
  });

  test("a removed cluster's series are dropped", async () => {
    const f = await startGatewayFixture();
    try {
      f.hub.tokens.set(TOKEN, { username: ALICE, groups: [], extra: {} });
      f.hub.grantProxy(ALICE, "mc2", "get");
      assert.equal((await f.request("/mc2/api", { headers: { authorization: `Bearer ${TOKEN}` } })).status, 200);
      const metrics = async (): Promise<string> => (await fetch(`http://127.0.0.1:${f.healthPort}/metrics`)).text();
      assert.match(await metrics(), /cluster="mc2"/);
      f.hub.clusters.delete("mc2");
      f.advance(60_000);
      assert.equal((await f.request("/mc2/api", { headers: { authorization: `Bearer ${TOKEN}` } })).status, 404);
      const text = await metrics();
      assert.ok(!text.includes('cluster="mc2"'), text);
    } finally {
      await f.close();
    }
  });
});
