/** Per-cluster traffic counted by the relay (cluster-traffic.ts) and the server's own probe dial (probe-dial.ts). */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { PacketType, encodeData, type AgentIdentifiers } from "@cluster-proxy/protocol";
import { FRAME_HEADER, sealFrame } from "@cluster-proxy/tunnel";
import { silentLogger } from "@cluster-proxy/kit";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { Backend } from "../agents/backend.js";
import { MAX_TALLIED_IDENTIFIERS, TrafficTally } from "./cluster-traffic.js";
import { IDLE_METRICS_SOURCE, ServerMetrics } from "../metrics.js";
import { probeDial } from "../front-doors/probe-dial.js";
import { CLOSING_LINGER_MS, Relay, packetFrame } from "./relay.js";
import { FakeCall } from "../testing/fake-call.js";
import { RecordingEnd } from "../testing/recording-end.js";

const ids = (...host: string[]): AgentIdentifiers => ({ host, cidr: [], ipv4: [], ipv6: [], defaultRoute: false });

function setup(dialTimeoutMs = 0, clock?: ManualClock) {
  const relay = new Relay({
    clock,
    strategies: ["destHost"],
    backendDialTimeoutMs: dialTimeoutMs,
    logger: silentLogger,
    metrics: new ServerMetrics(IDLE_METRICS_SOURCE),
  });
  const connect = (agentId: string, identifiers: AgentIdentifiers): { backend: Backend; call: FakeCall } => {
    const call = new FakeCall();
    const backend = new Backend(agentId, identifiers, call.asServerCall());
    relay.addBackend(backend);
    return { backend, call };
  };
  let random = 1n;
  /** Dial `address`; the agent answers with `connectID` (or `error`). */
  const dial = (backend: Backend | undefined, address: string, connectID: bigint, error = ""): RecordingEnd => {
    const end = new RecordingEnd();
    const r = random++;
    relay.dial(end, { address, random: r });
    if (backend)
      relay.fromAgent(
        backend,
        packetFrame({ type: PacketType.DIAL_RSP, dialResponse: { random: r, connectID, error } }),
      );
    return end;
  };
  const traffic = (id: string) => relay.traffic.snapshot().get(id);
  return { relay, connect, dial, traffic };
}

const data = (id: bigint, n: number): Buffer => sealFrame(encodeData(id, Buffer.alloc(n, 1), FRAME_HEADER));

describe("per-cluster traffic", () => {
  test("dials, bytes each way and open connections are counted per host identifier", () => {
    const { relay, connect, dial, traffic } = setup();
    const { backend } = connect("a-east", ids("east", "east.ns"));
    connect("a-west", ids("west"));
    const end = dial(backend, "east:80", 7n);
    assert.ok(end.conn);
    const up = data(7n, 100);
    const down = data(7n, 1000);
    relay.toAgent(end.conn, up, PacketType.DATA, Infinity);
    relay.fromAgent(backend, down);
    relay.fromAgent(backend, down);
    const want = {
      dials: 1,
      failedDials: 0,
      bytesToAgent: up.length,
      bytesFromAgent: 2 * down.length,
      openConnections: 1,
    };
    assert.deepEqual(traffic("east"), want);
    assert.deepEqual(traffic("east.ns"), want, "every host identifier of the agent counts");
    assert.deepEqual(traffic("west"), {
      dials: 0,
      failedDials: 0,
      bytesToAgent: 0,
      bytesFromAgent: 0,
      openConnections: 0,
    });

    relay.fromAgent(backend, packetFrame({ type: PacketType.CLOSE_RSP, closeResponse: { connectID: 7n, error: "" } }));
    assert.equal(traffic("east")?.openConnections, 0);
    assert.equal(traffic("east")?.dials, 1);
  });

  test("the snapshot is a copy", () => {
    const { connect, dial, traffic } = setup();
    const { backend } = connect("a", ids("east"));
    const before = traffic("east");
    dial(backend, "east:80", 1n);
    assert.equal(before?.dials, 0);
    assert.equal(traffic("east")?.dials, 1);
  });

  test("failed dials: the agent's error, the agent gone, no agent for a cluster seen before (also <host>.<cluster>)", () => {
    const { relay, connect, dial, traffic } = setup();
    const { backend, call } = connect("a", ids("east"));
    assert.ok(dial(backend, "east:81", 0n, "connection refused").failure);
    const waiting = dial(undefined, "east:80", 0n);
    relay.removeBackend(backend, "gone");
    assert.equal(waiting.failure?.kind, "agent_gone");
    // No agent now: the cluster seen before is named (also for <host>.<cluster>); a name no agent
    // ever announced keeps Go's text.
    const now = dial(undefined, "east:80", 0n).failure;
    assert.equal(now?.kind, "no_agent");
    assert.equal(now.cluster, "east");
    assert.match(
      now.text,
      /^No agent available for cluster east: no agent of cluster east is connected to this proxy-server now/,
    );
    assert.equal(dial(undefined, "svc.ns.east:443", 0n).failure?.cluster, "east");
    const nowhere = dial(undefined, "nowhere:80", 0n).failure;
    assert.equal(nowhere?.text, "No agent available");
    assert.equal(nowhere.cluster, undefined);
    assert.equal(traffic("east")?.failedDials, 4);
    assert.equal(traffic("nowhere"), undefined, "a name no agent announced gets no counters");
    assert.equal(call.closed, false);
  });

  test("a reconnecting agent continues its cluster's counters", () => {
    const { relay, connect, dial, traffic } = setup();
    const first = connect("a", ids("east")).backend;
    dial(first, "east:80", 1n);
    relay.removeBackend(first, "restart");
    assert.equal(traffic("east")?.openConnections, 0, "its connections closed with it");
    const second = connect("a", ids("east")).backend;
    dial(second, "east:80", 1n);
    assert.equal(traffic("east")?.dials, 2);
    assert.equal(traffic("east")?.openConnections, 1);
  });

  test("a client that gives up, and a shutdown, are not failures of the cluster", () => {
    const { relay, connect, traffic } = setup();
    const { backend } = connect("a", ids("east"));
    const given = relay.dial(new RecordingEnd(), { address: "east:80", random: 100n });
    assert.ok(given);
    relay.cancelDial(given);
    relay.dial(new RecordingEnd(), { address: "east:80", random: 101n });
    relay.stopDialing();
    assert.equal(traffic("east")?.failedDials, 0);
    assert.equal(backend.pending.size, 0);
  });

  test("identifiers beyond the cap get no counters", () => {
    const tally = new TrafficTally();
    for (let i = 0; i < MAX_TALLIED_IDENTIFIERS; i++) assert.equal(tally.forHosts([`c${i}`]).length, 1);
    assert.deepEqual(tally.forHosts(["one-more"]), []);
    assert.equal(tally.forHosts(["c1"]).length, 1, "known ones still count");
    assert.equal(tally.snapshot().size, MAX_TALLIED_IDENTIFIERS);
  });
});

