/**
 * TokenReview caching (by a hash of the token; rejections briefly, in a cache of their own), the
 * per-source rate limit of reviews of tokens not cached, and the audit file's rotation.
 */
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { FileAuditSink, type AuditRecord } from "./audit-log.js";
import { Authenticator, NEGATIVE_CACHE_MAX_MS } from "./authentication.js";
import type { GatewayError } from "./gateway-error.js";
import { OidcAuthenticator } from "./oidc.js";
import { FakeHub } from "./testing/fake-hub.js";
import { TestIssuer } from "./testing/test-issuer.js";

describe("Authenticator", () => {
  test("caches reviews for the TTL, rejections at most briefly", async () => {
    const hub = new FakeHub();
    const clock = new ManualClock();
    const a = new Authenticator({
      hub,
      tokenReview: true,
      cacheTtlMs: 10_000,
      passthroughUnrecognizedTokens: false,
      clock,
    });
    hub.tokens.set("t1", { username: "u", groups: [], extra: {} });
    await a.authenticate({ authorization: "Bearer t1" });
    await a.authenticate({ authorization: "Bearer t1" });
    assert.equal(hub.reviews.length, 1);
    clock.advance(10_001);
    await a.authenticate({ authorization: "Bearer t1" });
    assert.equal(hub.reviews.length, 2);
    await assert.rejects(a.authenticate({ authorization: "Bearer t2" }), (e: GatewayError) => e.status === 401);
    hub.tokens.set("t2", { username: "v", groups: [], extra: {} });
    await assert.rejects(a.authenticate({ authorization: "Bearer t2" }), (e: GatewayError) => e.status === 401);
    clock.advance(NEGATIVE_CACHE_MAX_MS + 1);
    assert.deepEqual(await a.authenticate({ authorization: "Bearer t2" }), {
      method: "token",
      user: { username: "v", groups: [], extra: {} },
    });
  });

  test("a flood of made-up tokens from one source costs at most the bucket's reviews; cached and other sources' tokens keep working", async () => {
    const hub = new FakeHub();
    const clock = new ManualClock();
    let limited = 0;
    const a = new Authenticator({
      hub,
      tokenReview: true,
      cacheTtlMs: 10_000,
      passthroughUnrecognizedTokens: true,
      reviewRatePerSource: 2,
      reviewBurstPerSource: 10,
      onRateLimited: () => limited++,
      clock,
    });
    hub.tokens.set("good", { username: "u", groups: [], extra: {} });
    hub.tokens.set("other", { username: "o", groups: [], extra: {} });
    const attacker = "2001:db8:1:2::7";
    assert.equal((await a.authenticate({ authorization: "Bearer good", source: attacker })).method, "token");
    const answers = await Promise.allSettled(
      Array.from({ length: 1_000 }, (_, i) =>
        // The attacker's whole /64 is one source.
        a.authenticate({ authorization: `Bearer junk-${i}`, source: `2001:db8:1:2::${(i % 9000).toString(16)}` }),
      ),
    );
    assert.equal(hub.reviews.length, 10, "the burst: the first review was the good token's");
    const refused = answers.filter((r) => r.status === "rejected").map((r) => r.reason as GatewayError);
    assert.equal(refused.length, 991, "nine made-up tokens went through as pass-through, the rest were refused");
    assert.ok(refused.every((e) => e.status === 429 && e.retryAfterSeconds === 1));
    assert.match(refused[0]!.message, /--token-review-rate-per-source/);
    assert.equal(limited, 991);
    assert.equal((await a.authenticate({ authorization: "Bearer good", source: attacker })).method, "token");
    assert.equal((await a.authenticate({ authorization: "Bearer other", source: "10.0.0.2" })).method, "token");
    assert.equal(hub.reviews.length, 11, "only the other source's token was reviewed");
    // A token the hub rejected is not reviewed again, even once the bucket has refilled.
    clock.advance(1_000);
    await a.authenticate({ authorization: "Bearer junk-0", source: attacker });
    assert.equal(hub.reviews.length, 11);
    await a.authenticate({ authorization: "Bearer junk-999", source: attacker });
    assert.equal(hub.reviews.length, 12, "two tokens back after a second");
  });

  test("rejections are cached apart: made-up tokens never push a good token out", async () => {
    const hub = new FakeHub();
    const a = new Authenticator({ hub, tokenReview: true, cacheTtlMs: 60_000, passthroughUnrecognizedTokens: false });
    hub.tokens.set("good", { username: "u", groups: [], extra: {} });
    await a.authenticate({ authorization: "Bearer good" });
    for (let i = 0; i < 10_001; i++)
      await assert.rejects(
        a.authenticate({ authorization: `Bearer junk-${i}` }),
        (e: GatewayError) => e.status === 401,
      );
    const reviews = hub.reviews.length;
    await a.authenticate({ authorization: "Bearer good" });
    await assert.rejects(a.authenticate({ authorization: "Bearer junk-10000" }));
    assert.equal(hub.reviews.length, reviews, "the good token and the latest rejection are both still cached");
  });

  test("an OIDC token the issuer's keys accept gets in when the source's TokenReview bucket is empty", async () => {
    const issuer = new TestIssuer();
    await issuer.start();
    try {
      const hub = new FakeHub();
      const oidc = new OidcAuthenticator({
        issuerUrl: issuer.url,
        clientId: "gateway",
        ca: issuer.ca,
        usernameClaim: "sub",
        usernamePrefix: "oidc:",
        groupsClaim: "groups",
        groupsPrefix: "oidc:",
        requiredClaims: [],
      });
      const a = new Authenticator({
        hub,
        tokenReview: true,
        cacheTtlMs: 10_000,
        oidc,
        passthroughUnrecognizedTokens: false,
        reviewRatePerSource: 1,
        reviewBurstPerSource: 1,
      });
      await assert.rejects(
        a.authenticate({ authorization: "Bearer junk", source: "10.0.0.1" }),
        (e: GatewayError) => e.status === 401,
      );
      await assert.rejects(
        a.authenticate({ authorization: "Bearer junk-2", source: "10.0.0.1" }),
        (e: GatewayError) => e.status === 429,
      );
      const id = await a.authenticate({ authorization: `Bearer ${await issuer.token()}`, source: "10.0.0.1" });
      assert.equal(id.method, "oidc");
      assert.equal(hub.reviews.length, 1, "the hub was asked about the first token only");
    } finally {
      issuer.close();
    }
  });

  test("a hub that cannot review is 503, and an unrecognised token may pass through", async () => {
    const hub = new FakeHub();
    hub.failTokenReview = true;
    const a = new Authenticator({ hub, tokenReview: true, cacheTtlMs: 0, passthroughUnrecognizedTokens: true });
    await assert.rejects(a.authenticate({ authorization: "Bearer x" }), (e: GatewayError) => e.status === 503);
    hub.failTokenReview = false;
    assert.deepEqual(await a.authenticate({ authorization: "Bearer x" }), {
      method: "passthrough",
      authorization: "Bearer x",
    });
  });
});

describe("FileAuditSink", () => {
  test("rotates by size and keeps at most max files", () => {
    const dir = mkdtempSync(join(tmpdir(), "cp-audit-"));
    try {
      const path = join(dir, "audit.log");
      const sink = new FileAuditSink(path, 400, 2);
      const rec = (i: number): AuditRecord => ({
        time: "t",
        requestID: `r${i}`,
        method: "GET",
        code: 200,
        bytesIn: 0,
        bytesOut: 0,
        durationMs: 1,
        decision: "allow",
      });
      for (let i = 0; i < 20; i++) sink.write(rec(i));
      sink.close();
      assert.ok(existsSync(`${path}.1`) && existsSync(`${path}.2`) && !existsSync(`${path}.3`));
      const last = readFileSync(path, "utf8").trim().split("\n").at(-1)!;
      assert.equal((JSON.parse(last) as AuditRecord).requestID, "r19");
      for (const f of [path, `${path}.1`, `${path}.2`]) assert.ok(readFileSync(f).length <= 400);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
