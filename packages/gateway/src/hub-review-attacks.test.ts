/**
 * Hostile hub answers against admission's one deadline for a request's hub calls: the real
 * {@link kubeHubApi} (@cluster-proxy/kube's client, over loopback HTTP) talks to the faithful fake
 * apiserver, whose answers a behaviour spoils (it stalls, answers late, answers 5xx, answers garbage
 * or closes mid-body) per token, per reviewed user or per cluster; {@link admit} runs with the gateway's Authenticator, Authorizer and ClusterDirectory.
 * The per-call timeout of kubeHubApi is set long here, so that only the request's deadline bounds
 * it (the unit tests on a mocked clock are in hub-deadline.test.ts).
 *
 * Invariants attacked here:
 * 1. A request is admitted only with exactly the identity checked: the Impersonate-* headers it
 *    carries on are the user, groups, uid and extra of its last cluster SubjectAccessReview.
 * 2. A hub call (TokenReview, SubjectAccessReview, ManagedCluster lookup) that stalls, answers after
 *    the deadline, answers garbage, answers 5xx or closes mid-body never admits the request: it
 *    fails closed with a GatewayError (503 for a hub that cannot answer), by the deadline (never a
 *    hang past it, never an exception of another kind).
 * 3. A caller cannot make the deadline longer by splitting its work over several reviews (many
 *    impersonated groups, the two verbs of an upgrade), nor make one caller's stalled review delay
 *    other callers: while an attacker's reviews stall, legitimate requests are answered.
 * 4. No cached verdict outlives what it was checked for: a grant is reused only for the very same
 *    identity and attributes, a denial or rejection for at most its short bound, a user for the TTL.
 * 5. A refused request leaves no connection to the hub behind: a flood of callers while the hub
 *    stalls does not pile up sockets (the hub call is aborted at the deadline, its request closed).
 */
import assert from "node:assert/strict";
import type * as http from "node:http";
import { isDeepStrictEqual } from "node:util";
import { after, before, describe, mock, test as nodeTest, type TestContext } from "node:test";
import { HubResources } from "@cluster-proxy/api";
import { errorMessage } from "@cluster-proxy/errors";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { FakeApiServer, type FakeRequest } from "@cluster-proxy/kube/testing";
import { admit, type AdmissionDeps, type AdmittedRequest } from "./admission.js";
import { Authenticator, NEGATIVE_CACHE_MAX_MS } from "./authentication.js";
import { Authorizer, DENIAL_CACHE_MAX_MS } from "./authorization.js";
import { ClusterDirectory } from "./cluster-directory.js";
import { ExposedServices } from "./exposed-services.js";
import { GatewayError } from "./gateway-error.js";
import type { HubApi, UserInfo } from "./hub-api.js";
import { HubDeadline } from "./hub-deadline.js";
import { kubeHubApi } from "./kube-hub.js";
import { RequestRecord } from "./request-record.js";
import { FakeHub } from "./testing/fake-hub.js";
import { TokenAudiences } from "./token-audiences.js";

/** A test that fails (not hangs) when admission never settles. */
function test(name: string, fn: (t: TestContext) => Promise<void>): void {
  nodeTest(name, { timeout: 20_000 }, fn);
}

/** The request deadline of these tests (short, so that every variant runs quickly). */
const DEADLINE_MS = 800;
/** How late past the deadline a refusal may come on a busy machine. */
const SLACK_MS = 1_500;
const PREFIX = "cluster:hub:";

/** How the hostile hub answers one call. */
type Behaviour =
  | { kind: "ok" }
  | { kind: "stall" }
  | { kind: "late"; ms: number }
  | { kind: "status"; code: number }
  | { kind: "raw"; body: string }
  | { kind: "json"; body: unknown }
  | { kind: "mid-body" }
  | { kind: "head-then-stall" }
  | { kind: "reset" };

const ok: Behaviour = { kind: "ok" };

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null;

/**
 * The hostile hub: the faithful fake apiserver, where every `token-<name>` is `<name>`'s (group
 * devs), every ManagedCluster exists and every SubjectAccessReview is allowed, whose answers a
 * behaviour spoils: by token (TokenReview), by reviewed user (SubjectAccessReview), by cluster.
 */