describe("the relay's timers, on its clock", () => {
  test("a dial the agent does not answer fails at the dial timeout, not before", () => {
    const clock = new ManualClock();
    const { relay, connect } = setup(100, clock);
    connect("a", ids("east"));
    const waiting = new RecordingEnd();
    relay.dial(waiting, { address: "east:80", random: 1n });
    clock.advance(99);
    assert.equal(waiting.failure?.kind, undefined);
    assert.equal(relay.pendingCount(), 1);
    clock.advance(1);
    assert.equal(waiting.failure?.kind, "timeout");
    assert.equal(relay.pendingCount(), 0);
  });

  test("a connection the frontend closed is forgotten after the closing linger without CLOSE_RSP", () => {
    const clock = new ManualClock();
    const { relay, connect, dial } = setup(0, clock);
    const { backend } = connect("a", ids("east"));
    const end = dial(backend, "east:80", 7n);
    assert.ok(end.conn);
    relay.frontendClosed(end.conn);
    assert.equal(relay.establishedCount(), 1, "waits for the agent's CLOSE_RSP");
    clock.advance(CLOSING_LINGER_MS);
    assert.equal(relay.establishedCount(), 0);
  });
});

describe("the server's probe dial", () => {
  test("answers with the round trip, closes the connection at once and is not counted", async () => {
    const { relay, connect, traffic } = setup();
    const { backend, call } = connect("a", ids("east"));
    const probing = probeDial(relay, "east:80", 5_000);
    const req = call.packets().find((p) => p.type === PacketType.DIAL_REQ);
    assert.ok(req);
    relay.fromAgent(
      backend,
      packetFrame({ type: PacketType.DIAL_RSP, dialResponse: { random: req.random, connectID: 9n, error: "" } }),
    );
    const result = await probing;
    assert.ok(result.ok);
    assert.ok(result.ms >= 0);
    assert.deepEqual(
      call
        .packets()
        .filter((p) => p.type === PacketType.CLOSE_REQ)
        .map((p) => p.connectID),
      [9n],
      "the agent is told to close the probe's connection",
    );
    relay.fromAgent(backend, data(9n, 10)); // late data for the closed probe: dropped, not counted
    assert.deepEqual(traffic("east"), {
      dials: 0,
      failedDials: 0,
      bytesToAgent: 0,
      bytesFromAgent: 0,
      openConnections: 0,
    });
  });

  test("says why it failed: no agent, the agent's error, no answer in time", async () => {
    const clock = new ManualClock();
    const { relay, connect, traffic } = setup(0, clock);
    const { backend, call } = connect("a", ids("east"));
    relay.removeBackend(backend, "gone");
    assert.deepEqual(await probeDial(relay, "east:80", 5_000), {
      ok: false,
      reason:
        "No agent available for cluster east: no agent of cluster east is connected to this proxy-server now (one was before: its link went down, or it left)",
    });
    const again = connect("a", ids("east"));
    const refused = probeDial(relay, "east:80", 5_000);
    const req = again.call.packets().find((p) => p.type === PacketType.DIAL_REQ);
    assert.ok(req);
    relay.fromAgent(
      again.backend,
      packetFrame({ type: PacketType.DIAL_RSP, dialResponse: { random: req.random, connectID: 0n, error: "refused" } }),
    );
    assert.deepEqual(await refused, { ok: false, reason: "refused" });
    const late = probeDial(relay, "east:80", 20);
    clock.advance(20);
    assert.deepEqual(await late, { ok: false, reason: "no answer within 20 ms" });
    assert.ok(
      again.call.packets().some((p) => p.type === PacketType.DIAL_CLS),
      "the agent is told the probe gave up",
    );
    assert.equal(traffic("east")?.failedDials, 0);
    assert.equal(call.sent.length, 0);
  });
});
