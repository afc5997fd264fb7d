/**
 * TLS 1.3 session resumption on the proxy-server's TLS ports (issue 41): tickets on every door,
 * keys shared by replicas through the key file and rotated with one period of grace, bounded
 * lifetime, the same identity checks on a resumed session as on a full handshake, and doors that
 * never resume each other's sessions.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import * as tls from "node:tls";
import type { ServerOptions } from "@cluster-proxy/api";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { TlsSessionCache, sharedSecureContexts, tlsSessionKey, type ConnectTarget } from "@cluster-proxy/tunnel";
import { tcpPort, waitUntil } from "@cluster-proxy/tunnel/testing";
import { ProxyServer, type ProxyServerDeps } from "./proxy-server.js";
import { formatTicketKeyFile } from "./listeners/ticket-keys.js";
import { testServerOptions } from "./testing/server-options.js";
import { connectFakeAgent, type FakePeer } from "./testing/fake-peers.js";
import { realClock } from "@cluster-proxy/kit";

interface Handshake {
  reused: boolean;
  /** The newest ticket the server sent (the first one arrives with the handshake's last flight). */
  ticket: Buffer | undefined;
  /** Whether the server kept the connection open after the handshake. */
  open: boolean;
}

/**
 * One TLS connection to `p` offering `session`, held until a ticket arrived (a full handshake;
 * OpenSSL sends none after a resumption, the client keeps using its ticket) or the server closed
 * it (bounded), then closed.
 */
function handshake(p: number, options: tls.ConnectionOptions, session?: Buffer): Promise<Handshake> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({
      host: "127.0.0.1",
      port: p,
      servername: "localhost",
      ALPNProtocols: ["h2"],
      ...options,
      ...(session ? { session } : {}),
    });
    let ticket: Buffer | undefined;
    let reused = false;
    let secure = false;
    const finish = (open: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ reused, ticket, open });
    };
    const timer = setTimeout(() => finish(!socket.destroyed), 5_000);
    socket.on("session", (s: Buffer) => {
      ticket = s;
      if (secure) finish(true);
    });
    socket.once("secureConnect", () => {
      secure = true;
      reused = socket.isSessionReused();
      // Still open a moment later: a refused resumption is closed at once by the server.
      if (reused) setImmediate(() => setImmediate(() => finish(!socket.destroyed)));
      else if (ticket) finish(true);
    });
    socket.on("error", (err: Error) => {
      if (!secure) {
        clearTimeout(timer);
        reject(err);
      }
    });
    socket.once("close", () => {
      if (secure) finish(false);
    });
  });
}

async function metric(s: ProxyServer, port: string, kind: string): Promise<number> {
  const text = await s.metrics.registry.metrics();
  const m = text.match(
    new RegExp(`cluster_proxy_server_tls_handshakes_total\\{port="${port}",kind="${kind}"\\} (\\d+)`),
  );
  return m ? Number(m[1]) : 0;
}