class HostileHub {
  readonly byToken = new Map<string, Behaviour>();
  readonly byUser = new Map<string, Behaviour>();
  readonly byCluster = new Map<string, Behaviour>();
  /** The SubjectAccessReviews answered "allowed" for managedclusters/proxy, in order. */
  readonly clusterGrants: UserInfo[] = [];

  private constructor(readonly fake: FakeApiServer) {
    fake.authenticate = (token) =>
      token.startsWith("token-") ? { user: { username: token.slice(6), groups: ["devs"] } } : undefined;
    fake.authorize = (spec) => {
      if (spec.resourceAttributes?.subresource === "proxy")
        this.clusterGrants.push({
          username: spec.user ?? "",
          groups: spec.groups ?? [],
          ...(spec.uid ? { uid: spec.uid } : {}),
          extra: spec.extra ?? {},
        });
      return true;
    };
    fake.intercept = (req, res, serve) => this.answer(req, res, serve);
  }

  static async start(): Promise<HostileHub> {
    return new HostileHub(await FakeApiServer.start([HubResources.managedCluster]));
  }

  close(): Promise<void> {
    return this.fake.close();
  }

  private answer(req: FakeRequest, res: http.ServerResponse, serve: () => void): void {
    const spec = isRecord(req.body) && isRecord(req.body.spec) ? req.body.spec : {};
    let behaviour: Behaviour = ok;
    if (req.path === "/apis/authentication.k8s.io/v1/tokenreviews")
      behaviour = this.byToken.get(String(spec.token)) ?? ok;
    else if (req.path === "/apis/authorization.k8s.io/v1/subjectaccessreviews")
      behaviour = this.byUser.get(String(spec.user)) ?? ok;
    else {
      const name = /^\/apis\/cluster\.open-cluster-management\.io\/v1\/managedclusters\/([^/]+)$/.exec(req.path)?.[1];
      if (name !== undefined) {
        behaviour = this.byCluster.get(name) ?? ok;
        if (!this.fake.object(HubResources.managedCluster, name))
          this.fake.put(HubResources.managedCluster, { metadata: { name, labels: {} } });
      }
    }
    const json = (status: number, body: unknown): void => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    switch (behaviour.kind) {
      case "ok":
        return serve();
      case "stall":
        return;
      case "late":
        setTimeout(serve, behaviour.ms);
        return;
      case "status":
        return json(behaviour.code, {
          kind: "Status",
          apiVersion: "v1",
          status: "Failure",
          message: "injected",
          code: behaviour.code,
        });
      case "raw":
        res.writeHead(201, { "content-type": "application/json" });
        res.end(behaviour.body);
        return;
      case "json":
        return json(201, behaviour.body);
      case "mid-body":
        res.writeHead(201, { "content-type": "application/json", "content-length": "400" });
        res.write('{"status":{"authenticated":true,"allowed":true,"user":{"user');
        setTimeout(() => res.socket?.destroy(), 20);
        return;
      case "head-then-stall":
        res.writeHead(201, { "content-type": "application/json", "content-length": "400" });
        res.write('{"status":');
        return;
      case "reset":
        res.socket?.destroy();
        return;
    }
  }
}

const audit = { write: () => undefined, close: () => undefined };

interface Outcome {
  admitted?: AdmittedRequest;
  error?: unknown;
  ms: number;
}

/** How an outcome reads in an assertion message. */
function outcomeOf(o: Outcome): string {
  return o.admitted ? "admitted" : errorMessage(o.error);
}

/** Admit a request; the outcome and how long it took. */
async function attempt(
  deps: AdmissionDeps,
  token: string,
  headers: Record<string, string | string[]> = {},
  url = "/mc1/api/v1/namespaces/default/pods",
  method = "GET",
): Promise<Outcome> {
  const started = performance.now();
  try {
    const admitted = await admit(
      deps,
      { method, url, headers: { authorization: `Bearer ${token}`, ...headers }, upgrade: false },
      new RequestRecord(method, audit, undefined),
    );
    return { admitted, ms: performance.now() - started };
  } catch (error) {
    return { error, ms: performance.now() - started };
  }
}

