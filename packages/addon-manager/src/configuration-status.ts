/**
 * Writing a ManagedProxyConfiguration's status (a PUT with the resourceVersion it was computed from; a
 * 409 is routine and merged again) and one Event per condition transition, however often retried.
 * Design: docs/design/addon-manager.md#status
 */
import { MpcConditions, managedProxyConfigurationFromApi, type ManagedProxyConfiguration } from "@cluster-proxy/api";
import {
  isConflict,
  mergeConditions,
  type ConditionInput,
  type EventRecorder,
  type KubeApi,
} from "@cluster-proxy/kube";
import { Resources } from "./resources.js";

/** The reason of ProxyServerDeployed=False for a configuration the manager refuses (a Warning event too). */
export const INVALID_CONFIGURATION = "InvalidConfiguration";

/** Writes after a conflict before the error is left to the work queue. */
const CONFLICT_ATTEMPTS = 3;

/** The status fields a reconcile observed (conditions apart). */
export type ObservedStatus = NonNullable<ManagedProxyConfiguration["status"]>;

/**
 * Write `conditions` and `status` onto `mpc`'s status unless nothing changed; on a conflict re-read
 * the object and retry (up to {@link CONFLICT_ATTEMPTS} writes). Returns whether a write happened.
 */
export async function writeConfigurationStatus(
  api: Pick<KubeApi, "replace" | "tryGet">,
  events: Pick<EventRecorder, "record">,
  mpc: ManagedProxyConfiguration,
  conditions: readonly ConditionInput[],
  status: ObservedStatus,
  now: Date,
): Promise<boolean> {
  let current = mpc;
  for (let attempt = 1; ; attempt++) {
    const generation = current.metadata.generation;
    const next = {
      ...(current.status ?? {}),
      ...status,
      lastObservedGeneration: generation,
      conditions: mergeConditions(current.status?.conditions, conditions, generation, now),
    };
    if (JSON.stringify(next) === JSON.stringify(current.status ?? {})) return false;
    try {
      await api.replace(Resources.managedProxyConfiguration, { ...current, status: next }, "status");
    } catch (err) {
      if (!isConflict(err) || attempt >= CONFLICT_ATTEMPTS) throw err;
      const fresh = await api.tryGet(Resources.managedProxyConfiguration, current.metadata.name);
      if (!fresh || fresh.metadata.uid !== current.metadata.uid) return false; // deleted: nothing to report on
      current = managedProxyConfigurationFromApi(fresh);
      continue;
    }
    for (const c of conditions) {
      if (c.type !== MpcConditions.ProxyServerDeployed) continue;
      const before = current.status?.conditions?.find((old) => old.type === c.type);
      if (c.status === "True" && before?.status !== "True")
        await events.record(current, "Normal", "ProxyServerDeployed", c.message);
      if (c.reason === INVALID_CONFIGURATION && (before?.reason !== c.reason || before.message !== c.message))
        await events.record(current, "Warning", INVALID_CONFIGURATION, c.message);
    }
    return true;
  }
}
