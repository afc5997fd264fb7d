/**
 * An endpoint that completes its TLS handshake but never sends its HTTP/2 SETTINGS: its session
 * is given up when the pool's clock (a ManualClock here) passes the SETTINGS deadline, not before.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as net from "node:net";
import * as tls from "node:tls";
import { test } from "node:test";
import { agentClusterUri, createCertificateAuthority, issueCertificate } from "@cluster-proxy/pki";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { ClusterSessions, SETTINGS_TIMEOUT_MS } from "./cluster-pool.js";

test("a session whose endpoint sends no SETTINGS ends at the deadline of the injected clock", async () => {
  const gatewayCa = await createCertificateAuthority({ commonName: "gateway-ca", validityDays: 1 });
  const agentCa = await createCertificateAuthority({ commonName: "agent-ca", validityDays: 1 });
  const agent = await issueCertificate(agentCa, {
    commonName: "agent",
    uris: [agentClusterUri("mc1")],
    usage: "both",
    validityDays: 1,
  });
  const identity = await issueCertificate(gatewayCa, { commonName: "gateway", usage: "client", validityDays: 1 });
  // Speaks TLS (ALPN h2), then says nothing.
  const held: tls.TLSSocket[] = [];
  const mute = tls.createServer(
    {
      cert: agent.certPem,
      key: agent.keyPem,
      ca: gatewayCa.certPem,
      requestCert: true,
      rejectUnauthorized: true,
      ALPNProtocols: ["h2"],
    },
    (socket) => {
      held.push(socket);
      socket.on("error", () => undefined);
    },
  );
  mute.listen(0, "127.0.0.1");
  await once(mute, "listening");
  const port = (mute.address() as net.AddressInfo).port;
  const clock = new ManualClock();
  const sessions = new ClusterSessions(
    "mc1",
    () => {
      const socket = net.connect(port, "127.0.0.1");
      return once(socket, "connect").then(() => socket);
    },
    { cert: Buffer.from(identity.certPem), key: Buffer.from(identity.keyPem), ca: Buffer.from(agentCa.certPem) },
    1,
    clock,
  );
  try {
    const stream = await sessions.request({ ":method": "GET", ":path": "/" }, true);
    const errors: Error[] = [];
    stream.on("error", (err: Error) => errors.push(err));
    const closed = new Promise<void>((resolve) => stream.once("close", resolve));
    assert.equal(clock.armed, 1, "the SETTINGS deadline is armed on the injected clock");
    clock.advance(SETTINGS_TIMEOUT_MS - 1);
    await new Promise((r) => setImmediate(r));
    assert.equal(stream.closed, false, "not before the deadline");
    assert.equal(sessions.sessionCount, 1);
    clock.advance(1);
    await closed;
    assert.match(errors[0]?.message ?? "", /sent no HTTP\/2 SETTINGS within 10000 ms/);
    for (let i = 0; i < 20 && sessions.sessionCount > 0; i++) await new Promise((r) => setImmediate(r));
    assert.equal(sessions.sessionCount, 0, "the session is given up");
    assert.equal(clock.armed, 0);
  } finally {
    sessions.destroy();
    for (const s of held) s.destroy();
    mute.close();
  }
});
