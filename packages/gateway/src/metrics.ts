/**
 * The gateway's Prometheus series (its own Registry). Every label takes its values from a fixed
 * set, whatever a caller or a cluster sends: the `cluster` label only clusters that exist (others
 * are counted as {@link UNKNOWN_CLUSTER}), and a removed cluster's series are dropped; `verb` only
 * {@link VERB_LABELS} (else {@link OTHER}); `code` only 100-599 (else {@link OTHER}); the reasons
 * are the gateway's own constants. The number of series is bounded by the hub's clusters.
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";

/** The `cluster` label of requests for clusters that do not exist (or were not named). */
export const UNKNOWN_CLUSTER = "_unknown";

/** The label value of anything outside a label's fixed set. */
export const OTHER = "other";

/**
 * The values of the `verb` label: the Kubernetes verbs, the lowercased methods of requests that
 * address no resource, `unknown` (refused before the request was read) and {@link OTHER} (a
 * method the gateway does not serve).
 */
export const VERB_LABELS: ReadonlySet<string> = new Set([
  "get",
  "list",
  "watch",
  "create",
  "update",
  "patch",
  "delete",
  "deletecollection",
  "head",
  "post",
  "put",
  "unknown",
  OTHER,
]);

/** The `verb` label value of `verb` (undefined: `unknown`). */
export function verbLabel(verb: string | undefined): string {
  if (verb === undefined) return "unknown";
  return VERB_LABELS.has(verb) ? verb : OTHER;
}

/** The `code` label value of an HTTP status. */
export function codeLabel(code: number): string {
  return Number.isInteger(code) && code >= 100 && code <= 599 ? String(code) : OTHER;
}

const PREFIX = "cluster_proxy_gateway_";

/** See the module comment. */
export class GatewayMetrics {
  readonly registry = new Registry();
  readonly requests = new Counter({
    name: `${PREFIX}requests_total`,
    help: "Requests answered, by cluster, HTTP status code and Kubernetes verb",
    labelNames: ["cluster", "code", "verb"] as const,
    registers: [this.registry],
  });
  readonly latency = new Histogram({
    name: `${PREFIX}request_duration_seconds`,
    help: "Time from a request's arrival to the end of its response (upgrades: to the end of the stream), by cluster",
    labelNames: ["cluster"] as const,
    buckets: [0.005, 0.025, 0.1, 0.25, 1, 2.5, 10, 60, 300],
    registers: [this.registry],
  });
  readonly bytes = new Counter({
    name: `${PREFIX}bytes_total`,
    help: "Bytes relayed, by cluster and direction (in: from the caller, out: to the caller)",
    labelNames: ["cluster", "direction"] as const,
    registers: [this.registry],
  });
  readonly openStreams = new Gauge({
    name: `${PREFIX}open_streams`,
    help: "Requests and upgraded streams being relayed now, by cluster",
    labelNames: ["cluster"] as const,
    registers: [this.registry],
  });
  readonly authenticationFailures = new Counter({
    name: `${PREFIX}authentication_failures_total`,
    help: "Requests whose caller could not be authenticated, by reason",
    labelNames: ["reason"] as const,
    registers: [this.registry],
  });
  readonly authorizationDenials = new Counter({
    name: `${PREFIX}authorization_denials_total`,
    help: "Requests refused by authorization (hub SubjectAccessReview, impersonation, service allowlist), by reason",
    labelNames: ["reason"] as const,
    registers: [this.registry],
  });
  readonly fairnessRejections = new Counter({
    name: `${PREFIX}fairness_rejections_total`,
    help: "Requests refused with 429 by a fairness limit, by reason (queue-full, queue-timeout, long-running: the per-user caps of one cluster; token-review-rate: the per-source TokenReview rate)",
    labelNames: ["reason"] as const,
    registers: [this.registry],
  });

  readonly refusedConnections = new Counter({
    name: `${PREFIX}refused_connections_total`,
    help: "Connections to the gateway's port refused or cut by its limits, by reason (client-connection-cap: closed on arrival, the client already held --max-connections-per-client; stream-resets: an HTTP/2 client reset streams before their answers faster than allowed)",
    labelNames: ["reason"] as const,
    registers: [this.registry],
  });

  readonly endpointRetries = new Counter({
    name: `${PREFIX}endpoint_retries_total`,
    help: "Requests sent a second time, on another connection to the cluster's gateway endpoint, after the first attempt failed before any response byte, by cluster and reason (unsent: the first never went out; refused: the endpoint refused it or its GOAWAY excluded it; incomplete: the endpoint had no byte of its body; safe: GET, HEAD or OPTIONS)",
    labelNames: ["cluster", "reason"] as const,
    registers: [this.registry],
  });

  constructor(private readonly exists: (cluster: string) => boolean) {}

  /** The `cluster` label value of `cluster`. */
  clusterLabel(cluster: string | undefined): string {
    return cluster !== undefined && this.exists(cluster) ? cluster : UNKNOWN_CLUSTER;
  }

  /** Drop the series of a removed cluster. */
  async forgetCluster(cluster: string): Promise<void> {
    this.latency.remove({ cluster });
    this.openStreams.remove({ cluster });
    for (const direction of ["in", "out"]) this.bytes.remove({ cluster, direction });
    for (const reason of ["unsent", "refused", "incomplete", "safe"]) this.endpointRetries.remove({ cluster, reason });
    const { values } = await this.requests.get();
    for (const { labels } of values)
      if (labels.cluster === cluster)
        this.requests.remove({ cluster, code: String(labels.code), verb: String(labels.verb) });
  }
}
