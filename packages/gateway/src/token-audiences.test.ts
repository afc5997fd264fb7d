import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { GATEWAY_TOKEN_AUDIENCE } from "@cluster-proxy/api";
import type { TokenReviewResult } from "./hub-api.js";
import { FAKE_HUB_API_AUDIENCE, FakeHub } from "./testing/fake-hub.js";
import { TokenAudiences, tokenFileAudiences } from "./token-audiences.js";

const alice = { username: "alice", groups: [], extra: {} };

function hubWith(): FakeHub {
  const hub = new FakeHub();
  hub.tokens.set("gateway-token", alice);
  hub.tokenAudiences.set("gateway-token", [GATEWAY_TOKEN_AUDIENCE]);
  hub.tokens.set("hub-token", alice);
  hub.tokens.set("other-service-token", alice);
  hub.tokenAudiences.set("other-service-token", ["vault"]);
  return hub;
}

const settings = (acceptHubApiAudience: boolean, hubApiAudiences = [FAKE_HUB_API_AUDIENCE]) => ({
  tokenAudiences: [GATEWAY_TOKEN_AUDIENCE],
  acceptHubApiAudience,
  hubApiAudiences,
});

test("the review asks for the gateway's audiences, and the hub apiserver's while they are accepted", async () => {
  const hub = hubWith();
  const on = new TokenAudiences(hub, settings(true));
  assert.deepEqual(on.requested, [GATEWAY_TOKEN_AUDIENCE, FAKE_HUB_API_AUDIENCE]);
  assert.deepEqual((await on.review("gateway-token")).user, alice);
  assert.deepEqual((await on.review("hub-token")).user, alice);
  assert.equal((await on.review("other-service-token")).user, undefined);
  assert.deepEqual(hub.reviewAudiences, [on.requested, on.requested, on.requested]);
});

test("with the hub apiserver's audience off, a hub API token is refused and a gateway token accepted", async () => {
  const hub = hubWith();
  const off = new TokenAudiences(hub, settings(false));
  assert.deepEqual(off.requested, [GATEWAY_TOKEN_AUDIENCE]);
  assert.deepEqual((await off.review("gateway-token")).user, alice);
  assert.equal((await off.review("hub-token")).user, undefined);
  assert.deepEqual(hub.reviewAudiences, [[GATEWAY_TOKEN_AUDIENCE], [GATEWAY_TOKEN_AUDIENCE]]);
});

test("status.audiences must name an audience asked for; none named (audience-unaware) counts as the hub apiserver's", async () => {
  let answer: TokenReviewResult = {};
  const stub = { tokenReview: () => Promise.resolve(answer) };
  const on = new TokenAudiences(stub, settings(true));
  const off = new TokenAudiences(stub, settings(false));
  answer = { user: alice, audiences: ["vault"] };
  assert.equal((await on.review("t")).user, undefined);
  assert.equal((await off.review("t")).user, undefined);
  answer = { user: alice };
  assert.deepEqual((await on.review("t")).user, alice);
  assert.equal((await off.review("t")).user, undefined);
  answer = { user: alice, audiences: [] };
  assert.equal((await off.review("t")).user, undefined);
});

test("the hub apiserver's audiences unknown: a token refused for the gateway's is reviewed again without audiences", async () => {
  const hub = hubWith();
  const a = new TokenAudiences(hub, settings(true, []));
  assert.deepEqual((await a.review("gateway-token")).user, alice);
  assert.deepEqual((await a.review("hub-token")).user, alice);
  assert.equal((await a.review("other-service-token")).user, undefined);
  assert.deepEqual(hub.reviewAudiences, [
    [GATEWAY_TOKEN_AUDIENCE],
    [GATEWAY_TOKEN_AUDIENCE],
    undefined,
    [GATEWAY_TOKEN_AUDIENCE],
    undefined,
  ]);
  // Off: never a review without audiences.
  const off = new TokenAudiences(hub, settings(false, []));
  hub.reviewAudiences.length = 0;
  assert.equal((await off.review("hub-token")).user, undefined);
  assert.deepEqual(hub.reviewAudiences, [[GATEWAY_TOKEN_AUDIENCE]]);
});

test("the hub apiserver's audiences from the aud claim of a mounted token", async () => {
  const dir = mkdtempSync(join(tmpdir(), "cp-audiences-"));
  try {
    const jwt = (claims: unknown): string =>
      ["e30", Buffer.from(JSON.stringify(claims)).toString("base64url"), "c2ln"].join(".");
    const file = join(dir, "token");
    writeFileSync(file, `${jwt({ aud: ["https://kubernetes.default.svc.cluster.local", "k3s"] })}\n`);
    assert.deepEqual(await tokenFileAudiences(file), ["https://kubernetes.default.svc.cluster.local", "k3s"]);
    writeFileSync(file, jwt({ aud: "https://kubernetes.default.svc" }));
    assert.deepEqual(await tokenFileAudiences(file), ["https://kubernetes.default.svc"]);
    writeFileSync(file, jwt({ sub: "x" }));
    assert.deepEqual(await tokenFileAudiences(file), []);
    writeFileSync(file, "not-a-jwt");
    assert.deepEqual(await tokenFileAudiences(file), []);
    assert.deepEqual(await tokenFileAudiences(join(dir, "missing")), []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
