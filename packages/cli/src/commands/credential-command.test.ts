import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { GATEWAY_TOKEN_AUDIENCE } from "@cluster-proxy/api";
import { KubeResources } from "@cluster-proxy/kube";
import { FAKE_API_AUDIENCE, FakeApiServer, type FakeRequest } from "@cluster-proxy/kube/testing";
import { FAKE_HUB_API_AUDIENCE, startGatewayFixture } from "@cluster-proxy/gateway/testing";
import { execCredential, jwtExpiry, parseExecInfo, tokenServiceAccount } from "../hub/exec-credential.js";
import { runCaptured } from "../testing/capture.js";

const jwt = (claims: Record<string, unknown>): string =>
  ["e30", Buffer.from(JSON.stringify(claims)).toString("base64url"), "c2ln"].join(".");
const execInfo = (apiVersion: string, config?: unknown): string =>
  JSON.stringify({
    apiVersion,
    kind: "ExecCredential",
    spec: { interactive: false, cluster: { server: "https://gw/mc1", config } },
  });

let dir: string;
let hub: FakeApiServer;
let kubeconfig: string;
/** The requests the hub got since `mark()`. */
let since = 0;
const mark = (): void => void (since = hub.requests.length);
const requests = (): FakeRequest[] => hub.requests.slice(since);

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "cp-credential-"));
  hub = await FakeApiServer.start();
  hub.put(KubeResources.serviceAccount, { metadata: { name: "consumer", namespace: "fleet" } });
  hub.put(KubeResources.serviceAccount, { metadata: { name: "reader", namespace: "team-a" } });
  kubeconfig = join(dir, "hub.kubeconfig");
  const userToken = jwt({ sub: "system:serviceaccount:team-a:reader", exp: 2_000_000_000 });
  writeFileSync(
    kubeconfig,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "hub", cluster: { server: hub.url, "insecure-skip-tls-verify": true } }],
      users: [{ name: "u", user: { token: userToken } }],
      contexts: [{ name: "c", context: { cluster: "hub", user: "u" } }],
      "current-context": "c",
    }),
  );
});

