/** TokenReview caching (by a hash of the token; rejections briefly) and the audit file's rotation. */
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { FileAuditSink, type AuditRecord } from "./audit-log.js";
import { Authenticator, NEGATIVE_CACHE_MAX_MS } from "./authentication.js";
import type { GatewayError } from "./gateway-error.js";
import { FakeHub } from "./testing/fake-hub.js";

describe("Authenticator", () => {
  test("caches reviews for the TTL, rejections at most briefly", async () => {
    const hub = new FakeHub();
    let now = 0;
    const a = new Authenticator({
      hub,
      tokenReview: true,
      cacheTtlMs: 10_000,
      passthroughUnrecognizedTokens: false,
      now: () => now,
    });
    hub.tokens.set("t1", { username: "u", groups: [], extra: {} });
    await a.authenticate({ authorization: "Bearer t1" });
    await a.authenticate({ authorization: "Bearer t1" });
    assert.equal(hub.reviews.length, 1);
    now += 10_001;
    await a.authenticate({ authorization: "Bearer t1" });
    assert.equal(hub.reviews.length, 2);
    await assert.rejects(a.authenticate({ authorization: "Bearer t2" }), (e: GatewayError) => e.status === 401);
    hub.tokens.set("t2", { username: "v", groups: [], extra: {} });
    await assert.rejects(a.authenticate({ authorization: "Bearer t2" }), (e: GatewayError) => e.status === 401);
    now += NEGATIVE_CACHE_MAX_MS + 1;
    assert.deepEqual(await a.authenticate({ authorization: "Bearer t2" }), {
      method: "token",
      user: { username: "v", groups: [], extra: {} },
    });
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