function depsOf(hub: HubApi, deadlineMs = DEADLINE_MS, reviewer: Pick<HubApi, "tokenReview"> = hub): AdmissionDeps {
  return {
    authenticator: new Authenticator({
      hub: reviewer,
      tokenReview: true,
      cacheTtlMs: 0,
      passthroughUnrecognizedTokens: false,
    }),
    authorizer: new Authorizer({ hub, cacheTtlMs: 0 }),
    clusters: new ClusterDirectory(hub),
    services: new ExposedServices(),
    impersonationPrefix: PREFIX,
    hubReviewTimeoutMs: deadlineMs,
  };
}

/**
 * Invariant 1: the identity an admitted request carries on (its Impersonate-* headers) is one a
 * cluster SubjectAccessReview answered since `since` checked, field by field.
 */
function assertCarriesChecked(admitted: AdmittedRequest, hub: HostileHub, since: number): void {
  const h = admitted.headers;
  const unprefixed = (v: string): string => {
    assert.ok(v.startsWith(PREFIX), `${v} lacks the prefix`);
    return v.slice(PREFIX.length);
  };
  const user = h["impersonate-user"];
  assert.equal(typeof user, "string", "no Impersonate-User");
  const groups = h["impersonate-group"] ?? [];
  const uid = h["impersonate-uid"];
  const carried: UserInfo = {
    username: unprefixed(String(user)),
    groups: (Array.isArray(groups) ? groups : [groups]).map(unprefixed),
    ...(typeof uid === "string" ? { uid } : {}),
    extra: admitted.identity?.extra ?? {},
  };
  const checked = hub.clusterGrants.slice(since);
  assert.ok(
    checked.some((c) => isDeepStrictEqual(c, carried)),
    `carried ${JSON.stringify(carried)}, checked ${JSON.stringify(checked)}`,
  );
}

/** Invariant 2: refused with a GatewayError (of `statuses`), by the deadline. */
function assertRefusedInTime(o: Outcome, statuses: readonly number[]): void {
  assert.equal(o.admitted, undefined, "admitted");
  assert.ok(o.error instanceof GatewayError, `not a GatewayError: ${String(o.error)}`);
  assert.ok(statuses.includes(o.error.status), `status ${o.error.status}: ${o.error.message}`);
  assert.ok(o.ms <= DEADLINE_MS + SLACK_MS, `refused after ${Math.round(o.ms)} ms`);
}

let hostile: HostileHub;
let hub: HubApi;
let variant = 0;

before(async () => {
  hostile = await HostileHub.start();
  // A per-call timeout far past the request's deadline: only the deadline bounds a request here.
  hub = kubeHubApi(hostile.fake.kubeConfig(), undefined, 60_000);
});
after(() => hostile.close());

/** Transport and status failures: each must be a 503 by the deadline. */
const failures: [string, Behaviour][] = [
  ["stalls (accepts, never answers)", { kind: "stall" }],
  ["answers after twice the deadline", { kind: "late", ms: DEADLINE_MS * 2 }],
  ["sends its head, then stalls mid-body", { kind: "head-then-stall" }],
  ["closes the connection mid-body", { kind: "mid-body" }],
  ["resets the connection before answering", { kind: "reset" }],
  ["answers 500", { kind: "status", code: 500 }],
  ["answers 502", { kind: "status", code: 502 }],
  ["answers 503", { kind: "status", code: 503 }],
  ["answers 504", { kind: "status", code: 504 }],
  ["answers 429", { kind: "status", code: 429 }],
  ["answers 401 (the gateway's own credential refused)", { kind: "status", code: 401 }],
  ["answers 403 (the gateway may not review)", { kind: "status", code: 403 }],
  ["answers a body that is not JSON", { kind: "raw", body: "<html>busy</html>" }],
  ["answers an empty body", { kind: "raw", body: "" }],
];

