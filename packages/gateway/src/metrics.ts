/**
 * The gateway's Prometheus series (its own Registry). The `cluster` label only takes clusters
 * that exist (others are counted as {@link UNKNOWN_CLUSTER}), and a removed cluster's series are
 * dropped, so the number of series is bounded by the hub's clusters.
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";

/** The `cluster` label of requests for clusters that do not exist (or were not named). */
export const UNKNOWN_CLUSTER = "_unknown";

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
    const { values } = await this.requests.get();
    for (const { labels } of values)
      if (labels.cluster === cluster)
        this.requests.remove({ cluster, code: String(labels.code), verb: String(labels.verb) });
  }
}