after(async () => {
  await hub?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("KUBERNETES_EXEC_INFO: the version to answer in and the cluster of the access provider's extension", () => {
  assert.deepEqual(parseExecInfo(undefined), { apiVersion: "client.authentication.k8s.io/v1", interactive: false });
  assert.deepEqual(parseExecInfo(execInfo("client.authentication.k8s.io/v1", { cluster: "mc1" })), {
    apiVersion: "client.authentication.k8s.io/v1",
    interactive: false,
    cluster: "mc1",
  });
  assert.equal(
    parseExecInfo(execInfo("client.authentication.k8s.io/v1beta1")).apiVersion,
    "client.authentication.k8s.io/v1beta1",
  );
  assert.throws(() => parseExecInfo(execInfo("client.authentication.k8s.io/v1alpha1")), /not one of/);
  assert.throws(() => parseExecInfo(execInfo("client.authentication.k8s.io/v1", { name: "x" })), /is not \{"cluster"/);
  assert.throws(() => parseExecInfo("{"), /not JSON/);
});

test("ExecCredential answers carry the token and an RFC 3339 expiry; JWT claims give the ServiceAccount and expiry", () => {
  assert.deepEqual(execCredential("client.authentication.k8s.io/v1", "t", new Date("2026-11-26T20:00:00.000Z")), {
    apiVersion: "client.authentication.k8s.io/v1",
    kind: "ExecCredential",
    status: { token: "t", expirationTimestamp: "2026-11-26T20:00:00Z" },
  });
  assert.deepEqual(execCredential("client.authentication.k8s.io/v1", "t").status, { token: "t" });
  assert.deepEqual(tokenServiceAccount(jwt({ sub: "system:serviceaccount:ns:sa" })), { namespace: "ns", name: "sa" });
  assert.equal(tokenServiceAccount(jwt({ sub: "alice" })), undefined);
  assert.equal(tokenServiceAccount("opaque"), undefined);
  assert.equal(jwtExpiry(jwt({ exp: 1_800_000_000 }))?.toISOString(), "2027-01-15T08:00:00.000Z");
  assert.equal(jwtExpiry("opaque"), undefined);
});

test("a TokenRequest for the named ServiceAccount, the gateway's audience, the asked lifetime; no Secret is created", async () => {
  mark();
  const r = await runCaptured(
    ["credential", "--kubeconfig", kubeconfig, "--service-account", "fleet/consumer", "--expiration", "20m"],
    { KUBERNETES_EXEC_INFO: execInfo("client.authentication.k8s.io/v1", { cluster: "mc1" }) },
  );
  assert.equal(r.code, 0, r.err);
  const issued = hub.issuedTokens.at(-1)!;
  assert.equal(issued.serviceAccount, "fleet/consumer");
  assert.deepEqual(JSON.parse(r.out), {
    apiVersion: "client.authentication.k8s.io/v1",
    kind: "ExecCredential",
    status: { token: issued.token, expirationTimestamp: issued.expirationTimestamp },
  });
  assert.equal(requests().length, 1);
  assert.equal(requests()[0]!.method, "POST");
  assert.equal(requests()[0]!.path, "/api/v1/namespaces/fleet/serviceaccounts/consumer/token");
  assert.equal(requests()[0]!.query.toString(), "");
  assert.deepEqual(hub.objects(KubeResources.secret), [], "no Secret is created");
  assert.deepEqual(requests()[0]!.body, {
    apiVersion: "authentication.k8s.io/v1",
    kind: "TokenRequest",
    spec: { expirationSeconds: 1200, audiences: [GATEWAY_TOKEN_AUDIENCE] },
  });
});

test("the credential is a gateway credential: the gateway's TokenReview asks for its audience and accepts it, a plain hub token is refused with --accept-hub-api-audience=false", async () => {
  const r = await runCaptured(["credential", "--kubeconfig", kubeconfig, "--service-account", "fleet/consumer"], {});
  assert.equal(r.code, 0, r.err);
  const token = (JSON.parse(r.out) as { status: { token: string } }).status.token;
  // The audiences the hub issued the token for (those the TokenRequest asked for, or its own).
  const issuedFor = hub.tokens.get(token)?.audiences;
  assert.ok(issuedFor, "a token the hub issued");
  const f = await startGatewayFixture({ options: { acceptHubApiAudience: false } });
  try {
    const user = { username: "system:serviceaccount:fleet:consumer", groups: [], extra: {} };
    // The gateway's hub (a FakeHub) knows the token as the apiserver issued it (its own audience by FakeHub's name).
    f.hub.tokens.set(token, user);
    f.hub.tokenAudiences.set(
      token,
      issuedFor.map((a) => (a === FAKE_API_AUDIENCE ? FAKE_HUB_API_AUDIENCE : a)),
    );
    f.hub.tokens.set("plain-hub-token", user);
    f.hub.grantProxy(user.username, "mc1", "get");
    const minted = await f.request("/mc1/version", { headers: { authorization: `Bearer ${token}` } });
    assert.equal(minted.status, 200, minted.body);
    assert.deepEqual(f.hub.reviewAudiences, [[GATEWAY_TOKEN_AUDIENCE]]);
    const plain = await f.request("/mc1/version", { headers: { authorization: "Bearer plain-hub-token" } });
    assert.equal(plain.status, 401, plain.body);
  } finally {
    await f.close();
  }
});

test("without --service-account: the kubeconfig's own ServiceAccount; audiences when asked; v1beta1 when asked", async () => {
  mark();
  const r = await runCaptured(["credential", "--kubeconfig", kubeconfig, "--audience", "a1", "--audience", "a2"], {
    KUBERNETES_EXEC_INFO: execInfo("client.authentication.k8s.io/v1beta1"),
  });
  assert.equal(r.code, 0, r.err);
  assert.equal((JSON.parse(r.out) as { apiVersion: string }).apiVersion, "client.authentication.k8s.io/v1beta1");
  assert.equal(requests()[0]!.path, "/api/v1/namespaces/team-a/serviceaccounts/reader/token");
  assert.deepEqual(requests()[0]!.body, {
    apiVersion: "authentication.k8s.io/v1",
    kind: "TokenRequest",
    spec: { expirationSeconds: 3600, audiences: ["a1", "a2"] },
  });
});

test("failures name the ServiceAccount and the cluster; bad flags exit 2", async () => {
  const r = await runCaptured(["credential", "--kubeconfig", kubeconfig, "--service-account", "fleet/missing"], {
    KUBERNETES_EXEC_INFO: execInfo("client.authentication.k8s.io/v1", { cluster: "mc2" }),
  });
  assert.equal(r.code, 1);
  assert.match(r.err, /TokenRequest for ServiceAccount fleet\/missing \(for cluster mc2\): .*not found/);
  const short = await runCaptured(["credential", "--kubeconfig", kubeconfig, "--expiration", "5m"]);
  assert.equal(short.code, 2);
  assert.match(short.err, /--expiration: at least 10m/);
  const bad = await runCaptured(["credential", "--kubeconfig", kubeconfig, "--service-account", "nope"]);
  assert.equal(bad.code, 2);
  assert.match(bad.err, /--service-account: "nope" is not <namespace>\/<name>/);
});

test("--token-file passes a token through with the expiry it carries, re-read on every call", async () => {
  const file = join(dir, "id-token");
  const token = jwt({ sub: "alice", exp: 1_800_000_000 });
  writeFileSync(file, `${token}\n`);
  const r = await runCaptured(["credential", "--token-file", file]);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(JSON.parse(r.out), {
    apiVersion: "client.authentication.k8s.io/v1",
    kind: "ExecCredential",
    status: { token, expirationTimestamp: "2027-01-15T08:00:00Z" },
  });
  writeFileSync(file, "");
  const empty = await runCaptured(["credential", "--token-file", file]);
  assert.equal(empty.code, 1);
  assert.match(empty.err, /is empty/);
});