describe("hub calls that fail: the request is refused with 503 by its deadline", () => {
  for (const [what, behaviour] of failures) {
    test(`a TokenReview that ${what}`, async () => {
      const token = `token-v${++variant}`;
      hostile.byToken.set(token, behaviour);
      assertRefusedInTime(await attempt(depsOf(hub), token), [503]);
    });
    test(`a cluster SubjectAccessReview that ${what}`, async () => {
      const token = `token-v${++variant}`;
      hostile.byUser.set(token.slice(6), behaviour);
      assertRefusedInTime(await attempt(depsOf(hub), token), [503]);
    });
    test(`an impersonation SubjectAccessReview that ${what}`, async () => {
      const token = `token-v${++variant}`;
      hostile.byUser.set(token.slice(6), behaviour);
      assertRefusedInTime(await attempt(depsOf(hub), token, { "impersonate-user": "bob" }), [503]);
    });
    test(`a ManagedCluster lookup that ${what}`, async () => {
      const token = `token-v${++variant}`;
      const cluster = `mc-v${variant}`;
      hostile.byCluster.set(cluster, behaviour);
      assertRefusedInTime(await attempt(depsOf(hub), token, {}, `/${cluster}/api`), [503]);
    });
  }
});

/** Answers of the right status and shape but wrong content: never admitted. */
const garbageTokenReviews: [string, unknown][] = [
  [
    'authenticated "false" (a string) with a user',
    { status: { authenticated: "false", user: { username: "mallory" } } },
  ],
  ["authenticated 1 (a number) with a user", { status: { authenticated: 1, user: { username: "mallory" } } }],
  ['authenticated "true" (a string) with a user', { status: { authenticated: "true", user: { username: "mallory" } } }],
  ["authenticated false with a user", { status: { authenticated: false, user: { username: "mallory" } } }],
  ["authenticated true, a numeric username", { status: { authenticated: true, user: { username: 42 } } }],
  ["authenticated true, an object for username", { status: { authenticated: true, user: { username: { a: 1 } } } }],
  ["authenticated true, no user", { status: { authenticated: true } }],
  ["authenticated true, an empty username", { status: { authenticated: true, user: { username: "" } } }],
  ["no status", {}],
  ["a status that is a string", { status: "authenticated" }],
  ["null", null],
  ["an error with authenticated true", { status: { authenticated: true, error: "x", user: { username: "mallory" } } }],
];

/** Callers at once in {@link describe}'s flood. */
const FLOOD = 50;
/** How long after the last refusal the hub's connections may take to close. */
const CLOSE_BOUND_MS = 5_000;

describe("a flood of callers while the hub stalls leaves no connection to the hub behind", () => {
  /** The gateway's TokenReviews: through the audiences it asks for (`token-audiences.ts`). */
  const audiences = (): Pick<HubApi, "tokenReview"> =>
    new TokenAudiences(hub, { tokenAudiences: ["cluster-proxy"], acceptHubApiAudience: true, hubApiAudiences: [] })
      .reviewer;
  const stalls: [string, (token: string) => void, (() => Pick<HubApi, "tokenReview">)?][] = [
    ["TokenReview", (token) => hostile.byToken.set(token, { kind: "stall" })],
    [
      "TokenReview (asked as the gateway asks: for its audiences)",
      (token) => hostile.byToken.set(token, { kind: "stall" }),
      audiences,
    ],
    ["cluster SubjectAccessReview", (token) => hostile.byUser.set(token.slice(6), { kind: "stall" })],
    ["ManagedCluster lookup", (token) => hostile.byCluster.set(`mc-${token}`, { kind: "head-then-stall" })],
  ];
  for (const [what, stall, reviewer] of stalls)
    test(`${FLOOD} callers whose ${what} stalls: each refused by the deadline, every socket closed`, async () => {
      const tokens = Array.from({ length: FLOOD }, () => `token-v${++variant}`);
      tokens.forEach(stall);
      const baseline = hostile.fake.openConnections();
      hostile.fake.resetPeakConnections();
      const outcomes = await Promise.all(
        tokens.map((token) => attempt(depsOf(hub, DEADLINE_MS, reviewer?.()), token, {}, `/mc-${token}/api`)),
      );
      for (const o of outcomes) assertRefusedInTime(o, [503]);
      const peak = hostile.fake.peakConnections;
      assert.ok(peak >= baseline + FLOOD / 2, `the hub saw only ${peak - baseline} new connections`);
      await hostile.fake.connectionsAtMost(baseline, CLOSE_BOUND_MS);
    });
});

