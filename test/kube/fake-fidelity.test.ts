/**
 * The faithful fake (packages/kube/src/testing/fake-api-server.ts) against a real
 * kube-apiserver (with etcd, from scripts/k8s-binaries.mjs, on loopback): the same operations through
 * the same client (KubeApi) give the same answers (status codes, reasons, messages, resourceVersion
 * order, conditional writes, label selectors, watch events, bookmarks and 410 Expired), and the same
 * TokenReviews, SubjectAccessReviews and TokenRequests (the fake's token table knowing the real one's
 * static token, its authorizer granting system:masters as the real one's does).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { KubeConfig } from "@kubernetes/client-node";
import { KubeApi, KubeApiError, KubeResources, type KubeObject, type WatchEvent } from "@cluster-proxy/kube";
import { FakeApiServer } from "@cluster-proxy/kube/testing";
import { Harness, freePort } from "../framework/harness.js";
import { failIfMissing, prerequisiteSkip } from "../framework/prerequisites.js";
import { REPO } from "../framework/repo.js";
import { waitFor } from "../framework/waits.js";

const { secret, certificateSigningRequest: csr } = KubeResources;

const prerequisites = prerequisiteSkip(
  ["linux"].includes(process.platform) ? undefined : "needs Linux (etcd and kube-apiserver binaries)",
);

/** How a backend lets a test reach into it: a resourceVersion its watches no longer serve. */
interface Backend {
  api: KubeApi;
  /** A resourceVersion of ServiceAccounts too old to watch from. */
  tooOld(): Promise<string>;
  /** Whether a watch's bookmark may fail to come (true of the real apiserver under load). */
  bookmarkBestEffort?: boolean;
}

/** What a failed call says, as the client sees it. */
async function outcome(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return "ok";
  } catch (err) {
    if (!(err instanceof KubeApiError)) throw err;
    // The message names the request path of each backend: keep what the apiserver said, without
    // the uids and resourceVersions that differ between the two.
    const said = err.message
      .replace(/^.*?: \d+ \w+: /, "")
      .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, "<uid>")
      .replace(/\(\d+\)/g, "(<rv>)");
    return `${err.status} ${err.reason}: ${said}`;
  }
}

const rvOf = (o: KubeObject): number => Number(o.metadata.resourceVersion);

/** Collect a watch's events until `until` says enough (or the server ends it); bounded. */
async function watchEvents(
  api: KubeApi,
  options: { namespace?: string; labelSelector?: string; resourceVersion: string; timeoutSeconds?: number },
  until: (events: WatchEvent[]) => boolean,
  act: () => Promise<void> = () => Promise.resolve(),
  ref: typeof secret | typeof KubeResources.serviceAccount = secret,
): Promise<{ events: WatchEvent[]; error?: string }> {
  const events: WatchEvent[] = [];
  const stop = new AbortController();
  const bound = setTimeout(() => stop.abort(), 30_000);
  let error: string | undefined;
  const watching = api
    .watch(
      ref,
      options,
      (e) => {
        events.push(e);
        if (until(events)) stop.abort();
      },
      stop.signal,
    )
    .catch((err: unknown) => {
      if (err instanceof KubeApiError) error = `${err.status} ${err.reason}`;
      else throw err;
    });
  await act();
  await watching;
  clearTimeout(bound);
  return { events, ...(error ? { error } : {}) };
}

