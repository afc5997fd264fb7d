import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { keepAliveClock, silentLogger } from "@cluster-proxy/kit";
import { KubeApiError, type KubeObject, type ResourceRef } from "./kube-api.js";
import { LeaderElector, type LeaseApi } from "./leader-election.js";

/** The annotation these tests give the electors for the holder's pod. */
const HOLDER_POD_ANNOTATION = "example.com/leader-pod";

const NS = "open-cluster-management-addon";
const NAME = "cluster-proxy-addon-manager";

/** The answer of a pod GET: the pod's uid, or the error the apiserver (or the wire) gives. */
type PodAnswer = string | KubeApiError;
const notFound = new KubeApiError(404, "NotFound", 'pods "x" not found');
const forbidden = new KubeApiError(403, "Forbidden", 'pods "x" is forbidden');
const timeout = new KubeApiError(0, "Timeout", "GET pods/x: no answer within 30 s");

/** A Lease store with resourceVersions, and pods that answer as told; records the pod GETs. */
function fakeApi(pods: Record<string, PodAnswer>) {
  let lease: KubeObject | undefined;
  let rv = 0;
  const podGets: string[] = [];
  const copy = <T>(o: KubeObject): T => structuredClone(o) as unknown as T;
  const api: LeaseApi = {
    get<T extends KubeObject>(ref: ResourceRef, name: string): Promise<T> {
      if (ref.kind === "Pod") {
        podGets.push(name);
        const answer = pods[name] ?? notFound;
        return typeof answer === "string"
          ? Promise.resolve(copy<T>({ metadata: { name, namespace: NS, uid: answer } }))
          : Promise.reject(answer);
      }
      return lease ? Promise.resolve(copy<T>(lease)) : Promise.reject(notFound);
    },
    tryGet<T extends KubeObject>(): Promise<T | undefined> {
      return Promise.resolve(lease ? copy<T>(lease) : undefined);
    },
    create<T extends KubeObject>(_ref: ResourceRef, obj: KubeObject): Promise<T> {
      if (lease) return Promise.reject(new KubeApiError(409, "AlreadyExists", "exists"));
      lease = {
        ...structuredClone(obj),
        metadata: { ...structuredClone(obj.metadata), resourceVersion: String(++rv) },
      };
      return Promise.resolve(copy<T>(lease));
    },
    replace<T extends KubeObject>(_ref: ResourceRef, obj: KubeObject): Promise<T> {
      if (!lease || obj.metadata.resourceVersion !== lease.metadata.resourceVersion)
        return Promise.reject(new KubeApiError(409, "Conflict", "modified"));
      lease = {
        ...structuredClone(obj),
        metadata: { ...structuredClone(obj.metadata), resourceVersion: String(++rv) },
      };
      return Promise.resolve(copy<T>(lease));
    },
  };
  const spec = (): Record<string, unknown> => (lease?.spec ?? {}) as Record<string, unknown>;
  return { api, podGets, spec, holder: () => spec().holderIdentity, lease: () => lease };
}

const elector = (
  api: LeaseApi,
  identity: string,
  pod: { name: string; uid: string } | undefined,
  now: () => number,
  /** null: none (the elector then never names or looks up pods). */
  holderPodAnnotation: string | null = HOLDER_POD_ANNOTATION,
) =>
  new LeaderElector(
    api,
    {
      namespace: NS,
      name: NAME,
      identity,
      pod,
      ...(holderPodAnnotation === null ? {} : { holderPodAnnotation }),
      leaseDurationMs: 15_000,
      renewDeadlineMs: 10_000,
      retryPeriodMs: 2_000,
      clock: { ...keepAliveClock, now },
    },
    silentLogger,
  );

/** A Lease held by manager-old (its pod uid-old named on it), then `pods` answering for the candidate. */
async function heldByOldPod(pods: Record<string, PodAnswer>) {
  let clock = 1_000_000;
  const now = () => clock;
  const fake = fakeApi({ "manager-old": "uid-old", "manager-new": "uid-new" });
  const old = elector(fake.api, "manager-old", { name: "manager-old", uid: "uid-old" }, now);
  assert.equal(await old.tryAcquireOrRenew(), true);
  assert.equal(fake.lease()?.metadata.annotations?.[HOLDER_POD_ANNOTATION], "manager-old/uid-old");
  // From here on the pods in `pods` answer as the case says.
  const candidate = elector(
    {
      ...fake.api,
      get<T extends KubeObject>(ref: ResourceRef, name: string, namespace?: string): Promise<T> {
        if (ref.kind === "Pod" && name in pods) {
          fake.podGets.push(name);
          const answer = pods[name]!;
          return typeof answer === "string"
            ? Promise.resolve({ metadata: { name, uid: answer } } as unknown as T)
            : Promise.reject(answer);
        }
        return fake.api.get<T>(ref, name, namespace);
      },
    },
    "manager-new",
    { name: "manager-new", uid: "uid-new" },
    now,
  );
  return { fake, old, candidate, tick: (ms: number) => (clock += ms) };
}

