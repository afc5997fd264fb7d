import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import { defaultedSpec, type Condition, type ManagedProxyConfiguration } from "@cluster-proxy/api";
import { writeConfigurationStatus } from "./configuration-status.js";
import { KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { FakeApiServer } from "@cluster-proxy/kube/testing";
import { Resources } from "./resources.js";

const NOW = new Date("2026-01-02T03:04:05Z");

function mpc(resourceVersion: string, conditions: Condition[] = []): ManagedProxyConfiguration {
  return {
    apiVersion: "proxy.open-cluster-management.io/v1alpha1",
    kind: "ManagedProxyConfiguration",
    metadata: { name: "cluster-proxy", uid: "u1", generation: 1, resourceVersion },
    spec: defaultedSpec({ proxyServer: { image: "s" }, proxyAgent: { image: "a" } }),
    status: { conditions },
  };
}
const deployed = (status: "True" | "False", message: string): Condition => ({
  type: "ProxyServerDeployed",
  status,
  reason: status === "True" ? "Deployed" : "Progressing",
  message,
  lastTransitionTime: "2026-01-01T00:00:00Z",
  observedGeneration: 1,
});

const MPC = Resources.managedProxyConfiguration;

/** A real client of the faithful fake API server holding `stored`, with what it holds and was written. */
class Hub extends KubeApi {
  constructor(readonly fake: FakeApiServer) {
    super(fake.kubeConfig());
  }
  get current(): ManagedProxyConfiguration {
    const stored = this.fake.object<ManagedProxyConfiguration>(MPC, "cluster-proxy");
    assert.ok(stored);
    return stored;
  }
  /** The configuration's status writes that the server took. */
  get writes(): KubeObject[] {
    return this.fake.changes.filter((c) => c.type === "MODIFIED" && c.object.kind === MPC.kind).map((c) => c.object);
  }
}

/** The fake (closed after the test) holding `stored` (its resourceVersion is the server's). */
async function fakeApi(t: TestContext, stored: ManagedProxyConfiguration): Promise<Hub> {
  const server = await FakeApiServer.start([{ ...MPC, subresources: ["status"] }]);
  t.after(() => server.close());
  server.put(MPC, stored);
  return new Hub(server);
}

describe("writeConfigurationStatus", () => {
  const ready = {
    type: "ProxyServerDeployed",
    status: "True",
    reason: "Deployed",
    message: "1 of 1 proxy-servers ready",
  } as const;

  it("records ProxyServerDeployed once per transition, after the write", async (t) => {
    const api = await fakeApi(t, mpc("", [deployed("False", "0 of 1 proxy-servers ready")]));
    const rv = api.current.metadata.resourceVersion ?? "";
    const events: string[] = [];
    const recorder = { record: (_o: unknown, _t: string, reason: string) => Promise.resolve(void events.push(reason)) };
    assert.equal(
      await writeConfigurationStatus(api, recorder, mpc(rv, [deployed("False", "0 of 1")]), [ready], {}, NOW),
      true,
    );
    assert.deepEqual(events, ["ProxyServerDeployed"]);
    // The same observation again, from the object as now stored: nothing to write, no event.
    assert.equal(await writeConfigurationStatus(api, recorder, api.current, [ready], {}, NOW), false);
    assert.deepEqual(events, ["ProxyServerDeployed"]);
  });

  it("a conflict from a stale cache is re-read and retried: no error, no second event", async (t) => {
    const api = await fakeApi(t, mpc("", [deployed("False", "0 of 1 proxy-servers ready")]));
    const stale = api.current;
    const events: string[] = [];
    const recorder = { record: (_o: unknown, _t: string, reason: string) => Promise.resolve(void events.push(reason)) };
    await writeConfigurationStatus(api, recorder, stale, [ready], {}, NOW);
    assert.deepEqual(events, ["ProxyServerDeployed"]);
    // A reconcile that still sees the old object (resourceVersion 1): the write conflicts, the
    // newer object already says True, so nothing is written and no event repeats.
    assert.equal(await writeConfigurationStatus(api, recorder, stale, [ready], {}, NOW), false);
    assert.deepEqual(events, ["ProxyServerDeployed"]);
    // A stale reconcile with news (replicas): written onto the newer object, conditions kept.
    assert.equal(await writeConfigurationStatus(api, recorder, stale, [ready], { replicas: 1 }, NOW), true);
    assert.equal(api.current.status?.replicas, 1);
    assert.equal(api.current.status?.conditions?.[0]?.status, "True");
    assert.deepEqual(events, ["ProxyServerDeployed"]);
    assert.equal(api.writes.length, 2);
  });

  it("other errors are the caller's", async (t) => {
    const api = await fakeApi(t, mpc(""));
    api.fake.failNext(1, { code: 422, reason: "Invalid", message: "bad" });
    await assert.rejects(
      writeConfigurationStatus(api, { record: () => Promise.resolve() }, api.current, [ready], {}, NOW),
      /bad/,
    );
  });

  it("a refused configuration gives one Warning event", async (t) => {
    const api = await fakeApi(t, mpc(""));
    const events: string[] = [];
    const recorder = {
      record: (_o: unknown, type: string, reason: string) => Promise.resolve(void events.push(`${type} ${reason}`)),
    };
    const refused = {
      type: "ProxyServerDeployed",
      status: "False",
      reason: "InvalidConfiguration",
      message: "refused: spec.proxyServer.authentication.signer.type: signer type CertManager is not supported",
    } as const;
    await writeConfigurationStatus(api, recorder, api.current, [refused], {}, NOW);
    await writeConfigurationStatus(api, recorder, api.current, [refused], {}, NOW);
    assert.deepEqual(events, ["Warning InvalidConfiguration"]);
  });
});
