/**
 * The agent's registry renders what prom-client 15 (which the agent used before, and the server
 * and gateway still use) renders for the same metrics and updates, byte for byte: for the metric
 * kinds alone, and for every metric of AgentMetrics after the agent's own kinds of updates.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import * as prom from "prom-client";
import { PacketType } from "@cluster-proxy/protocol";
import { AgentMetrics } from "./metrics.js";
import { PlainCounter, PlainGauge, PlainHistogram, PlainRegistry } from "./plain-metrics.js";

test("counters, gauges and a histogram render as prom-client renders them", async () => {
  const ours = new PlainRegistry();
  const theirs = new prom.Registry();
  const registers = [theirs];
  const help = 'Help with a \\ backslash,\na newline and "quotes".';

  const c0 = ours.register(new PlainCounter("c_plain_total", help));
  const p0 = new prom.Counter({ name: "c_plain_total", help, registers });
  const c1 = ours.register(new PlainCounter("c_labels_total", "labelled", ["a", "b"]));
  const p1 = new prom.Counter({ name: "c_labels_total", help: "labelled", labelNames: ["a", "b"], registers });
  const cUnused = ours.register(new PlainCounter("c_unused_total", "never counted", ["x"]));
  const pUnused = new prom.Counter({ name: "c_unused_total", help: "never counted", labelNames: ["x"], registers });
  const g0 = ours.register(new PlainGauge("g_plain", "a gauge"));
  const q0 = new prom.Gauge({ name: "g_plain", help: "a gauge", registers });
  const g1 = ours.register(new PlainGauge("g_labels", "a labelled gauge", ["flag"]));
  const q1 = new prom.Gauge({ name: "g_labels", help: "a labelled gauge", labelNames: ["flag"], registers });
  const buckets = [0.005, 0.025, 0.1, 0.5, 2.5, 10, 30];
  const h = ours.register(new PlainHistogram("h_seconds", "a histogram", buckets));
  const ph = new prom.Histogram({ name: "h_seconds", help: "a histogram", buckets, registers });
  assert.equal(await ours.metrics(), await theirs.metrics(), "before any update");
  assert.equal(ours.contentType, theirs.contentType);

  c0.inc();
  p0.inc();
  c0.inc(2.5);
  p0.inc(2.5);
  c1.labels("x", 'y"\\\n').inc();
  p1.labels("x", 'y"\\\n').inc();
  c1.inc({ b: "2", a: "1" }, 3);
  p1.inc({ b: "2", a: "1" }, 3);
  c1.labels("x", 'y"\\\n').inc(4);
  p1.labels("x", 'y"\\\n').inc(4);
  c1.inc({ a: "only a" });
  p1.inc({ a: "only a" });
  g0.set(1_700_000_000.5);
  q0.set(1_700_000_000.5);
  g1.set({ flag: "--agent-cert" }, 17);
  q1.set({ flag: "--agent-cert" }, 17);
  g1.set({ flag: "--ca-cert" }, -1);
  q1.set({ flag: "--ca-cert" }, -1);
  g1.set({ flag: "--agent-cert" }, 18);
  q1.set({ flag: "--agent-cert" }, 18);
  g1.set({ flag: "inf" }, Infinity);
  q1.set({ flag: "inf" }, Infinity);
  for (const v of [0, 0.005, 0.0051, 0.3, 2.5, 29.9, 30, 31, 1e6, 0.1]) {
    h.observe(v);
    ph.observe(v);
  }
  assert.throws(() => c0.inc(-1), /cannot be decreased/);
  assert.throws(() => p0.inc(-1));
  assert.equal(await ours.metrics(), await theirs.metrics(), "after updates");
  assert.deepEqual(await cUnused.get().then((m) => m.values), await pUnused.get().then((m) => m.values));
  const byFlag = (vs: { labels: Record<string, unknown>; value: number }[]): [unknown, number][] =>
    vs.map((v) => [v.labels["flag"], v.value]);
  assert.deepEqual(byFlag((await g1.get()).values), byFlag((await q1.get()).values));
});

test("AgentMetrics: every metric renders as the same metric in prom-client after the agent's updates", async () => {
  const agent = new AgentMetrics();
  const theirs = new prom.Registry();
  const counters = new Map<string, prom.Counter>();
  const gauges = new Map<string, prom.Gauge>();
  const histograms = new Map<string, prom.Histogram>();
  for (const m of agent.registry.getMetricsAsArray()) {
    const config = { name: m.name, help: m.help, labelNames: [...m.labelNames], registers: [theirs] };
    if (m.type === "counter") counters.set(m.name, new prom.Counter(config));
    else if (m.type === "gauge") gauges.set(m.name, new prom.Gauge(config));
    else histograms.set(m.name, new prom.Histogram({ ...config, buckets: [0.005, 0.025, 0.1, 0.5, 2.5, 10, 30] }));
  }
  const counter = (name: string): prom.Counter => counters.get(name)!;
  const gauge = (name: string): prom.Gauge => gauges.get(name)!;
  const P = "konnectivity_network_proxy_agent_";
  gauge(`${P}known_server_count`).set(1);
  assert.equal(await agent.registry.metrics(), await theirs.metrics(), "a new agent");

  agent.openServerConnections.set(2);
  gauge(`${P}open_server_connections`).set(2);
  agent.endpointDialFailures.labels("limit").inc();
  counter(`${P}endpoint_dial_failure_total`).labels("limit").inc();
  agent.dialLimitRefusals.labels("--max-dials").inc();
  counter("cluster_proxy_agent_dial_limit_refusals_total").labels("--max-dials").inc();
  agent.dialDuration.observe(0.012);
  histograms.get(`${P}dial_duration_seconds`)!.observe(0.012);
  agent.certificateExpiry.set({ flag: "--agent-cert" }, 1_800_000_000);
  gauge("cluster_proxy_agent_certificate_expiry_timestamp_seconds").set({ flag: "--agent-cert" }, 1_800_000_000);
  agent.certificateReloads.inc({ result: "success" });
  counter("cluster_proxy_agent_certificate_reloads_total").inc({ result: "success" });
  agent.streamError("from_agent", "Unavailable", PacketType.DATA);
  counter(`${P}stream_errors_total`).labels("from_agent", "Unavailable", "DATA").inc();
  counter(`${P}server_connection_failure_count`).labels("to_server").inc();
  agent.packet("to_agent", PacketType.DATA, 5);
  agent.packet("from_agent", PacketType.DIAL_RSP);
  counter(`${P}stream_packets_total`).inc({ segment: "to_agent", packet_type: "DATA" }, 5);
  counter(`${P}stream_packets_total`).inc({ segment: "from_agent", packet_type: "DIAL_RSP" }, 1);
  assert.equal(await agent.registry.metrics(), await theirs.metrics(), "after updates");
});