describe("TokenReview answers that are garbage: never admitted as anyone the hub did not vouch for", () => {
  for (const [what, body] of garbageTokenReviews)
    test(what, async () => {
      const token = `token-v${++variant}`;
      hostile.byToken.set(token, { kind: "json", body });
      const since = hostile.clusterGrants.length;
      const o = await attempt(depsOf(hub), token);
      if (what.startsWith("an error with authenticated true")) {
        // The apiserver sets `error` only beside authenticated false; a user it vouched for is still a user.
        if (o.admitted) assertCarriesChecked(o.admitted, hostile, since);
        return;
      }
      assertRefusedInTime(o, [401, 503]);
    });
});

const garbageAccessReviews: [string, unknown][] = [
  ['allowed "true" (a string)', { status: { allowed: "true" } }],
  ["allowed 1", { status: { allowed: 1 } }],
  ["no status", {}],
  ["allowed absent, reason given", { status: { reason: "allowed" } }],
  ["null", null],
];

describe("SubjectAccessReview answers that are garbage: never admitted", () => {
  for (const [what, body] of garbageAccessReviews)
    test(what, async () => {
      const token = `token-v${++variant}`;
      hostile.byUser.set(token.slice(6), { kind: "json", body });
      assertRefusedInTime(await attempt(depsOf(hub), token), [403, 503]);
    });
});

describe("a caller cannot lengthen the deadline by splitting its work", () => {
  const splits: [string, Record<string, string | string[]>, string][] = [
    [
      "twelve impersonated groups",
      { "impersonate-user": "bob", "impersonate-group": [...Array(12).keys()].map((i) => `g${i}`) },
      "GET",
    ],
    [
      "twelve impersonated extras in one header",
      { "impersonate-user": "bob", "impersonate-extra-scopes": [...Array(12).keys()].join(",") },
      "GET",
    ],
    [
      "a user, a uid and extras and groups",
      {
        "impersonate-user": "bob",
        "impersonate-uid": "u1",
        "impersonate-group": ["a", "b", "c"],
        "impersonate-extra-k": "1,2,3,4",
      },
      "GET",
    ],
    [
      "the two verbs of an upgrading DELETE, after impersonation",
      { "impersonate-user": "bob", "impersonate-group": ["a", "b"], upgrade: "websocket", connection: "Upgrade" },
      "DELETE",
    ],
  ];
  for (const [what, headers, method] of splits)
    test(`${what}, each review 40% of the deadline: refused by the deadline`, async () => {
      const token = `token-v${++variant}`;
      hostile.byUser.set(token.slice(6), { kind: "late", ms: DEADLINE_MS * 0.4 });
      const o = await attempt(depsOf(hub), token, headers, "/mc1/api/v1/namespaces/default/pods", method);
      assertRefusedInTime(o, [503]);
      assert.match((o.error as Error).message, /did not answer the SubjectAccessReview within 800 ms/);
    });

  test("a TokenReview and a SubjectAccessReview each 60% of the deadline: refused by the deadline", async () => {
    const token = `token-v${++variant}`;
    hostile.byToken.set(token, { kind: "late", ms: DEADLINE_MS * 0.6 });
    hostile.byUser.set(token.slice(6), { kind: "late", ms: DEADLINE_MS * 0.6 });
    assertRefusedInTime(await attempt(depsOf(hub), token), [503]);
  });

  test("legitimate: the same splits, each review fast, are admitted with the identity checked", async () => {
    for (const [, headers, method] of splits) {
      const since = hostile.clusterGrants.length;
      const o = await attempt(
        depsOf(hub, 10_000),
        "token-alice",
        headers,
        "/mc1/api/v1/namespaces/default/pods",
        method,
      );
      assert.ok(o.admitted, String(o.error));
      assertCarriesChecked(o.admitted, hostile, since);
    }
  });
});