describe("TLS session resumption", () => {
  let pki: TestPki;
  const servers: ProxyServer[] = [];
  const peers: FakePeer[] = [];
  let clientTls: tls.ConnectionOptions;
  let agentTls: tls.ConnectionOptions;

  before(async () => {
    pki = await createTestPki();
    clientTls = { ca: pki.ca, cert: pki.clientCert, key: pki.clientKey };
    agentTls = { ca: pki.ca, cert: pki.agentCert, key: pki.agentKey };
  });

  after(async () => {
    for (const p of peers) p.close();
    await Promise.all(servers.map((s) => s.close()));
    pki.cleanup();
  });

  const start = async (overrides: Partial<ServerOptions> = {}, deps: ProxyServerDeps = {}): Promise<ProxyServer> => {
    const s = new ProxyServer(testServerOptions(pki, overrides), deps);
    servers.push(s);
    await s.start();
    return s;
  };
  let keyFiles = 0;
  const keyFile = (keys: Buffer[], path = join(pki.dir, `ticket-keys-${++keyFiles}`)): string => {
    writeFileSync(path, formatTicketKeyFile(keys));
    return path;
  };
  const agentTarget = (s: ProxyServer, sessions: TlsSessionCache): ConnectTarget => ({
    host: "127.0.0.1",
    port: tcpPort(s.addresses().agent),
    tls: agentTls,
    sessions,
  });

  /** Whether agent "x" of east, offering the session of `sessions`, is refused (closed, or failed to connect). */
  const refusedAgent = (s: ProxyServer, sessions: TlsSessionCache): Promise<boolean> =>
    connectFakeAgent(agentTarget(s, sessions), { agentid: "x", agentidentifiers: "host=east" }).then(
      async (peer) => {
        peers.push(peer);
        return (await peer.packets.closed(10_000)).code !== 0;
      },
      () => true,
    );

  test("a resumed agent session is attributed to the cluster its certificate grants", async () => {
    const s = await start({ agentIdentity: "certificate" });
    const sessions = new TlsSessionCache();
    const first = await connectFakeAgent(agentTarget(s, sessions), { agentid: "a1", agentidentifiers: "host=east" });
    peers.push(first);
    await waitUntil("the agent and its ticket", () => s.backendCount() === 1 && sessions.size === 1);
    first.close();
    await waitUntil("the agent gone", () => s.backendCount() === 0);

    const second = await connectFakeAgent(agentTarget(s, sessions), { agentid: "a1", agentidentifiers: "host=east" });
    peers.push(second);
    await waitUntil("the resumed agent", () => s.backendCount() === 1);
    assert.equal(sessions.stats.resumed, 1, "the second connection resumed the first one's session");
    assert.equal(await metric(s, "agent-port", "resumed"), 1);
    assert.equal(s.agentsByIdentifier().get("east"), 1, "the resumed agent serves the cluster its certificate grants");
    // A claim the certificate does not grant is refused on a resumed session as on a full one.
    const sneaky = await connectFakeAgent(agentTarget(s, sessions), {
      agentid: "a2",
      agentidentifiers: "host=elsewhere",
    });
    peers.push(sneaky);
    const status = await sneaky.packets.closed(10_000);
    assert.equal(status.code, 7, "PERMISSION_DENIED");
    assert.equal(sessions.stats.resumed, 2);
    second.close();
  });

  test("a ticket issued by one replica resumes at another with the same key file, not at one with its own keys", async () => {
    const file = keyFile([randomBytes(48)]);
    const a = await start({ tlsSessionTicketKeyFile: file });
    const b = await start({ tlsSessionTicketKeyFile: file, serverId: "replica-b" });
    const loner = await start({ serverId: "replica-c" });
    const fromA = await handshake(tcpPort(a.addresses().server), clientTls);
    assert.ok(fromA.ticket, "replica A sent a ticket");
    const atB = await handshake(tcpPort(b.addresses().server), clientTls, fromA.ticket);
    assert.equal(atB.reused, true, "replica B resumed replica A's session");
    assert.equal(atB.open, true);
    assert.equal(await metric(b, "server-port", "resumed"), 1);
    const atLoner = await handshake(tcpPort(loner.addresses().server), clientTls, fromA.ticket);
    assert.equal(atLoner.reused, false, "a server with other keys falls back to a full handshake");
    assert.equal(atLoner.open, true);
  });

  test("a rotated-out key still resumes for one rotation period, then is refused", async () => {
    const [k1, k2, k3] = [randomBytes(48), randomBytes(48), randomBytes(48)];
    const file = keyFile([k1]);
    const s = await start({ tlsSessionTicketKeyFile: file });
    const p = tcpPort(s.addresses().httpConnect);
    const old = await handshake(p, { ...clientTls, ALPNProtocols: ["http/1.1"] });
    assert.ok(old.ticket);
    keyFile([k2, k1], file);
    assert.equal(await s.reloadTicketKeys(), "reloaded");
    const duringGrace = await handshake(p, { ...clientTls, ALPNProtocols: ["http/1.1"] }, old.ticket);
    assert.equal(duringGrace.reused, true, "a ticket of the previous key resumes during its period");
    const fresh = await handshake(p, { ...clientTls, ALPNProtocols: ["http/1.1"] });
    assert.equal(fresh.reused, false);
    keyFile([k3, k2], file);
    assert.equal(await s.reloadTicketKeys(), "reloaded");
    const afterGrace = await handshake(p, { ...clientTls, ALPNProtocols: ["http/1.1"] }, old.ticket);
    assert.equal(afterGrace.reused, false, "a ticket of a key out of the file is refused: full handshake");
    assert.equal(afterGrace.open, true);
    const ofK2 = await handshake(p, { ...clientTls, ALPNProtocols: ["http/1.1"] }, fresh.ticket);
    assert.equal(ofK2.reused, true, "the key that just became the previous one still resumes");
    // A bad file is refused and the keys in use stay.
    writeFileSync(file, "not a key\n");
    assert.equal(await s.reloadTicketKeys(), "failed");
    assert.equal((await handshake(p, { ...clientTls, ALPNProtocols: ["http/1.1"] }, fresh.ticket)).reused, true);
  });

  test("a ticket past --tls-session-ticket-lifetime falls back to a full handshake", async () => {
    const s = await start({ tlsSessionTicketLifetime: 1_000 });
    const p = tcpPort(s.addresses().server);
    const first = await handshake(p, clientTls);
    assert.ok(first.ticket);
    const young = await handshake(p, clientTls, first.ticket);
    assert.equal(young.reused, true, "a ticket within its lifetime resumes");
    // OpenSSL checks a ticket's age against its own clock, in whole seconds: no clock to inject.
    await new Promise((resolve) => setTimeout(resolve, 2_200));
    const aged = await handshake(p, clientTls, first.ticket);
    assert.equal(aged.reused, false, "an aged ticket is refused");
    assert.equal(aged.open, true, "and the full handshake goes on");
  });

  test("a resumed session whose client certificate has expired since is refused; the next connection is a full handshake", async () => {
    let offset = 0;
    const s = await start(
      { agentIdentity: "certificate" },
      { clock: { ...realClock, now: () => Date.now() + offset } },
    );
    const sessions = new TlsSessionCache();
    const first = await connectFakeAgent(agentTarget(s, sessions), { agentid: "x", agentidentifiers: "host=east" });
    await waitUntil("the agent and its ticket", () => s.backendCount() === 1 && sessions.size === 1);
    first.close();
    // The test PKI's agent certificate is valid for 2 days.
    offset = 3 * 86_400_000;
    const refused = await refusedAgent(s, sessions);
    assert.equal(refused, true, "the resumed connection is closed");
    assert.equal(await metric(s, "agent-port", "resumed_refused"), 1);
    assert.equal(sessions.size, 0, "the refused session is dropped");
    offset = 0;
    const again = await connectFakeAgent(agentTarget(s, sessions), { agentid: "x", agentidentifiers: "host=east" });
    peers.push(again);
    await waitUntil("the agent after a full handshake", () => s.agentsByIdentifier().get("east") === 1);
    assert.equal(sessions.stats.resumed, 1, "only the refused attempt resumed; the next one was a full handshake");
  });

  test("after a CA leaves the CA file, its certificates' tickets do not resume (full handshake, refused), at the agent port and the client doors", async () => {
    // Copies of the CA files the server trusts, which the test replaces as an operator would.
    const agentCaFile = join(pki.dir, "trusted-agent-ca.crt");
    const clientCaFile = join(pki.dir, "trusted-client-ca.crt");
    writeFileSync(agentCaFile, pki.agentCa);
    writeFileSync(clientCaFile, pki.clientCa);
    const s = await start({ agentIdentity: "certificate", clusterCaCert: agentCaFile, serverCaCert: clientCaFile });
    const sessions = new TlsSessionCache();
    const first = await connectFakeAgent(agentTarget(s, sessions), { agentid: "x", agentidentifiers: "host=east" });
    await waitUntil("the agent and its ticket", () => s.backendCount() === 1 && sessions.size === 1);
    first.close();
    await waitUntil("the agent gone", () => s.backendCount() === 0);
    const front = tcpPort(s.addresses().server);
    const client = await handshake(front, clientTls);
    assert.ok(client.ticket);
    assert.equal((await handshake(front, clientTls, client.ticket)).reused, true, "resumes while its CA is trusted");
    // A CA added to the file: the tickets of before get one full handshake, which still passes.
    writeFileSync(clientCaFile, Buffer.concat([pki.clientCa, pki.ca]));
    assert.deepEqual(await s.reloadCertificates(), ["unchanged", "reloaded"]);
    const widened = await handshake(front, clientTls, client.ticket);
    assert.deepEqual([widened.reused, widened.open], [false, true]);
    assert.ok(widened.ticket);
    assert.equal((await handshake(front, clientTls, widened.ticket)).reused, true, "the new ticket resumes");

    // Each file now trusts only the other CA: neither certificate chains to what is trusted.
    writeFileSync(agentCaFile, pki.clientCa);
    writeFileSync(clientCaFile, pki.agentCa);
    assert.deepEqual(await s.reloadCertificates(), ["reloaded", "reloaded"]);
    const atFront = await handshake(front, clientTls, widened.ticket).catch(() => ({ reused: false, open: false }));
    assert.deepEqual([atFront.reused, atFront.open], [false, false], "a full handshake, which refused the certificate");
    const agentAgain = await refusedAgent(s, sessions);
    assert.equal(agentAgain, true, "the agent's connection is refused");
    assert.equal(sessions.stats.resumed, 0, "its ticket did not resume");
    assert.equal(s.backendCount(), 0, "no agent of an untrusted CA serves a cluster");
    assert.equal(await metric(s, "server-port", "resumed"), 2, "only the resumptions while the CA was trusted");
    assert.equal(await metric(s, "agent-port", "resumed"), 0);
  });

  test("a proxy-client certificate's session never resumes at the agent port", async () => {
    const s = await start();
    const front = tcpPort(s.addresses().server);
    const agentPort = tcpPort(s.addresses().agent);
    const client = await handshake(front, clientTls);
    assert.ok(client.ticket);
    assert.equal((await handshake(front, clientTls, client.ticket)).reused, true, "it resumes at its own door");
    const connect = await handshake(
      tcpPort(s.addresses().httpConnect),
      { ...clientTls, ALPNProtocols: ["http/1.1"] },
      client.ticket,
    );
    assert.equal(connect.reused, false, "nor at the other client door");
    // Offered at the agent port: a full handshake, which refuses the client certificate.
    const atAgent = await handshake(agentPort, clientTls, client.ticket).catch(() => ({ reused: false, open: false }));
    assert.equal(atAgent.reused, false);
    assert.equal(atAgent.open, false, "the agent port refused the proxy-client certificate");
    // Through the SDK's session cache too: nothing reaches the agent service.
    const sessions = new TlsSessionCache();
    const key = tlsSessionKey(`127.0.0.1:${agentPort}`, sharedSecureContexts.withContext(clientTls));
    assert.ok(key !== undefined);
    sessions.set(key, client.ticket);
    const peer = await connectFakeAgent(
      { host: "127.0.0.1", port: agentPort, tls: clientTls, sessions },
      { agentid: "impostor", agentidentifiers: "host=east" },
    ).catch(() => undefined);
    if (peer) {
      peers.push(peer);
      await peer.packets.closed(10_000).catch(() => undefined);
    }
    assert.equal(sessions.stats.offered, 1, "the client's ticket was offered at the agent port");
    assert.equal(s.backendCount(), 0);
    assert.equal(await metric(s, "agent-port", "resumed"), 0);
  });

  test("--tls-session-ticket-lifetime=0 turns resumption off", async () => {
    const s = await start({ tlsSessionTicketLifetime: 0 });
    const p = tcpPort(s.addresses().server);
    const first = await handshake(p, clientTls);
    // (OpenSSL still sends a stateful TLS 1.3 ticket, which only a server-side cache could resume.)
    const second = await handshake(p, clientTls, first.ticket);
    assert.equal(second.reused, false, "no session resumes");
    assert.equal(await metric(s, "server-port", "full"), 2);
    assert.equal(await metric(s, "server-port", "resumed"), 0);
  });
});