/** The operations; returns what was observed, normalised so that two apiservers can be compared. */
async function scenario(b: Backend): Promise<Record<string, unknown>> {
  const { api } = b;
  const seen: Record<string, unknown> = {};
  const ns = "fidelity";
  // (The real apiserver needs the namespace; the fake does not check namespaces.)
  await api.create(KubeResources.namespace, { metadata: { name: ns } }).catch(() => undefined);
  const s1 = { metadata: { name: "s1", namespace: ns, labels: { app: "a", tier: "x" } }, data: { k: "djE=" } };
  const created = await api.create(secret, s1);
  seen.createdKind = `${created.apiVersion}/${created.kind}`;
  seen.createdHasUid = typeof created.metadata.uid === "string";
  seen.createdGeneration = created.metadata.generation;
  seen.createAgain = await outcome(api.create(secret, s1));
  seen.getMissing = await outcome(api.get(secret, "nope", ns));
  seen.getMissingCsr = await outcome(api.get(csr, "nope"));
  seen.tryGetMissing = await api.tryGet(secret, "nope", ns);

  // Updates: a new, higher resourceVersion each; a stale one is a 409 Conflict.
  const replaced = await api.replace(secret, { ...created, data: { k: "djI=" } });
  seen.replaceRaisesRv = rvOf(replaced) > rvOf(created);
  seen.replaceStale = await outcome(api.replace(secret, { ...created, data: { k: "djM=" } }));
  seen.replaceOtherUid = await outcome(
    api.replace(secret, {
      ...replaced,
      metadata: { ...replaced.metadata, uid: "00000000-0000-0000-0000-000000000000" },
    }),
  );
  seen.replaceMissing = await outcome(
    api.replace(secret, {
      metadata: { name: "nope", namespace: ns, resourceVersion: replaced.metadata.resourceVersion },
    }),
  );
  const patched = await api.mergePatch(secret, "s1", ns, { metadata: { labels: { tier: null, extra: "y" } } });
  seen.patchLabels = patched.metadata.labels;
  seen.patchRaisesRv = rvOf(patched) > rvOf(replaced);
  seen.patchStale = await outcome(
    api.mergePatch(secret, "s1", ns, { metadata: { resourceVersion: replaced.metadata.resourceVersion }, data: {} }),
  );
  seen.patchOtherUid = await outcome(
    api.mergePatch(secret, "s1", ns, { metadata: { uid: "00000000-0000-0000-0000-000000000000" } }),
  );
  seen.patchMissing = await outcome(api.mergePatch(secret, "nope", ns, { metadata: { labels: { a: "b" } } }));
  const applied = await api.apply(secret, { metadata: { name: "s2", namespace: ns, labels: { app: "b" } }, data: {} });
  seen.applyCreates = applied.metadata.name;
  const reapplied = await api.apply(secret, {
    metadata: { name: "s2", namespace: ns, labels: { app: "b" } },
    data: { z: "eg==" },
  });
  seen.applyUpdates = reapplied.data;

  // Lists: the list's resourceVersion is at least every item's; label selectors.
  const all = await api.list(secret, { namespace: ns });
  seen.listNames = all.items.map((o) => o.metadata.name).sort();
  seen.listRvCoversItems = all.items.every((o) => rvOf(o) <= Number(all.resourceVersion));
  seen.listKinds = [...new Set(all.items.map((o) => `${o.apiVersion}/${o.kind}`))];
  for (const sel of ["app=a", "app!=a", "app in (a,b)", "extra", "!extra", "app=a,extra=y", "app notin (a)"])
    seen[`select ${sel}`] = (await api.list(secret, { namespace: ns, labelSelector: sel })).items
      .map((o) => o.metadata.name)
      .sort();

  // Deletes: preconditions refuse a changed or replaced object; a missing one is no error.
  const current = await api.get(secret, "s2", ns);
  seen.deleteStaleRv = await outcome(
    api.delete(secret, "s2", ns, { resourceVersion: applied.metadata.resourceVersion ?? "" }),
  );
  seen.deleteOtherUid = await outcome(api.delete(secret, "s2", ns, { uid: "00000000-0000-0000-0000-000000000000" }));
  seen.deleteCurrent = await outcome(
    api.delete(secret, "s2", ns, {
      uid: current.metadata.uid ?? "",
      resourceVersion: current.metadata.resourceVersion ?? "",
    }),
  );
  seen.deletedIsGone = await api.tryGet(secret, "s2", ns);
  seen.deleteMissing = await outcome(api.delete(secret, "s2", ns));
  seen.rawDeleteMissing = await outcome(api.request("DELETE", KubeApi.objectPath(secret, "s2", ns), {}));

  // Watch from a list's resourceVersion: what changed since, in order, with the selector's enter/leave.
  const from = (await api.list(secret, { namespace: ns, labelSelector: "app=a" })).resourceVersion;
  const later = await watchEvents(
    api,
    { namespace: ns, labelSelector: "app=a", resourceVersion: from },
    (events) => events.length >= 4,
    async () => {
      await api.create(secret, { metadata: { name: "w1", namespace: ns, labels: { app: "a" } } });
      await api.create(secret, { metadata: { name: "w2", namespace: ns, labels: { app: "other" } } });
      await api.mergePatch(secret, "w1", ns, { metadata: { labels: { app: "gone" } } });
      await api.mergePatch(secret, "w2", ns, { metadata: { labels: { app: "a" } } });
      await api.delete(secret, "w2", ns);
    },
  );
  seen.watchEvents = later.events.map((e) => `${e.type} ${e.type === "ERROR" ? "" : e.object.metadata.name}`);
  seen.watchRvsRise = later.events.every(
    (e, i, a) =>
      i === 0 ||
      (e.type !== "ERROR" && a[i - 1]!.type !== "ERROR" && rvOf(e.object) > rvOf(a[i - 1]!.object as KubeObject)),
  );
  seen.watchKinds = [
    ...new Set(later.events.map((e) => (e.type === "ERROR" ? "" : `${e.object.apiVersion}/${e.object.kind}`))),
  ];

  // Watch from "0" and from "": the current objects as ADDED, then a bookmark marking their end.
  const label = (e: WatchEvent): string =>
    e.type === "ERROR"
      ? "ERROR"
      : e.type === "BOOKMARK"
        ? `BOOKMARK ${Object.keys(e.object.metadata.annotations ?? {}).join(",")}`
        : `${e.type} ${e.object.metadata.name}`;
  for (const rv of ["0", ""]) {
    const initial = await watchEvents(api, { namespace: ns, labelSelector: "app=a", resourceVersion: rv }, (e) =>
      e.some((x) => x.type === "BOOKMARK"),
    );
    seen[`watchFrom "${rv}"`] = initial.events.map(label);
  }

  // Bookmarks: about 2 s before a watch's timeout, at the resource's latest change. The real apiserver's
  // bookmark is best effort (its cacher's once-a-second tick can miss the window on a loaded machine), so
  // the real one gets up to three tries to show one; the fake must show one at the first.
  let x1 = await api.create(secret, { metadata: { name: "x1", namespace: ns } });
  let started = Date.now();
  let x2 = x1;
  let bookmarked: Awaited<ReturnType<typeof watchEvents>> = { events: [] };
  for (let attempt = 1; attempt <= 3; attempt++) {
    if (attempt > 1) {
      await api.delete(secret, "x1", ns);
      await api.delete(secret, "x2", ns);
      x1 = await api.create(secret, { metadata: { name: "x1", namespace: ns } });
    }
    started = Date.now();
    bookmarked = await watchEvents(
      api,
      { namespace: ns, resourceVersion: x1.metadata.resourceVersion ?? "", timeoutSeconds: 5 },
      (events) => events.some((e) => e.type === "BOOKMARK"),
      async () => void (x2 = await api.create(secret, { metadata: { name: "x2", namespace: ns } })),
    );
    if (bookmarked.events.some((e) => e.type === "BOOKMARK") || !b.bookmarkBestEffort) break;
  }
  const found = bookmarked.events.find((e) => e.type === "BOOKMARK");
  const bookmark = found?.type === "BOOKMARK" ? found.object : undefined;
  const after = (Date.now() - started) / 1000;
  seen.bookmark = bookmark
    ? {
        kind: `${bookmark.apiVersion}/${bookmark.kind}`,
        metadataKeys: Object.keys(bookmark.metadata)
          .filter((k) => k !== "creationTimestamp")
          .sort(),
        notOlder: rvOf(bookmark) >= rvOf(x2),
        beforeTimeout: after >= 2 && after < 5,
      }
    : "none";
  seen.bookmarkWatch = bookmarked.events.map(label);

  // A quiet watch (nothing after its resourceVersion) gets no bookmark, and ends at its timeout.
  const quiet = (await api.list(secret, { namespace: ns })).resourceVersion;
  const timedOut = await watchEvents(api, { namespace: ns, resourceVersion: quiet, timeoutSeconds: 3 }, () => false);
  seen.quietWatch = timedOut.events.map(label);
  seen.timeoutEnds = timedOut.error ?? "clean end";

  // Too old: 410 Expired (an ERROR event, which KubeApi turns into a rejection).
  const sa = KubeResources.serviceAccount;
  const old = await b.tooOld();
  const expired = await watchEvents(api, { namespace: ns, resourceVersion: old }, () => false, undefined, sa);
  seen.expired = expired.error ?? "no error";
  const raw = await api
    .request("GET", `${KubeApi.collectionPath(sa, ns)}?watch=1&resourceVersion=${old}&timeoutSeconds=5`)
    .catch((err: unknown) => (err instanceof KubeApiError ? `${err.status} ${err.reason}` : String(err)));
  // The status line is 200: the refusal is the stream's one ERROR event.
  const line =
    typeof raw === "object" && raw !== null
      ? (raw as { type?: string; object?: { kind?: string; code?: number; reason?: string } })
      : undefined;
  seen.expiredEvent = line
    ? { type: line.type, kind: line.object?.kind, code: line.object?.code, reason: line.object?.reason }
    : raw;

  // Unknown resources are a 404 of the path.
  seen.unknownResource = await outcome(
    api.get({ apiVersion: "example.com/v1", kind: "Nothing", plural: "nothings", namespaced: false }, "x"),
  );
  return seen;
}