describe("a stalled caller does not delay the others", () => {
  test("while 30 requests wait on stalled TokenReviews, SubjectAccessReviews and lookups, others are admitted", async () => {
    // A long deadline for the attackers: they are still pending when the legitimate requests end.
    const deps = depsOf(hub, 30_000);
    const attackers: Promise<Outcome>[] = [];
    for (let i = 0; i < 10; i++) {
      const token = `token-stall-t${i}`;
      hostile.byToken.set(token, { kind: "stall" });
      attackers.push(attempt(deps, token));
      hostile.byUser.set(`stall-u${i}`, { kind: "stall" });
      attackers.push(attempt(deps, `token-stall-u${i}`, { "impersonate-user": "bob" }));
      hostile.byCluster.set(`mc-stall-${i}`, { kind: "stall" });
      attackers.push(attempt(deps, `token-stall-c${i}`, {}, `/mc-stall-${i}/api`));
    }
    let attackersDone = false;
    const attacked = Promise.all(attackers).then((r) => ((attackersDone = true), r));
    for (let i = 0; i < 10; i++) {
      const since = hostile.clusterGrants.length;
      const o = await attempt(deps, `token-legit${i}`, { "impersonate-user": "bob", "impersonate-group": "team" });
      assert.ok(o.admitted, String(o.error));
      assertCarriesChecked(o.admitted, hostile, since);
      assert.ok(o.ms < 5_000, `a legitimate request took ${Math.round(o.ms)} ms`);
    }
    assert.equal(attackersDone, false, "the attackers were not pending meanwhile");
    // The same token stalled again: the second request shares the review, and waits no longer.
    const again = await attempt(depsOf(hub), "token-stall-t0");
    assertRefusedInTime(again, [503]);
    await hostile.close(); // ends the stalls: every attacker is refused, none admitted
    for (const o of await attacked) assert.equal(o.admitted, undefined);
  });
});

describe("no cached verdict outlives what it was checked for", () => {
  const ALICE: UserInfo = { username: "alice", groups: ["devs"], extra: {} };
  const TTL = 60_000;

  function cached() {
    const clock = new ManualClock();
    const fake = new FakeHub();
    fake.tokens.set("alice-token", ALICE);
    fake.clusters.set("mc1", { name: "mc1", labels: {} });
    fake.clusters.set("mc2", { name: "mc2", labels: {} });
    const deps: AdmissionDeps = {
      authenticator: new Authenticator({
        hub: fake,
        tokenReview: true,
        cacheTtlMs: TTL,
        passthroughUnrecognizedTokens: false,
        clock,
      }),
      authorizer: new Authorizer({ hub: fake, cacheTtlMs: TTL, clock }),
      clusters: new ClusterDirectory(fake, undefined, clock),
      services: new ExposedServices(),
      impersonationPrefix: PREFIX,
    };
    return { fake, deps, tick: (ms: number) => clock.advance(ms) };
  }

  test("a grant is reused only for the same identity and attributes", async () => {
    const { fake, deps } = cached();
    fake.grantProxy("alice", "mc1", "get");
    fake.grant("alice", { group: "", resource: "users", name: "bob", verb: "impersonate" });
    fake.grantProxy("bob", "mc1", "get");
    assert.ok((await attempt(deps, "alice-token")).admitted);
    const variants: [string, Record<string, string | string[]>, string, string][] = [
      ["another cluster", {}, "/mc2/api", "GET"],
      ["another verb", {}, "/mc1/api", "DELETE"],
      ["an upgrade (create)", { upgrade: "websocket", connection: "Upgrade" }, "/mc1/api", "GET"],
      [
        "impersonating bob with a group",
        { "impersonate-user": "bob", "impersonate-group": "admins" },
        "/mc1/api",
        "GET",
      ],
      ["impersonating bob with a uid", { "impersonate-user": "bob", "impersonate-uid": "u9" }, "/mc1/api", "GET"],
      [
        "impersonating bob with an extra",
        { "impersonate-user": "bob", "impersonate-extra-scopes": "all" },
        "/mc1/api",
        "GET",
      ],
      ["impersonating carol", { "impersonate-user": "carol" }, "/mc1/api", "GET"],
    ];
    for (const [what, headers, url, method] of variants) {
      const o = await attempt(deps, "alice-token", headers, url, method);
      assert.ok(o.error instanceof GatewayError && o.error.status === 403, `${what}: ${outcomeOf(o)}`);
    }
    // And the cached grant still serves exactly what it was checked for.
    const before = fake.accessReviews.length;
    assert.ok((await attempt(deps, "alice-token")).admitted);
    assert.equal(fake.accessReviews.length, before, "the same request was reviewed again");
  });

  test("a grant checked for an identity with a group is not reused for the same user without it", async () => {
    const { fake, deps } = cached();
    fake.grant("alice", { group: "", resource: "users", name: "bob", verb: "impersonate" });
    fake.grant("alice", { group: "", resource: "groups", name: "ops", verb: "impersonate" });
    fake.grantProxy("group:ops", "mc1", "get"); // bob may reach mc1 only as a member of ops
    const asOps = await attempt(deps, "alice-token", { "impersonate-user": "bob", "impersonate-group": "ops" });
    assert.ok(asOps.admitted, String(asOps.error));
    assert.deepEqual(asOps.admitted.headers["impersonate-group"], [`${PREFIX}ops`, `${PREFIX}system:authenticated`]);
    const alone = await attempt(deps, "alice-token", { "impersonate-user": "bob" });
    assert.ok(alone.error instanceof GatewayError && alone.error.status === 403, outcomeOf(alone));
  });

  test("a user is kept for the TTL only; a rejection and a denial for their short bounds only", async () => {
    const { fake, deps, tick } = cached();
    fake.grantProxy("alice", "mc1", "get");
    assert.ok((await attempt(deps, "alice-token")).admitted);
    fake.tokens.delete("alice-token"); // revoked
    tick(TTL - 1);
    assert.ok((await attempt(deps, "alice-token")).admitted, "within the TTL the cached user serves");
    tick(2);
    const revoked = await attempt(deps, "alice-token");
    assert.ok(revoked.error instanceof GatewayError && revoked.error.status === 401, "the user outlived the TTL");

    // A rejection: refused, then valid: seen within NEGATIVE_CACHE_MAX_MS although the TTL is long.
    tick(1);
    fake.tokens.set("alice-token", ALICE);
    tick(NEGATIVE_CACHE_MAX_MS + 1);
    assert.ok((await attempt(deps, "alice-token")).admitted, "the rejection outlived its bound");

    // A denial: denied, then granted: seen within DENIAL_CACHE_MAX_MS.
    const denied = await attempt(deps, "alice-token", {}, "/mc2/api");
    assert.ok(denied.error instanceof GatewayError && denied.error.status === 403);
    fake.grantProxy("alice", "mc2", "get");
    tick(DENIAL_CACHE_MAX_MS + 1);
    assert.ok((await attempt(deps, "alice-token", {}, "/mc2/api")).admitted, "the denial outlived its bound");
  });
});

