/**
 * Hostile variants of the early Lease takeover (a standby takes the Lease before it expires when
 * the holder's pod, named by `holderPodAnnotation`, is gone), against the faithful fake API server.
 *
 * Invariants attacked here:
 * 1. A standby takes the Lease early only when the annotated holder pod is truly gone: a 404 for
 *    it, or a pod of the same name with another uid.
 * 2. Never while the holder's pod lives.
 * 3. A Lease without the annotation, with a malformed one, or one naming a pod elsewhere (another
 *    namespace, a path that is no pod name) is handled conservatively: the standby waits for the
 *    lease duration, does not crash, and then takes the expired Lease.
 * 4. An apiserver that errors on the pod lookup (403, 429, 500, 503, 504) never causes a takeover.
 * 5. The annotation counts only for the holder that wrote it (identity: its pod name, or the name,
 *    `_` and a suffix): a dead pod's name left on the Lease by an elector that does not write it
 *    (an older manager) never lets a standby take the Lease from the living holder.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { keepAliveClock, silentLogger } from "@cluster-proxy/kit";
import { KubeResources, type KubeApi, type KubeObject } from "./kube-api.js";
import { LeaderElector } from "./leader-election.js";
import { FakeApiServer } from "./testing/fake-api-server.js";

const ANNOTATION = "example.com/leader-pod";
const NS = "open-cluster-management-addon";
const LEASE_MS = 15_000;

let server: FakeApiServer;
let api: KubeApi;
let leases = 0;

before(async () => {
  server = await FakeApiServer.start();
  api = server.api();
  // As on a real hub: the namespace exists (a pod GET whose path climbs out lands on it).
  server.put(KubeResources.namespace, { metadata: { name: NS } });
  server.put(KubeResources.namespace, { metadata: { name: "other-ns" } });
});
after(() => server.close());

function podUid(name: string, namespace = NS): string {
  const pod = server.put<KubeObject>(KubeResources.pod, { metadata: { name, namespace } });
  return pod.metadata.uid!;
}

/**
 * A fresh Lease held by `holder` (whose pod lives and is named on the Lease), a standby with its
 * own pod, one clock for both.
 */
async function held() {
  const lease = `leader-attack-${++leases}`;
  let clock = 1_000_000;
  const now = (): number => clock;
  const elector = (identity: string, pod: { name: string; uid: string } | undefined, annotation = true) =>
    new LeaderElector(
      api,
      {
        namespace: NS,
        name: lease,
        identity,
        ...(pod ? { pod } : {}),
        ...(annotation ? { holderPodAnnotation: ANNOTATION } : {}),
        leaseDurationMs: LEASE_MS,
        renewDeadlineMs: 10_000,
        retryPeriodMs: 2_000,
        clock: { ...keepAliveClock, now },
      },
      silentLogger,
    );
  const holderPod = { name: `holder-${leases}`, uid: podUid(`holder-${leases}`) };
  const standbyPod = { name: `standby-${leases}`, uid: podUid(`standby-${leases}`) };
  // Identities as defaultIdentity makes them: the pod name, `_`, a suffix.
  const holderId = `${holderPod.name}_a1b2`;
  const standbyId = `${standbyPod.name}_c3d4`;
  const holder = elector(holderId, holderPod);
  assert.equal(await holder.tryAcquireOrRenew(), true);
  const get = () => api.get<KubeObject & { spec?: { holderIdentity?: string } }>(KubeResources.lease, lease, NS);
  assert.equal((await get()).metadata.annotations?.[ANNOTATION], `${holderPod.name}/${holderPod.uid}`);
  return {
    lease,
    holderPod,
    elector,
    holderId,
    standbyId,
    standby: (annotation = true) => elector(standbyId, standbyPod, annotation),
    holderName: async () => (await get()).spec?.holderIdentity,
    /** Rewrite the holder's annotation (undefined: remove it), as a hand or another writer could. */
    annotate: async (value: string | undefined) => {
      const obj = await get();
      const annotations = { ...obj.metadata.annotations };
      if (value === undefined) delete annotations[ANNOTATION];
      else annotations[ANNOTATION] = value;
      server.put(KubeResources.lease, { ...obj, metadata: { ...obj.metadata, annotations } });
    },
    tick: (ms: number) => (clock += ms),
  };
}

type Setup = Awaited<ReturnType<typeof held>>;

/** The standby must wait: no takeover before the lease duration, no throw, then the expired Lease is its. */
async function waitsForExpiry(s: Setup, standby: LeaderElector): Promise<void> {
  assert.equal(await standby.tryAcquireOrRenew(), false, "taken at once");
  s.tick(LEASE_MS - 1_000);
  assert.equal(await standby.tryAcquireOrRenew(), false, "taken before the lease expired");
  assert.equal(await s.holderName(), s.holderId);
  s.tick(1_001);
  assert.equal(await standby.tryAcquireOrRenew(), true, "not taken once expired");
  assert.equal(await s.holderName(), s.standbyId);
}

