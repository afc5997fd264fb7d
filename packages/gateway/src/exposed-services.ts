/**
 * The Services users may reach (default deny): the watched allowlist ConfigMap, parsed strictly; a bad
 * update keeps the last good list, a deleted ConfigMap denies everything.
 * Guide: docs/guides/gateway.md#services-of-a-managed-cluster-by-allowlist
 */
import yaml from "js-yaml";
import type { ManagedClusterInfo } from "./hub-api.js";
import { errorMessage } from "@cluster-proxy/errors";

/** The label that puts a ManagedCluster in a ManagedClusterSet. */
export const CLUSTER_SET_LABEL = "cluster.open-cluster-management.io/clusterset";

/** One allowlist entry. */
export interface ExposedService {
  clusters: string[];
  clusterSets: string[];
  namespace: string;
  service: string;
  port?: number;
  protocol?: "http" | "https";
}

const KEYS = new Set(["clusters", "clusterSets", "namespace", "service", "port", "protocol"]);

function stringList(v: unknown, where: string): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v) || !v.every((x) => typeof x === "string" && x !== ""))
    throw new Error(`${where}: must be a list of names`);
  return v as string[];
}

/** Parse the `services` key; throws an Error naming the entry and field at fault. */
export function parseExposedServices(text: string): ExposedService[] {
  let doc: unknown;
  try {
    doc = yaml.load(text, { schema: yaml.CORE_SCHEMA });
  } catch (err) {
    throw new Error(`not YAML: ${errorMessage(err).split("\n")[0]}`, { cause: err });
  }
  if (doc === undefined || doc === null) return [];
  if (!Array.isArray(doc)) throw new Error("must be a YAML list of entries");
  return doc.map((raw: unknown, i): ExposedService => {
    const where = `entry ${i + 1}`;
    if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw new Error(`${where}: must be a mapping`);
    const e = raw as Record<string, unknown>;
    const unknown = Object.keys(e).filter((k) => !KEYS.has(k));
    if (unknown.length) throw new Error(`${where}: unknown key "${unknown[0]}"`);
    if (typeof e.namespace !== "string" || e.namespace === "") throw new Error(`${where}: namespace is required`);
    if (typeof e.service !== "string" || e.service === "") throw new Error(`${where}: service is required`);
    const entry: ExposedService = {
      clusters: stringList(e.clusters, `${where}: clusters`),
      clusterSets: stringList(e.clusterSets, `${where}: clusterSets`),
      namespace: e.namespace,
      service: e.service,
    };
    if (e.port !== undefined) {
      if (typeof e.port !== "number" || !Number.isInteger(e.port) || e.port < 1 || e.port > 65535)
        throw new Error(`${where}: port must be a port number`);
      entry.port = e.port;
    }
    if (e.protocol !== undefined) {
      if (e.protocol !== "http" && e.protocol !== "https") throw new Error(`${where}: protocol must be http or https`);
      entry.protocol = e.protocol;
    }
    return entry;
  });
}

/** A Service request to check against the list. */
export interface ServiceRequest {
  namespace: string;
  service: string;
  port: number;
  protocol: "http" | "https";
}

/** Whether `entries` let `cluster` expose the requested Service. */
export function isExposed(entries: readonly ExposedService[], cluster: ManagedClusterInfo, r: ServiceRequest): boolean {
  const set = cluster.labels[CLUSTER_SET_LABEL];
  return entries.some(
    (e) =>
      (e.clusters.includes(cluster.name) || (set !== undefined && e.clusterSets.includes(set))) &&
      e.namespace === r.namespace &&
      e.service === r.service &&
      (e.port === undefined || e.port === r.port) &&
      (e.protocol === undefined || e.protocol === r.protocol),
  );
}

/** What happened to an update of the ConfigMap. */
export type ExposedServicesUpdate =
  { kind: "loaded"; entries: number } | { kind: "deleted" } | { kind: "refused"; problem: string };

/** The current allowlist, fed by a ConfigMap watch. */
export class ExposedServices {
  private entries: readonly ExposedService[] = [];

  /** Take the ConfigMap's data (undefined: deleted or missing). A bad update keeps the last good list. */
  update(data: Record<string, string> | undefined): ExposedServicesUpdate {
    if (data === undefined) {
      this.entries = [];
      return { kind: "deleted" };
    }
    try {
      this.entries = parseExposedServices(data.services ?? "");
      return { kind: "loaded", entries: this.entries.length };
    } catch (err) {
      return { kind: "refused", problem: errorMessage(err) };
    }
  }

  /** Whether the current list lets `cluster` expose the Service. */
  allows(cluster: ManagedClusterInfo, r: ServiceRequest): boolean {
    return isExposed(this.entries, cluster, r);
  }
}