describe("the deadline does not follow the wall clock", () => {
  /** Date is mocked (set as each case says) while timers run on their real, monotonic clock. */
  const steps: [string, number][] = [
    ["steps back an hour (NTP, a VM resumed)", -3_600_000],
    ["steps back a second", -1_000],
    ["stands still", 0],
    ["steps forward an hour", 3_600_000],
  ];
  for (const [what, stepMs] of steps)
    test(`the wall clock ${what} between two reviews: the second still ends at the deadline`, async () => {
      mock.timers.reset(); // a case that failed before may have left it on
      mock.timers.enable({ apis: ["Date"], now: 10_000_000 });
      try {
        const started = performance.now();
        const deadline = new HubDeadline(1_000);
        const first = deadline.race(
          new Promise<string>((resolve) => setTimeout(() => resolve("first"), 600)),
          "TokenReview",
        );
        assert.equal(await first, "first");
        mock.timers.setTime(10_000_000 + stepMs);
        const second = await Promise.race([
          deadline.race(new Promise<never>(() => undefined), "SubjectAccessReview").then(
            () => "answered",
            (err: unknown) => err,
          ),
          new Promise<string>((resolve) => setTimeout(() => resolve("still pending after 3 s"), 3_000).unref()),
        ]);
        const took = performance.now() - started;
        assert.ok(second instanceof Error, String(second));
        assert.match(second.message, /did not answer the SubjectAccessReview within 1000 ms/);
        // 1 s from the start, not 1 s from the second review (1.6 s) nor an hour on.
        assert.ok(took < 1_400, `ended after ${Math.round(took)} ms`);
      } finally {
        mock.timers.reset();
      }
    });
});
