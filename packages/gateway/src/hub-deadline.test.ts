import assert from "node:assert/strict";
import { beforeEach, describe, test } from "node:test";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { admit, type AdmissionDeps } from "./admission.js";
import { Authenticator } from "./authentication.js";
import { Authorizer } from "./authorization.js";
import { ClusterDirectory } from "./cluster-directory.js";
import { ExposedServices } from "./exposed-services.js";
import { GatewayError } from "./gateway-error.js";
import type { ResourceAttributes, TokenReviewResult, UserInfo } from "./hub-api.js";
import { HUB_REVIEW_TIMEOUT_MS, HubDeadline } from "./hub-deadline.js";
import { RequestRecord } from "./request-record.js";
import { FakeHub } from "./testing/fake-hub.js";

/** A hub apiserver that answers each review after `reviewMs` (of the manual clock). */
class SlowHub extends FakeHub {
  constructor(private readonly clock: ManualClock) {
    super();
  }
  tokenReviewMs = 0;
  accessReviewMs = 0;
  private later<T>(ms: number, answer: () => Promise<T>): Promise<T> {
    return new Promise<void>((resolve) => this.clock.setTimeout(resolve, ms)).then(answer);
  }
  override tokenReview(token: string, audiences?: readonly string[]): Promise<TokenReviewResult> {
    return this.later(this.tokenReviewMs, () => super.tokenReview(token, audiences));
  }
  override subjectAccessReview(user: UserInfo, attributes: ResourceAttributes): Promise<{ allowed: boolean }> {
    return this.later(this.accessReviewMs, () => super.subjectAccessReview(user, attributes));
  }
}

const TOKEN = "alice-token";
const ALICE: UserInfo = { username: "alice", groups: ["system:authenticated"], extra: {} };

/** The clock of the hub and of the deadlines (a new one for each test). */
let clock = new ManualClock();

function setup(): { hub: SlowHub; deps: AdmissionDeps } {
  const hub = new SlowHub(clock);
  hub.tokens.set(TOKEN, ALICE);
  hub.grantProxy("alice", "mc1", "get");
  hub.grant("alice", { group: "", resource: "users", name: "bob", verb: "impersonate" });
  hub.grant("alice", { group: "", resource: "groups", name: "team", verb: "impersonate" });
  hub.grantProxy("bob", "mc1", "get");
  hub.clusters.set("mc1", { name: "mc1", labels: {} });
  const deps: AdmissionDeps = {
    authenticator: new Authenticator({ hub, tokenReview: true, cacheTtlMs: 0, passthroughUnrecognizedTokens: false }),
    authorizer: new Authorizer({ hub, cacheTtlMs: 0 }),
    clusters: new ClusterDirectory(hub),
    services: new ExposedServices(),
    impersonationPrefix: "cluster:hub:",
    clock,
  };
  return { hub, deps };
}

const audit = { write: () => undefined, close: () => undefined };

/** Admit a GET of mc1's pods as alice (with `headers` besides); settles on the manual clock. */
function request(deps: AdmissionDeps, headers: Record<string, string | string[]> = {}) {
  const outcome: { settled?: number; error?: unknown } = {};
  const started = clock.now();
  const done = admit(
    deps,
    {
      method: "GET",
      url: "/mc1/api/v1/namespaces/default/pods",
      headers: { authorization: `Bearer ${TOKEN}`, ...headers },
      upgrade: false,
    },
    new RequestRecord("GET", audit, undefined),
  ).then(
    () => void (outcome.settled = clock.now() - started),
    (err: unknown) => {
      outcome.settled = clock.now() - started;
      outcome.error = err;
    },
  );
  return { outcome, done };
}

/** Advance the manual clock by `ms`, 50 ms at a time, letting promises run in between. */
async function advance(ms: number): Promise<void> {
  for (let t = 0; t < ms; t += 50) {
    clock.advance(50);
    for (let i = 0; i < 5; i++) await new Promise<void>((r) => setImmediate(r));
  }
}