describe("LeaderElector: a Lease whose holder's pod is gone", () => {
  test("is taken at once when the apiserver answers 404 for the holder's pod", async () => {
    const { fake, candidate } = await heldByOldPod({ "manager-old": notFound });
    assert.equal(await candidate.tryAcquireOrRenew(), true);
    assert.equal(fake.holder(), "manager-new");
    assert.equal(fake.spec().leaseTransitions, 1);
    assert.equal(fake.lease()?.metadata.annotations?.[HOLDER_POD_ANNOTATION], "manager-new/uid-new");
    assert.deepEqual(
      fake.podGets.filter((p) => p === "manager-old"),
      ["manager-old", "manager-old"],
    ); // its own check, then the candidate's
  });

  test("is taken at once when a pod of another uid has the holder's pod name", async () => {
    const { fake, candidate } = await heldByOldPod({ "manager-old": "uid-other" });
    assert.equal(await candidate.tryAcquireOrRenew(), true);
    assert.equal(fake.holder(), "manager-new");
  });

  for (const [what, answer] of [
    ["the holder's pod exists", "uid-old"],
    ["403 (no right to read pods)", forbidden],
    ["a timeout", timeout],
    ["500", new KubeApiError(500, "InternalError", "etcd")],
  ] as const)
    test(`is not taken on ${what}: the candidate waits for the lease duration on its own clock`, async () => {
      const { fake, candidate, tick } = await heldByOldPod({ "manager-old": answer });
      assert.equal(await candidate.tryAcquireOrRenew(), false);
      tick(14_000);
      assert.equal(await candidate.tryAcquireOrRenew(), false);
      assert.equal(fake.holder(), "manager-old");
      tick(1_001);
      assert.equal(await candidate.tryAcquireOrRenew(), true, "taken once expired");
      assert.equal(fake.holder(), "manager-new");
    });

  test("a holder that did not see its own pod (not in a pod, another uid, 404) is not named: 404s never count", async () => {
    const now = () => 0;
    const cases: Record<string, PodAnswer>[] = [{}, { "manager-old": "uid-someone-else" }];
    for (const pods of cases) {
      const fake = fakeApi(pods);
      const old = elector(fake.api, "manager-old", { name: "manager-old", uid: "uid-old" }, now);
      assert.equal(await old.tryAcquireOrRenew(), true);
      assert.equal(fake.lease()?.metadata.annotations?.[HOLDER_POD_ANNOTATION], undefined);
      const candidate = elector(fake.api, "manager-new", { name: "manager-new", uid: "uid-new" }, now);
      assert.equal(await candidate.tryAcquireOrRenew(), false);
      assert.equal(fake.holder(), "manager-old");
    }
    // Without a configured pod: no pod GET at all, no name on the Lease.
    const fake = fakeApi({ "manager-old": "uid-old" });
    const old = elector(fake.api, "manager-old", undefined, now);
    assert.equal(await old.tryAcquireOrRenew(), true);
    assert.equal(fake.lease()?.metadata.annotations, undefined);
    assert.deepEqual(fake.podGets, []);
  });

  test("its own pod unreadable for now (403): the Lease names no pod until it is seen, then names it", async () => {
    let answer: PodAnswer = forbidden;
    const fake = fakeApi({});
    const api: LeaseApi = {
      ...fake.api,
      get<T extends KubeObject>(ref: ResourceRef, name: string, namespace?: string): Promise<T> {
        if (ref.kind !== "Pod") return fake.api.get<T>(ref, name, namespace);
        return typeof answer === "string"
          ? Promise.resolve({ metadata: { name, uid: answer } } as unknown as T)
          : Promise.reject(answer);
      },
    };
    const holder = elector(api, "manager-a", { name: "manager-a", uid: "uid-a" }, () => 0);
    assert.equal(await holder.tryAcquireOrRenew(), true);
    assert.equal(fake.lease()?.metadata.annotations?.[HOLDER_POD_ANNOTATION], undefined);
    answer = "uid-a";
    assert.equal(await holder.tryAcquireOrRenew(), true);
    assert.equal(fake.lease()?.metadata.annotations?.[HOLDER_POD_ANNOTATION], "manager-a/uid-a");
  });

  test("a released Lease names no pod any more, and is taken at once", async () => {
    const { fake, old, candidate } = await heldByOldPod({ "manager-old": "uid-old" });
    await old.release();
    assert.equal(fake.holder(), null);
    assert.equal(fake.lease()?.metadata.annotations, undefined);
    assert.equal(await candidate.tryAcquireOrRenew(), true);
    assert.equal(fake.lease()?.metadata.annotations?.[HOLDER_POD_ANNOTATION], "manager-new/uid-new");
  });
});

describe("LeaderElector without a holder-pod annotation", () => {
  test("names no pod on the Lease and takes it only once it expired, whatever the holder's pod", async () => {
    let clock = 1_000_000;
    const now = () => clock;
    const fake = fakeApi({ "manager-new": "uid-new" });
    const old = elector(fake.api, "manager-old", { name: "manager-old", uid: "uid-old" }, now, null);
    assert.equal(await old.tryAcquireOrRenew(), true);
    assert.equal(fake.lease()?.metadata.annotations, undefined);
    const candidate = elector(fake.api, "manager-new", { name: "manager-new", uid: "uid-new" }, now, null);
    assert.equal(await candidate.tryAcquireOrRenew(), false, "the holder's pod is never looked at");
    assert.deepEqual(fake.podGets, []);
    clock += 15_001;
    assert.equal(await candidate.tryAcquireOrRenew(), true);
    assert.equal(fake.holder(), "manager-new");
  });
});
