/**
 * A new server's warm-up (--warm-up-dial-wait): a dial for an address no agent serves waits for
 * such an agent to connect instead of failing at once, bounded in time (its wait, its own
 * --backend-dial-timeout deadline) and in number (MAX_DIALS_WAITING_FOR_AGENTS), and is released
 * at once when the agent arrives, the client gives up, or the server drains or stops. Outside the
 * warm-up (agentWaitMs says 0) it fails at once with the usual No agent available.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DialErrors, PacketType, decodePacket } from "@cluster-proxy/protocol";
import { FRAME_HEADER } from "@cluster-proxy/tunnel";
import { serverOptionSpecs } from "@cluster-proxy/api";
import { silentLogger } from "@cluster-proxy/kit";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { Backend, type DialFailure } from "../agents/backend.js";
import { IDLE_METRICS_SOURCE, ServerMetrics } from "../metrics.js";
import { MAX_DIALS_WAITING_FOR_AGENTS, MAX_WAITING_ADDRESS_LENGTH, Relay, packetFrame } from "./relay.js";
import { FakeCall } from "../testing/fake-call.js";
import { RecordingEnd } from "../testing/recording-end.js";

/** What `end` got (read through a call: an assertion on the field would narrow it for good). */
const failureOf = (end: RecordingEnd): DialFailure | undefined => end.failure;

interface WorldOptions {
  /** What agentWaitMs answers (changed by the test: the warm-up is over when it says 0). */
  waitMs?: number;
  backendDialTimeoutMs?: number;
  cap?: number;
}

function world(o: WorldOptions = {}) {
  const clock = new ManualClock();
  const metrics = new ServerMetrics(IDLE_METRICS_SOURCE);
  const state = { waitMs: o.waitMs ?? 20_000 };
  const relay = new Relay({
    strategies: ["destHost"],
    backendDialTimeoutMs: o.backendDialTimeoutMs ?? 0,
    logger: silentLogger,
    metrics,
    clock,
    agentWaitMs: () => state.waitMs,
    ...(o.cap === undefined ? {} : { maxDialsWaitingForAgents: o.cap }),
  });
  /** An agent of `cluster` connects. */
  const connect = (cluster: string): { call: FakeCall; backend: Backend } => {
    const call = new FakeCall();
    const backend = new Backend(
      `agent-${cluster}`,
      { host: [cluster], cidr: [], ipv4: [], ipv6: [], defaultRoute: false },
      call.asServerCall(),
    );
    relay.addBackend(backend);
    return { call, backend };
  };
  const dial = (address: string, random: bigint): RecordingEnd => {
    const end = new RecordingEnd();
    relay.dial(end, { address, random });
    return end;
  };
  const dialReqs = (call: FakeCall): bigint[] =>
    call
      .packets()
      .filter((p) => p.type === PacketType.DIAL_REQ)
      .map((p) => p.random);
  const answer = (backend: Backend, random: bigint, connectID: bigint): void =>
    relay.fromAgent(
      backend,
      packetFrame({ type: PacketType.DIAL_RSP, dialResponse: { random, connectID, error: "" } }),
    );
  const waited = async (result: string): Promise<number> =>
    (await metrics.registry.getSingleMetric("cluster_proxy_server_dials_waited_for_agent_total")!.get()).values.find(
      (v) => v.labels.result === result,
    )?.value ?? 0;
  return { clock, relay, state, connect, dial, dialReqs, answer, waited };
}

