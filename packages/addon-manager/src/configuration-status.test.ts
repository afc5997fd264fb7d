import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { defaultedSpec, type Condition, type ManagedProxyConfiguration } from "@cluster-proxy/api";
import { writeConfigurationStatus } from "./configuration-status.js";
import { KubeApiError, type KubeObject } from "@cluster-proxy/kube";

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

/** A fake apiserver holding one object: a PUT with another resourceVersion is a 409. */
function fakeApi(stored: ManagedProxyConfiguration) {
  let current = stored;
  const writes: KubeObject[] = [];
  return {
    writes,
    get current() {
      return current;
    },
    replace<T extends KubeObject>(_ref: unknown, obj: KubeObject): Promise<T> {
      if (obj.metadata.resourceVersion !== current.metadata.resourceVersion)
        return Promise.reject(new KubeApiError(409, "Conflict", "the object has been modified"));
      writes.push(obj);
      const rv = String(Number(current.metadata.resourceVersion) + 1);
      current = { ...current, metadata: { ...current.metadata, resourceVersion: rv }, status: obj.status as never };
      return Promise.resolve(current as unknown as T);
    },
    tryGet<T extends KubeObject>(): Promise<T | undefined> {
      return Promise.resolve(current as unknown as T);
    },
  };
}

describe("writeConfigurationStatus", () => {
  const ready = {
    type: "ProxyServerDeployed",
    status: "True",
    reason: "Deployed",
    message: "1 of 1 proxy-servers ready",
  } as const;

  it("records ProxyServerDeployed once per transition, after the write", async () => {
    const api = fakeApi(mpc("1", [deployed("False", "0 of 1 proxy-servers ready")]));
    const events: string[] = [];
    const recorder = { record: (_o: unknown, _t: string, reason: string) => Promise.resolve(void events.push(reason)) };
    assert.equal(
      await writeConfigurationStatus(api, recorder, mpc("1", [deployed("False", "0 of 1")]), [ready], {}, NOW),
      true,
    );
    assert.deepEqual(events, ["ProxyServerDeployed"]);
    // The same observation again, from the object as now stored: nothing to write, no event.
    assert.equal(await writeConfigurationStatus(api, recorder, api.current, [ready], {}, NOW), false);
    assert.deepEqual(events, ["ProxyServerDeployed"]);
  });

  it("a conflict from a stale cache is re-read and retried: no error, no second event", async () => {
    const stale = mpc("1", [deployed("False", "0 of 1 proxy-servers ready")]);
    const api = fakeApi(stale);
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

  it("other errors are the caller's", async () => {
    const api = {
      replace: () => Promise.reject(new KubeApiError(422, "Invalid", "bad")),
      tryGet: () => Promise.resolve(undefined),
    };
    await assert.rejects(
      writeConfigurationStatus(api, { record: () => Promise.resolve() }, mpc("1"), [ready], {}, NOW),
      /bad/,
    );
  });

  it("a refused configuration gives one Warning event", async () => {
    const api = fakeApi(mpc("1"));
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