/** What an answer's fields are, with the values that differ between two apiservers replaced by their kind. */
function shape(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(shape);
  if (typeof v === "object" && v !== null)
    return Object.fromEntries(
      Object.entries(v)
        // Field ownership is not modelled by the fake.
        .filter(([k]) => k !== "managedFields")
        .map(([k, x]) => [k, shape(x)]),
    );
  if (typeof v === "string")
    return v
      .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, "<uid>")
      .replace(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/, "<time>");
  return v;
}

/** TokenReviews, SubjectAccessReviews and TokenRequests as the gateway and the CLI send them, generated names and strategic merge patches. */
async function reviews(api: KubeApi): Promise<Record<string, unknown>> {
  const seen: Record<string, unknown> = {};
  const ns = "fidelity-reviews";
  await api.create(KubeResources.namespace, { metadata: { name: ns } }).catch(() => undefined);
  const tokenReview = async (token: string, audiences?: string[]): Promise<unknown> => {
    const answer = (await api.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenReview",
      spec: { token, ...(audiences ? { audiences } : {}) },
    })) as Record<string, unknown>;
    return shape(answer);
  };
  seen.invalidToken = await tokenReview("not-a-token");
  seen.invalidTokenWithAudiences = await tokenReview("not-a-token", ["gw"]);
  seen.staticToken = await tokenReview("fidelity-token");
  seen.staticTokenWithAudiences = await tokenReview("fidelity-token", ["gw", "other"]);

  // A token bound to an audience (a TokenRequest): reviewed for it, and for another.
  await api.create(KubeResources.serviceAccount, { metadata: { name: "reviewer", namespace: ns } });
  const tokenRequest = (name: string, spec: Record<string, unknown>): Promise<unknown> =>
    api.request("POST", `${KubeApi.objectPath(KubeResources.serviceAccount, name, ns)}/token`, {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenRequest",
      spec,
    });
  const issued = (await tokenRequest("reviewer", { audiences: ["gw"], expirationSeconds: 1200 })) as {
    status: { token: string; expirationTimestamp: string };
  };
  seen.tokenRequest = shape({ ...issued, status: { ...issued.status, token: typeof issued.status.token } });
  const lifetime = (Date.parse(issued.status.expirationTimestamp) - Date.now()) / 1000;
  seen.tokenRequestLifetime = lifetime > 1100 && lifetime <= 1200;
  seen.tokenRequestMissing = await outcome(tokenRequest("missing", { audiences: ["gw"] }));
  const bound = (audiences?: string[]): Promise<unknown> =>
    tokenReview(issued.status.token, audiences).then((r) => {
      // The real one adds credential ids to `extra`; the user and the audiences are what is compared.
      const review = r as { spec: { token?: string }; status: { user?: { extra?: unknown } } };
      delete review.status.user?.extra;
      review.spec.token = "<the issued token>";
      return review;
    });
  seen.boundToken = await bound(["gw", "other"]);
  seen.boundTokenOtherAudience = await bound(["other"]);
  seen.boundTokenApiAudience = await bound();

  const accessReview = async (spec: Record<string, unknown>): Promise<unknown> =>
    shape(
      await api.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        apiVersion: "authorization.k8s.io/v1",
        kind: "SubjectAccessReview",
        spec,
      }),
    );
  const attributes = {
    group: "cluster.open-cluster-management.io",
    resource: "managedclusters",
    subresource: "proxy",
    name: "mc1",
    verb: "get",
  };
  seen.accessNoGrant = await accessReview({
    user: "nobody",
    groups: ["devs"],
    uid: "u1",
    extra: { k: ["v"] },
    resourceAttributes: attributes,
  });
  seen.accessMasters = await accessReview({
    user: "admin",
    groups: ["system:masters"],
    resourceAttributes: attributes,
  });
  seen.accessNoUser = await outcome(
    api.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
      apiVersion: "authorization.k8s.io/v1",
      kind: "SubjectAccessReview",
      spec: { resourceAttributes: attributes },
    }),
  );
  seen.accessNoAttributes = await outcome(
    api.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
      apiVersion: "authorization.k8s.io/v1",
      kind: "SubjectAccessReview",
      spec: { user: "nobody" },
    }),
  );

  // An Event named by generateName.
  const event = (await api.request("POST", KubeApi.collectionPath(KubeResources.event, ns), {
    apiVersion: "v1",
    kind: "Event",
    metadata: { generateName: "svc.", namespace: ns },
    involvedObject: { apiVersion: "v1", kind: "ConfigMap", name: "svc", namespace: ns },
    reason: "R",
    message: "m",
    type: "Warning",
  })) as KubeObject;
  seen.generatedName = /^svc\.[a-z0-9]{5}$/.test(event.metadata.name);

  // A strategic merge patch of a Deployment's status (as the agent writes its condition): merged by type.
  const labels = { app: "fidelity" };
  await api.create(KubeResources.deployment, {
    metadata: { name: "patched", namespace: ns },
    spec: {
      selector: { matchLabels: labels },
      template: { metadata: { labels }, spec: { containers: [{ name: "c", image: "example.invalid/c" }] } },
    },
  });
  const statusPatch = async (conditions: Record<string, string>[]): Promise<unknown> => {
    const patched = (await api.request(
      "PATCH",
      `${KubeApi.objectPath(KubeResources.deployment, "patched", ns)}/status`,
      { status: { conditions } },
      "application/strategic-merge-patch+json",
    )) as { status?: { conditions?: Record<string, unknown>[] } };
    // The real one writes a condition's unset times as null (typed serialization, which the fake does not model).
    return patched.status?.conditions?.map((c) => Object.fromEntries(Object.entries(c).filter(([, v]) => v !== null)));
  };
  const condition = (type: string, status: string): Record<string, string> => ({
    type,
    status,
    reason: "R",
    message: `${type} is ${status}`,
  });
  seen.strategicFirst = await statusPatch([condition("Available", "True")]);
  seen.strategicMerged = await statusPatch([condition("Progressing", "True"), condition("Available", "False")]);
  seen.strategicAdded = await statusPatch([condition("ReplicaFailure", "False")]);
  return seen;
}