describe("warm-up: a dial that finds no agent waits for one", () => {
  test("waits, and succeeds when its cluster's agent connects (same random, sent to that agent)", async () => {
    const w = world({ waitMs: 20_000 });
    const other = w.connect("mc2");
    const end = w.dial("mc1:443", 7n);
    assert.equal(end.failure, undefined, "not failed at once");
    assert.equal(w.relay.waitingCount(), 1);
    w.clock.advance(4_000);
    const mc1 = w.connect("mc1");
    assert.deepEqual(w.dialReqs(mc1.call), [7n], "sent to the agent that arrived");
    assert.deepEqual(w.dialReqs(other.call), [], "not to another cluster's agent");
    assert.equal(w.relay.waitingCount(), 0);
    w.answer(mc1.backend, 7n, 1n);
    assert.ok(end.conn, "connected");
    assert.equal(end.failure, undefined);
    assert.equal(w.clock.armed, 0, "its wait timer is gone");
    assert.equal(await w.waited("sent"), 1);
  });

  test("a cluster's name as a suffix (kubernetes.default.svc.mc1) waits for mc1 and is rewritten", () => {
    const w = world();
    const end = w.dial("kubernetes.default.svc.mc1:443", 3n);
    const mc1 = w.connect("mc1");
    assert.deepEqual(w.dialReqs(mc1.call), [3n]);
    const sent = decodePacket(mc1.call.sent[0]!.subarray(FRAME_HEADER));
    assert.ok("dialRequest" in sent);
    assert.equal(sent.dialRequest.address, "kubernetes.default.svc:443");
    w.answer(mc1.backend, 3n, 9n);
    assert.ok(end.conn);
  });

  test("no agent within its wait: fails with the usual No agent available, counted as expired", async () => {
    const w = world({ waitMs: 20_000 });
    const end = w.dial("mc1:443", 1n);
    w.clock.advance(19_999);
    assert.equal(failureOf(end), undefined);
    w.clock.advance(1);
    assert.equal(failureOf(end)?.kind, "no_agent");
    assert.equal(failureOf(end)?.text, DialErrors.noAgent);
    assert.equal(w.relay.waitingCount(), 0);
    assert.equal(w.relay.pendingCount(), 0);
    assert.equal(await w.waited("expired"), 1);
    // An agent that comes later gets nothing.
    const mc1 = w.connect("mc1");
    assert.deepEqual(w.dialReqs(mc1.call), []);
  });

  test("the wait never outlasts --backend-dial-timeout, which counts from the dial, its wait included", () => {
    const w = world({ waitMs: 20_000, backendDialTimeoutMs: 5_000 });
    const late = w.dial("mc1:443", 1n);
    w.clock.advance(5_000);
    assert.equal(late.failure?.kind, "no_agent", "bound by the dial's own deadline");

    const slow = w.dial("mc2:443", 2n);
    w.clock.advance(3_000);
    const mc2 = w.connect("mc2");
    assert.deepEqual(w.dialReqs(mc2.call), [2n]);
    w.clock.advance(1_999);
    assert.equal(failureOf(slow), undefined);
    w.clock.advance(1);
    assert.equal(failureOf(slow)?.kind, "timeout", "the agent did not answer within the 5 s since the dial");
    assert.equal(failureOf(slow)?.text, DialErrors.backendDialTimeout);
  });

  test("after the warm-up (agentWaitMs 0) a dial fails at once, as before; so does a health probe, and an absurd address", () => {
    const w = world({ waitMs: 0 });
    const end = w.dial("mc1:443", 1n);
    assert.equal(end.failure?.kind, "no_agent");
    assert.equal(end.failure?.text, DialErrors.noAgent);
    assert.equal(w.relay.waitingCount(), 0);

    w.state.waitMs = 20_000;
    const probe = new RecordingEnd(true);
    w.relay.dial(probe, { address: "mc1:443", random: 2n });
    assert.equal(probe.failure?.kind, "no_agent", "a probe asks about the agents connected now");
    const long = w.dial(`${"a".repeat(MAX_WAITING_ADDRESS_LENGTH)}:443`, 3n);
    assert.equal(long.failure?.kind, "no_agent");
    assert.equal(w.relay.waitingCount(), 0);
  });

  test("a flood of dials for made-up clusters holds at most the cap; the rest fail at once; legitimate dials still succeed", async () => {
    const flag = serverOptionSpecs.find((spec) => spec.flag === "warm-up-dial-wait");
    assert.ok(flag?.description.includes(`at most ${MAX_DIALS_WAITING_FOR_AGENTS} dials`), "the flag names the cap");
    const cap = 16;
    const w = world({ cap });
    const mc2 = w.connect("mc2");
    // A legitimate dial that came before the flood.
    const early = w.dial("mc1:443", 1n);
    const flood: RecordingEnd[] = [];
    for (let i = 0; i < 10 * cap; i++) {
      flood.push(w.dial(`made-up-${i}:443`, 1000n + BigInt(i)));
      assert.ok(w.relay.waitingCount() <= cap);
    }
    assert.equal(w.relay.waitingCount(), cap);
    const refused = flood.filter((e) => e.failure);
    assert.equal(refused.length, 10 * cap - (cap - 1));
    for (const e of refused) assert.equal(e.failure?.text, DialErrors.noAgent, "failed at once, the usual error");
    assert.equal(await w.waited("refused"), refused.length);
    // A dial for a cluster whose agent is here is not affected by the full room.
    const direct = w.dial("mc2:443", 2n);
    assert.deepEqual(w.dialReqs(mc2.call), [2n]);
    w.answer(mc2.backend, 2n, 5n);
    assert.ok(direct.conn);
    // The early legitimate dial is sent when its agent comes.
    const mc1 = w.connect("mc1");
    assert.deepEqual(w.dialReqs(mc1.call), [1n]);
    w.answer(mc1.backend, 1n, 6n);
    assert.ok(early.conn);
    // The made-up ones that waited end at their bound; nothing is left.
    w.clock.advance(20_000);
    assert.equal(w.relay.waitingCount(), 0);
    assert.equal(flood.filter((e) => !e.failure).length, 0);
    assert.equal(w.clock.armed, 0);
  });

  test("the client goes away: its wait ends at once, no agent hears of it", async () => {
    const w = world();
    const end = new RecordingEnd();
    const dial = w.relay.dial(end, { address: "mc1:443", random: 4n });
    assert.ok(dial);
    w.relay.cancelDial(dial);
    assert.equal(w.relay.waitingCount(), 0);
    assert.equal(w.relay.pendingCount(), 0);
    assert.equal(w.clock.armed, 0, "its timer is cleared");
    const mc1 = w.connect("mc1");
    assert.deepEqual(w.dialReqs(mc1.call), [], "not sent when the agent arrives");
    assert.equal(await w.waited("cancelled"), 1);
  });

  test("drain releases every waiting dial at once as draining; stop as shutting down", async () => {
    const w = world();
    const a = w.dial("mc1:443", 1n);
    const b = w.dial("mc2:443", 2n);
    w.relay.startDraining();
    for (const e of [a, b]) {
      assert.equal(e.failure?.kind, "draining");
      assert.equal(e.failure?.text, DialErrors.serverDraining);
    }
    assert.equal(w.relay.waitingCount(), 0);
    assert.ok(w.relay.idle(), "nothing holds the drain");
    assert.equal(await w.waited("released"), 2);

    const s = world();
    const c = s.dial("mc1:443", 3n);
    s.relay.stopDialing();
    assert.equal(c.failure?.kind, "shutdown");
    assert.equal(s.relay.waitingCount(), 0);
    assert.equal(s.clock.armed, 0);
  });
});
