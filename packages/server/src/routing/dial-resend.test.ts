/**
 * A dial whose agent stream goes away before it answers (the agent pod was killed, or its tunnel
 * through the hub apiserver cut) is sent again to another agent of the same cluster, with the
 * same `random` and deadline, instead of failing: the client gets its connection. Only when no
 * other agent serves the address does it fail; a late answer of the gone stream is never read;
 * health probes are not resent (they ask about one agent).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { PacketType } from "@cluster-proxy/protocol";
import { silentLogger } from "@cluster-proxy/kit";
import { Backend, type TunnelConnection } from "../agents/backend.js";
import { IDLE_METRICS_SOURCE, ServerMetrics } from "../metrics.js";
import { MAX_DIAL_RESENDS, Relay, packetFrame } from "./relay.js";
import { FakeCall } from "../testing/fake-call.js";
import { RecordingEnd } from "../testing/recording-end.js";

/** What `end` got (read through a call: assertions narrow the field itself). */
const connectionOf = (end: RecordingEnd): TunnelConnection | undefined => end.conn;

function world(agents: number) {
  const metrics = new ServerMetrics(IDLE_METRICS_SOURCE);
  const relay = new Relay({ strategies: ["destHost"], backendDialTimeoutMs: 0, logger: silentLogger, metrics });
  const stream = Array.from({ length: agents }, (_, i) => {
    const call = new FakeCall();
    const backend = new Backend(
      `mc1-agent-${i}`,
      { host: ["mc1"], cidr: [], ipv4: [], ipv6: [], defaultRoute: false },
      call.asServerCall(),
    );
    relay.addBackend(backend);
    return { call, backend };
  });
  /** The stream a DIAL_REQ with `random` was sent on last. */
  const dialedOn = (random: bigint) =>
    stream.filter((s) => s.call.packets().some((p) => p.type === PacketType.DIAL_REQ && p.random === random)).at(-1);
  const answer = (backend: Backend, random: bigint, connectID: bigint): void =>
    relay.fromAgent(
      backend,
      packetFrame({ type: PacketType.DIAL_RSP, dialResponse: { random, connectID, error: "" } }),
    );
  return { relay, metrics, stream, dialedOn, answer };
}

const resentCount = async (m: ServerMetrics): Promise<number> =>
  (await m.registry.getSingleMetric("cluster_proxy_server_dials_resent_total")!.get()).values[0]?.value ?? 0;

describe("a dial whose agent went away before answering", () => {
  test("is sent again to the cluster's other agent, same random, and succeeds there", async () => {
    const w = world(2);
    const end = new RecordingEnd();
    assert.ok(w.relay.dial(end, { address: "mc1:443", random: 7n }));
    const first = w.dialedOn(7n)!;
    w.relay.removeBackend(first.backend, "keepalive timeout");
    const second = w.dialedOn(7n)!;
    assert.notEqual(second.backend, first.backend);
    assert.equal(end.failure, undefined, "not failed");
    // The gone stream's late answer is not read; the other agent's is.
    w.answer(first.backend, 7n, 1n);
    assert.equal(end.conn, undefined);
    w.answer(second.backend, 7n, 5n);
    const conn = connectionOf(end);
    assert.equal(conn?.connectID, 5n);
    assert.equal(conn?.backend, second.backend);
    assert.equal(w.relay.pendingCount(), 0);
    assert.equal(await resentCount(w.metrics), 1);
  });

  test("fails when no other agent serves the address, and after MAX_DIAL_RESENDS resends", () => {
    const alone = world(1);
    const end = new RecordingEnd();
    alone.relay.dial(end, { address: "mc1:443", random: 1n });
    alone.relay.removeBackend(alone.stream[0]!.backend, "keepalive timeout");
    assert.equal(end.failure?.kind, "agent_gone");
    assert.equal(end.failure.cluster, "mc1");
    assert.equal(
      end.failure.text,
      "no agent of cluster mc1 is connected: the link of agent mc1-agent-0 went down before it answered the dial (keepalive timeout)",
    );
    assert.equal(alone.relay.pendingCount(), 0);
    // Also for an address inside the cluster (<host>.<cluster>:<port>).
    const inside = world(1);
    const svc = new RecordingEnd();
    inside.relay.dial(svc, { address: "kubernetes.default.svc.mc1:443", random: 4n });
    inside.relay.removeBackend(inside.stream[0]!.backend, "stream reset");
    assert.equal(svc.failure?.cluster, "mc1");
    assert.match(svc.failure.text, /^no agent of cluster mc1 is connected: .*\(stream reset\)$/);

    const many = world(MAX_DIAL_RESENDS + 3);
    const bounded = new RecordingEnd();
    many.relay.dial(bounded, { address: "mc1:443", random: 2n });
    for (let i = 0; i <= MAX_DIAL_RESENDS; i++) many.relay.removeBackend(many.dialedOn(2n)!.backend, `gone ${i}`);
    assert.equal(bounded.failure?.kind, "agent_gone", "gave up after the bounded resends");
    // Other agents of mc1 are still connected: the text does not say none is.
    assert.match(
      bounded.failure.text,
      new RegExp(
        `^agent mc1-agent-\\d of cluster mc1 disconnected before answering the dial \\(gone ${MAX_DIAL_RESENDS}\\), after it was sent ${MAX_DIAL_RESENDS} time\\(s\\) again$`,
      ),
    );
    assert.equal(many.relay.pendingCount(), 0);
  });

  test("a health probe is not resent: it asks about the agent it was sent to", () => {
    const w = world(2);
    const probe = new RecordingEnd(true);
    w.relay.dial(probe, { address: "mc1:443", random: 3n });
    w.relay.removeBackend(w.dialedOn(3n)!.backend, "gone");
    assert.equal(probe.failure?.kind, "agent_gone");
    // Its text has no "; " (the addon's Available message separates the replicas' reasons with it).
    assert.match(
      probe.failure.text,
      /^agent mc1-agent-\d of cluster mc1 disconnected before answering the dial \(gone\)$/,
    );
    assert.doesNotMatch(probe.failure.text, /; /);
    assert.equal(w.stream.flatMap((s) => s.call.packets()).filter((p) => p.type === PacketType.DIAL_REQ).length, 1);
  });
});