describe("one deadline for all the hub reviews of a request", () => {
  beforeEach(() => (clock = new ManualClock()));

  test("a TokenReview and a SubjectAccessReview of 3 s each: 503 at 5 s, naming the review that was late", async () => {
    const { hub, deps } = setup();
    hub.tokenReviewMs = 3_000;
    hub.accessReviewMs = 3_000;
    const { outcome, done } = request(deps);
    await advance(HUB_REVIEW_TIMEOUT_MS - 100);
    assert.equal(outcome.settled, undefined, "not before the deadline");
    await advance(200);
    assert.notEqual(outcome.settled, undefined, "settled by the deadline");
    await done;
    assert.ok(outcome.error instanceof GatewayError, String(outcome.error));
    assert.equal(outcome.error.status, 503);
    assert.match(
      outcome.error.message,
      /^the hub cannot authorize the request \(SubjectAccessReview failed: the hub apiserver did not answer the SubjectAccessReview within 5000 ms \(the deadline of all the hub reviews of a request\)\)$/,
    );
    assert.ok(outcome.settled! >= HUB_REVIEW_TIMEOUT_MS && outcome.settled! <= HUB_REVIEW_TIMEOUT_MS + 100);
  });

  test("impersonation: three SubjectAccessReviews of 2 s after a TokenReview of 0.5 s: 503 at 5 s", async () => {
    const { hub, deps } = setup();
    hub.tokenReviewMs = 500;
    hub.accessReviewMs = 2_000;
    const { outcome, done } = request(deps, { "impersonate-user": "bob", "impersonate-group": "team" });
    await advance(HUB_REVIEW_TIMEOUT_MS + 100);
    assert.notEqual(outcome.settled, undefined, "settled by the deadline");
    await done;
    assert.ok(outcome.error instanceof GatewayError, String(outcome.error));
    assert.equal(outcome.error.status, 503);
    assert.match(outcome.error.message, /did not answer the SubjectAccessReview within 5000 ms/);
    assert.ok(outcome.settled! <= HUB_REVIEW_TIMEOUT_MS + 100, `settled after ${outcome.settled} ms`);
  });

  test("a TokenReview past the deadline: 503 authentication-unavailable at 5 s", async () => {
    const { hub, deps } = setup();
    hub.tokenReviewMs = 8_000;
    const { outcome, done } = request(deps);
    await advance(HUB_REVIEW_TIMEOUT_MS + 100);
    assert.notEqual(outcome.settled, undefined, "settled by the deadline");
    await done;
    assert.ok(outcome.error instanceof GatewayError, String(outcome.error));
    assert.equal(outcome.error.status, 503);
    assert.match(
      outcome.error.message,
      /^the hub cannot review the token \(TokenReview failed: the hub apiserver did not answer the TokenReview within 5000 ms/,
    );
  });

  test("legitimate traffic: reviews that together fit in the deadline are admitted", async () => {
    const { hub, deps } = setup();
    hub.tokenReviewMs = 2_000;
    hub.accessReviewMs = 2_500;
    const plain = request(deps);
    await advance(4_600);
    assert.notEqual(plain.outcome.settled, undefined, "settled");
    await plain.done;
    assert.equal(plain.outcome.error, undefined, String(plain.outcome.error));
    hub.tokenReviewMs = 1_000;
    hub.accessReviewMs = 1_000;
    const impersonating = request(deps, { "impersonate-user": "bob", "impersonate-group": "team" });
    await advance(4_100);
    assert.notEqual(impersonating.outcome.settled, undefined, "settled");
    await impersonating.done;
    assert.equal(impersonating.outcome.error, undefined, String(impersonating.outcome.error));
  });
});

describe("the deadline's own state", () => {
  test("admission leaves no timer behind, admitted or refused", async () => {
    clock = new ManualClock();
    const { deps } = setup();
    const admitted = request(deps);
    await advance(100);
    await admitted.done;
    assert.equal(admitted.outcome.error, undefined, String(admitted.outcome.error));
    const refused = request(deps, { "impersonate-user": "carol" });
    await advance(100);
    await refused.done;
    assert.ok(refused.outcome.error instanceof GatewayError, String(refused.outcome.error));
    assert.equal(clock.armed, 0);
  });

  test("done() drops the timer and aborts a signal asked for; a deadline that passed still rejects at once", async () => {
    const c = new ManualClock();
    const d = new HubDeadline(1_000, c);
    const signal = d.signal;
    assert.equal(c.armed, 1);
    d.done();
    assert.equal(c.armed, 0);
    assert.equal(signal.aborted, true);
    const late = new HubDeadline(1_000, c);
    c.advance(1_000);
    assert.equal(late.signal.aborted, true);
    await assert.rejects(late.race(new Promise<never>(() => undefined), "TokenReview"), /within 1000 ms/);
  });
});