describe("early Lease takeover: taken only when the holder's pod is truly gone", () => {
  const gone: [string, (s: Setup) => void][] = [
    ["the holder's pod deleted (404)", (s) => void server.remove(KubeResources.pod, s.holderPod.name, NS)],
    [
      "a pod of the holder's name with another uid (recreated by its StatefulSet)",
      (s) => {
        server.remove(KubeResources.pod, s.holderPod.name, NS);
        podUid(s.holderPod.name);
      },
    ],
  ];
  for (const [what, change] of gone)
    test(`taken at once: ${what}`, async () => {
      const s = await held();
      change(s);
      assert.equal(await s.standby().tryAcquireOrRenew(), true);
      assert.equal(await s.holderName(), s.standbyId);
    });

  test("not taken while the holder's pod lives (renewed or not, many attempts)", async () => {
    const s = await held();
    const standby = s.standby();
    for (let i = 0; i < 5; i++) {
      assert.equal(await standby.tryAcquireOrRenew(), false);
      s.tick(2_000);
    }
    assert.equal(await s.holderName(), s.holderId);
  });
});

describe("early Lease takeover: a Lease that names its pod oddly is waited for", () => {
  /** Annotation values; `%h`/`%u` are the holder's (living) pod name and uid. */
  const values: [string, string | undefined][] = [
    ["no annotation", undefined],
    ["an empty annotation", ""],
    ["only a slash", "/"],
    ["a name without uid", "%h"],
    ["a name and a slash", "%h/"],
    ["a uid without name", "/%u"],
    ["namespace/name/uid (a pod in another namespace)", "other-ns/%h/%u"],
    ["name/uid/more", "%h/%u/more"],
    ["a name that climbs out of pods (../uid)", "../%u"],
    ["a name that is the current segment (./uid)", "./%u"],
    ["a percent-encoded dot-dot (%2e%2e/uid)", "%2e%2e/%u"],
    ["an upper-case name (no pod can have it)", "HOLDER/%u"],
    ["a name with a query (?)", "x?watch=1/%u"],
    ["a name with spaces", " %h /%u"],
    ["a name longer than a pod name may be", `${"a".repeat(254)}/%u`],
    ["a name with a control character", "a\u0000b/%u"],
  ];
  for (const [what, value] of values)
    test(`${what}: no takeover before expiry, no crash`, async () => {
      const s = await held();
      await s.annotate(value?.replaceAll("%h", s.holderPod.name).replaceAll("%u", s.holderPod.uid));
      await waitsForExpiry(s, s.standby());
    });

  test("a standby without the option never looks at pods, even when the holder's is gone", async () => {
    const s = await held();
    server.remove(KubeResources.pod, s.holderPod.name, NS);
    const before = server.requests.filter((r) => r.path.includes("/pods/")).length;
    await waitsForExpiry(s, s.standby(false));
    assert.equal(server.requests.filter((r) => r.path.includes("/pods/")).length, before);
  });
});

describe("early Lease takeover: a pod lookup that errors never counts as gone", () => {
  const statuses: [number, string][] = [
    [403, "Forbidden"],
    [401, "Unauthorized"],
    [429, "TooManyRequests"],
    [500, "InternalError"],
    [503, "ServiceUnavailable"],
    [504, "Timeout"],
    [410, "Gone"],
  ];
  for (const [code, reason] of statuses)
    test(`${code} ${reason} on the holder's pod (which is in fact deleted): waits for expiry`, async () => {
      const s = await held();
      // Even with the pod really deleted, an error is no evidence: only a 404 is.
      server.remove(KubeResources.pod, s.holderPod.name, NS);
      const standby = s.standby();
      const podGet = (r: { method: string; path: string }): boolean =>
        r.method === "GET" && r.path.endsWith(`/pods/${s.holderPod.name}`);
      // Only this test's holder pod matches (its name is this test's own).
      server.failNext(1_000, { code, reason, message: "injected" }, podGet);
      await waitsForExpiry(s, standby);
    });
});

describe("early Lease takeover: an annotation that is not the holder's", () => {
  test("a holder without the option (an older manager, after a rollback) keeps a dead pod's name on the Lease: a standby does not take it from that living holder", async () => {
    const s = await held();
    server.remove(KubeResources.pod, s.holderPod.name, NS);
    // An elector without the option sees the Lease, then takes it once expired: the dead pod's name stays on it.
    const older = s.elector("older-pod_e5f6", undefined, false);
    assert.equal(await older.tryAcquireOrRenew(), false);
    s.tick(LEASE_MS + 1);
    assert.equal(await older.tryAcquireOrRenew(), true);
    const lease = await api.get(KubeResources.lease, s.lease, NS);
    assert.equal(lease.metadata.annotations?.[ANNOTATION], `${s.holderPod.name}/${s.holderPod.uid}`);
    await waitsForExpiry({ ...s, holderId: "older-pod_e5f6" }, s.standby());
  });

  for (const [what, identity] of [
    ["an identity unrelated to the pod", "some-manager"],
    ["the pod name as a prefix without `_`", "%hx"],
    ["another pod whose name starts alike", "%h-2_a1b2"],
  ] as const)
    test(`a holder of ${what} is not taken over by the annotated pod's death`, async () => {
      const s = await held();
      const id = identity.replace("%h", s.holderPod.name);
      const lease = await api.get<KubeObject & { spec?: Record<string, unknown> }>(KubeResources.lease, s.lease, NS);
      server.put(KubeResources.lease, { ...lease, spec: { ...lease.spec, holderIdentity: id } });
      server.remove(KubeResources.pod, s.holderPod.name, NS);
      await waitsForExpiry({ ...s, holderId: id }, s.standby());
    });
});