describe("the faithful fake answers as kube-apiserver does", { skip: prerequisites.skip, timeout: 600_000 }, () => {
  const h = new Harness();
  let real: Backend;
  let fake: FakeApiServer;

  before(async () => {
    failIfMissing(prerequisites.missing);
    const bin = join(
      execFileSync(process.execPath, [join(REPO, "scripts", "k8s-binaries.mjs")], { encoding: "utf8" })
        .trim()
        .split("\n")
        .pop() ?? "",
      "bin",
    );
    await h.init([]);
    const [client, peer, metrics, secure] = [await freePort(), await freePort(), await freePort(), await freePort()];
    const etcd = h.spawnProc("etcd", join(bin, "etcd"), [
      "--name=fidelity",
      `--data-dir=${join(h.dir, "etcd")}`,
      `--listen-client-urls=http://127.0.0.1:${client}`,
      `--advertise-client-urls=http://127.0.0.1:${client}`,
      `--listen-peer-urls=http://127.0.0.1:${peer}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${peer}`,
      `--initial-cluster=fidelity=http://127.0.0.1:${peer}`,
      `--listen-metrics-urls=http://127.0.0.1:${metrics}`,
      "--unsafe-no-fsync=true",
      "--log-level=warn",
    ]);
    const sa = generateKeyPairSync("ec", { namedCurve: "P-256" });
    writeFileSync(join(h.dir, "sa.key"), sa.privateKey.export({ type: "pkcs8", format: "pem" }));
    writeFileSync(join(h.dir, "sa.pub"), sa.publicKey.export({ type: "spki", format: "pem" }));
    writeFileSync(join(h.dir, "tokens.csv"), 'fidelity-token,fidelity-admin,1,"system:masters"\n');
    const apiserver = h.spawnProc("kube-apiserver", join(bin, "kube-apiserver"), [
      `--etcd-servers=http://127.0.0.1:${client}`,
      "--bind-address=127.0.0.1",
      `--secure-port=${secure}`,
      "--advertise-address=127.0.0.1",
      `--cert-dir=${join(h.dir, "apiserver-certs")}`,
      `--token-auth-file=${join(h.dir, "tokens.csv")}`,
      "--service-cluster-ip-range=10.96.0.0/16",
      "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
      `--service-account-key-file=${join(h.dir, "sa.pub")}`,
      `--service-account-signing-key-file=${join(h.dir, "sa.key")}`,
      "--authorization-mode=RBAC",
      "--enable-priority-and-fairness=false",
      "--profiling=false",
      // ServiceAccounts are watched from etcd, where a compaction expires old resourceVersions at once.
      "--watch-cache-sizes=serviceaccounts#0",
      "--v=0",
    ]);
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: "real", server: `https://127.0.0.1:${secure}`, skipTLSVerify: true }],
      users: [{ name: "real", token: "fidelity-token" }],
      contexts: [{ name: "real", cluster: "real", user: "real" }],
      currentContext: "real",
    });
    const api = new KubeApi(kc);
    try {
      await waitFor(
        "kube-apiserver /readyz",
        async () => {
          if (apiserver.child.exitCode !== null || etcd.child.exitCode !== null) throw new Error("exited");
          // The bootstrap controller makes `default` once the apiserver serves.
          return (await api.tryGet(KubeResources.namespace, "default")) !== undefined;
        },
        240_000,
        1000,
      );
    } catch (err) {
      throw new Error(
        `kube-apiserver did not become ready:\n${apiserver.output().slice(-3000)}\n${etcd.output().slice(-2000)}`,
        {
          cause: err,
        },
      );
    }
    real = {
      api,
      bookmarkBestEffort: true,
      tooOld: async () => {
        // A write after the old resourceVersion, then etcd's compaction up to it (the apiserver
        // compacts every 5 minutes; this is the same, now).
        const before = (await api.list(KubeResources.serviceAccount, { namespace: "fidelity" })).resourceVersion;
        // Two writes: a watch from `before` starts at the first, which the compaction then removed.
        await api.create(KubeResources.serviceAccount, { metadata: { name: "bump1", namespace: "fidelity" } });
        const sa = await api.create(KubeResources.serviceAccount, {
          metadata: { name: "bump2", namespace: "fidelity" },
        });
        const res = await fetch(`http://127.0.0.1:${client}/v3/kv/compaction`, {
          method: "POST",
          body: JSON.stringify({ revision: sa.metadata.resourceVersion, physical: true }),
        });
        assert.equal(res.status, 200, await res.text());
        return before;
      },
    };
    fake = await FakeApiServer.start();
  });

  after(async () => {
    await fake?.close();
    await h.close();
  });

  test("the same operations, the same answers", async () => {
    const fromReal = await scenario(real);
    const fromFake = await scenario({
      api: fake.api(),
      tooOld: () => {
        const before = fake.resourceVersion();
        fake.expire();
        return Promise.resolve(before);
      },
    });
    assert.deepEqual(fromFake, fromReal);
  });

  test("reviews, TokenRequests, generated names and strategic merge patches: the same answers", async () => {
    const fromReal = await reviews(real.api);
    fake.tokens.set("fidelity-token", {
      user: { username: "fidelity-admin", uid: "1", groups: ["system:masters"] },
    });
    const fromFake = await reviews(fake.api());
    assert.deepEqual(fromFake, fromReal);
  });
});
