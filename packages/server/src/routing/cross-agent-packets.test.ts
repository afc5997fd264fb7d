/**
 * A hostile agent (of another cluster, or a replica of the victim's) sends the packets an
 * agent ends connections with (CLOSE_RSP, DIAL_RSP with an error or a connection, DIAL_CLS, DATA)
 * naming the connectID and random of connections and dials it does not own: none of them reaches
 * the client of another agent's connection or dial, which go on as if nothing was sent.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { PacketType, type Packet } from "@cluster-proxy/protocol";
import type { ConnectTarget } from "@cluster-proxy/tunnel";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { ProxyServer } from "../proxy-server.js";
import { connectFakeAgent, connectFakeClient, type FakePeer } from "../testing/fake-peers.js";
import { testServerOptions } from "../testing/server-options.js";
import { tcpPort } from "@cluster-proxy/tunnel/testing";

function expectType<T extends Packet["type"]>(p: Packet, type: T): Extract<Packet, { type: T }> {
  assert.equal(p.type, type, `expected packet type ${type}, got ${p.type}`);
  return p as Extract<Packet, { type: T }>;
}

/** The forged packets, for the victim's established connection `connectID` and pending dial `random`. */
const forgeries: [string, (connectID: bigint, random: bigint) => Packet][] = [
  ["CLOSE_RSP", (connectID) => ({ type: PacketType.CLOSE_RSP, closeResponse: { connectID, error: "" } })],
  [
    "CLOSE_RSP with an error",
    (connectID) => ({ type: PacketType.CLOSE_RSP, closeResponse: { connectID, error: "stalled" } }),
  ],
  [
    "DIAL_RSP with an error",
    (_c, random) => ({ type: PacketType.DIAL_RSP, dialResponse: { random, connectID: 0n, error: "refused" } }),
  ],
  [
    "DIAL_RSP with the victim's connectID",
    (connectID, random) => ({ type: PacketType.DIAL_RSP, dialResponse: { random, connectID, error: "" } }),
  ],
  ["DIAL_CLS", (_c, random) => ({ type: PacketType.DIAL_CLS, closeDial: { random } })],
  ["DATA", (connectID) => ({ type: PacketType.DATA, data: { connectID, error: "", data: Buffer.from("forged") } })],
];

describe("a hostile agent's packets for connections and dials of another agent", () => {
  let pki: TestPki;
  let server: ProxyServer;
  let agentTarget: ConnectTarget;
  let clientTarget: ConnectTarget;
  const peers: FakePeer[] = [];
  let east: FakePeer;
  let next = 0x4000_0000_0000_0000n;

  before(async () => {
    pki = await createTestPki();
    server = new ProxyServer(testServerOptions(pki));
    await server.start();
    agentTarget = {
      host: "127.0.0.1",
      port: tcpPort(server.addresses().agent),
      tls: { ca: pki.ca, cert: pki.agentCert, key: pki.agentKey },
    };
    clientTarget = {
      host: "127.0.0.1",
      port: tcpPort(server.addresses().server),
      tls: { ca: pki.ca, cert: pki.clientCert, key: pki.clientKey },
    };
    east = await connectFakeAgent(agentTarget, { agentid: "agent-east", agentidentifiers: "host=east" });
    peers.push(east);
    await east.call.waitForHeaders();
  });

  after(async () => {
    for (const p of peers) p.close();
    await server.close();
    pki.cleanup();
  });

  const attackers: [string, string][] = [
    ["another cluster's agent", "host=west"],
    ["a replica of the victim's cluster (connected after the victim's dials were routed)", "host=east"],
  ];
  for (const [who, identifiers] of attackers)
    for (const [what, forge] of forgeries)
      test(`${who} sends ${what}: the victim's connection and dial go on`, async () => {
        // The victim: an established connection and a pending dial, both through east.
        const a = await connectFakeClient(clientTarget);
        const b = await connectFakeClient(clientTarget);
        peers.push(a, b);
        const ra = ++next;
        const rb = ++next;
        const connectID = next;
        a.packets.send({
          type: PacketType.DIAL_REQ,
          dialRequest: { protocol: "tcp", address: "east:443", random: ra },
        });
        expectType(await east.packets.next(), PacketType.DIAL_REQ);
        east.packets.send({ type: PacketType.DIAL_RSP, dialResponse: { random: ra, connectID, error: "" } });
        expectType(await a.packets.next(), PacketType.DIAL_RSP);
        b.packets.send({
          type: PacketType.DIAL_REQ,
          dialRequest: { protocol: "tcp", address: "east:443", random: rb },
        });
        expectType(await east.packets.next(), PacketType.DIAL_REQ);

        const hostile = await connectFakeAgent(agentTarget, {
          agentid: `agent-hostile-${++next}`,
          agentidentifiers: identifiers,
        });
        peers.push(hostile);
        await hostile.call.waitForHeaders();
        hostile.packets.send(forge(connectID, rb));
        // The relay reads one stream in order: its answer to a DATA for a connection it never had
        // (CLOSE_REQ) tells that the forgery was read before the victim's agent answers.
        const marker = 0xdeadn;
        hostile.packets.send({ type: PacketType.DATA, data: { connectID: marker, error: "", data: Buffer.from("?") } });
        for (;;) {
          const p = await hostile.packets.next();
          if (p.type === PacketType.CLOSE_REQ && expectType(p, PacketType.CLOSE_REQ).closeRequest.connectID === marker)
            break;
        }

        // The pending dial is answered by its own agent only.
        east.packets.send({
          type: PacketType.DIAL_RSP,
          dialResponse: { random: rb, connectID: connectID + 1n, error: "" },
        });
        const rsp = expectType(await b.packets.next(), PacketType.DIAL_RSP);
        assert.deepEqual(rsp.dialResponse, { random: rb, connectID: connectID + 1n, error: "" });
        // The established connection carries data both ways, and the first packet its client
        // receives is its agent's, not the forgery.
        a.packets.send({ type: PacketType.DATA, data: { connectID, error: "", data: Buffer.from("ping") } });
        const up = expectType(await east.packets.next(), PacketType.DATA);
        assert.equal(Buffer.from(up.data.data).toString(), "ping");
        east.packets.send({ type: PacketType.DATA, data: { connectID, error: "", data: Buffer.from("pong") } });
        const down = expectType(await a.packets.next(), PacketType.DATA);
        assert.equal(Buffer.from(down.data.data).toString(), "pong");

        // Clean up: both connections closed by their agent, the hostile stream gone.
        for (const [c, id] of [
          [a, connectID],
          [b, connectID + 1n],
        ] as const) {
          c.packets.send({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: id } });
          expectType(await east.packets.next(), PacketType.CLOSE_REQ);
          east.packets.send({ type: PacketType.CLOSE_RSP, closeResponse: { connectID: id, error: "" } });
          expectType(await c.packets.next(), PacketType.CLOSE_RSP);
          c.close();
        }
        hostile.close();
        // The next variant's dials must find east alone.
        for (let i = 0; server.backendCount() > 1; i++) {
          assert.ok(i < 500, "the hostile agent's stream was not removed");
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      });
});
