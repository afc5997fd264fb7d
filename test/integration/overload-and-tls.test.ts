/**
 * Issue 18 in-process: a server under a handshake backlog makes connections wait and succeed
 * rather than fail, sheds past its bound with a signal the agent reads as "back off"; and TLS or
 * configuration mistakes produce messages that name the certificate, CA, port or flag at fault, on
 * both sides. A real ProxyServer, real ProxyAgents and the client SDK, all on loopback.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ProxyAgent, validateAgentOptions } from "@cluster-proxy/agent";
import {
  ConfigError,
  agentOptionsSchema,
  resolveOptions,
  serverOptionsSchema,
  type AgentOptions,
  type ServerOptions,
  parseServerOptions,
} from "@cluster-proxy/api";
import { TunnelClient, dialConnect } from "@cluster-proxy/client";
import {
  createCertificateAuthority,
  issueCertificate,
  writeStandaloneCerts,
  type StandaloneCertPaths,
} from "@cluster-proxy/pki";
import { HandshakeFailureLog, ProxyServer, SHED_ALERT, SLOT_MS } from "@cluster-proxy/server";
import { connectSession, serverIsShedding, TlsFileError } from "@cluster-proxy/tunnel";
import { silentLogger, type Logger } from "@cluster-proxy/kit";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { captureClientHello } from "@cluster-proxy/tunnel/testing";
import { waitFor } from "../framework/waits.js";

/** A logger that keeps warnings (message and fields). */
function recordingLogger(): Logger & { warnings: { msg: string; obj: Record<string, unknown> }[] } {
  const warnings: { msg: string; obj: Record<string, unknown> }[] = [];
  const logger: Logger & { warnings: typeof warnings } = {
    ...silentLogger,
    warnings,
    warn: (obj, msg) => void warnings.push({ msg: msg ?? "", obj }),
    child: () => logger,
  };
  return logger;
}

let dir: string;
let certs: StandaloneCertPaths;
let stranger: { cert: string; key: string; ca: string };

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "cp-overload-"));
  certs = await writeStandaloneCerts(dir, { clusters: ["east"], validityDays: 2 });
  const ca = await createCertificateAuthority({ commonName: "stranger-ca", validityDays: 2 });
  const leaf = await issueCertificate(ca, { commonName: "stranger", usage: "client", validityDays: 2 });
  stranger = { cert: join(dir, "stranger.crt"), key: join(dir, "stranger.key"), ca: join(dir, "stranger-ca.crt") };
  writeFileSync(stranger.cert, leaf.certPem);
  writeFileSync(stranger.key, leaf.keyPem);
  writeFileSync(stranger.ca, ca.certPem);
});
after(() => rmSync(dir, { recursive: true, force: true }));

function serverOptions(flags: Record<string, string> = {}): ServerOptions {
  return resolveOptions(serverOptionsSchema, {
    "server-port": "0",
    "server-bind-address": "127.0.0.1",
    "agent-port": "0",
    "agent-bind-address": "127.0.0.1",
    "health-port": "0",
    "health-bind-address": "127.0.0.1",
    "admin-port": "0",
    mode: "both",
    "http-connect-port": "0",
    "http-connect-bind-address": "127.0.0.1",
    "server-cert": certs.server.cert,
    "server-key": certs.server.key,
    "server-ca-cert": certs.clientCa.cert,
    "cluster-cert": certs.server.cert,
    "cluster-key": certs.server.key,
    "cluster-ca-cert": certs.agentCa.cert,
    "proxy-strategies": "destHost",
    ...flags,
  });
}

function agentOptions(port: number, flags: Record<string, string> = {}): AgentOptions {
  const east = certs.agents.get("east")!;
  return resolveOptions(agentOptionsSchema, {
    "proxy-server-host": "127.0.0.1",
    "proxy-server-port": String(port),
    "ca-cert": certs.ca.cert,
    "agent-cert": east.cert,
    "agent-key": east.key,
    "cluster-name": "east",
    "health-server-port": "0",
    "admin-server-port": "0",
    "sync-interval": "100ms",
    "sync-interval-cap": "4s",
    "cert-reload-interval": "0",
    ...flags,
  });
}

const portOf = (a: net.AddressInfo | string | undefined): number => (a as net.AddressInfo).port;

/**
 * A TCP connection that sends a ClientHello and then nothing: its TLS handshake holds a pacer slot
 * (up to SLOT_MS) until destroyed. (A connection that sends nothing at all holds no slot.)
 */
async function stalledHandshake(port: number): Promise<net.Socket> {
  const s = net.connect(port, "127.0.0.1");
  s.on("error", () => undefined);
  await new Promise<void>((resolve, reject) => s.once("connect", resolve).once("error", reject));
  s.write(await captureClientHello());
  return s;
}

/** Start an agent and resolve with its first warning whose fields match `pick`. */
async function firstWarning(
  options: AgentOptions,
  pick: (w: { msg: string; obj: Record<string, unknown> }) => boolean = () => true,
): Promise<{ msg: string; obj: Record<string, unknown> }> {
  const log = recordingLogger();
  const agent = new ProxyAgent(options, { logger: log });
  try {
    await agent.start();
    let found: { msg: string; obj: Record<string, unknown> } | undefined;
    await waitFor("an agent warning", () => (found = log.warnings.find(pick)) !== undefined, 20_000);
    return found!;
  } finally {
    await agent.close();
  }
}

describe("overload: handshakes are paced, waiting connections succeed later, shedding makes agents back off", () => {
  test("a connection queued behind a busy handshake slot waits past its connect deadline and then succeeds; a peer that stalls after its ClientHello holds a slot only briefly", async () => {
    const server = new ProxyServer(serverOptions({ "max-concurrent-handshakes": "1", "max-pending-handshakes": "5" }));
    await server.start();
    const port = portOf(server.addresses().agent);
    const blocker = await stalledHandshake(port);
    try {
      const east = certs.agents.get("east")!;
      const started = Date.now();
      const session = connectSession({
        host: "127.0.0.1",
        port,
        tls: { ca: readText(certs.ca.cert), cert: readText(east.cert), key: readText(east.key) },
        timeoutMs: 1_000,
        handshakeTimeoutMs: 30_000,
      });
      // It waits in the queue (visible in the server's metrics)...
      const waiting = async (): Promise<boolean> =>
        /cluster_proxy_server_tls_handshakes_waiting\{port="agent-port"\} 1/.test(
          await server.metrics.registry.metrics(),
        );
      await waitFor("the connection to wait for its handshake", waiting, 10_000);
      // ...longer than its connect deadline (1 s), which stopped counting once the server accepted,
      // until the stalled blocker's slot expires (SLOT_MS): then it succeeds, the blocker still open.
      const s = await session;
      const tookMs = Date.now() - started;
      assert.ok(tookMs >= 1_000, `waited ${tookMs} ms, past its 1 s connect deadline, without failing`);
      assert.ok(tookMs < SLOT_MS + 8_000, `a stalled peer held the only slot for ${tookMs} ms`);
      assert.equal(blocker.destroyed, false);
      s.destroy();
    } finally {
      blocker.destroy();
      await server.close();
    }
  });

  test("past --max-pending-handshakes the server sheds with a TLS alert; the SDK says overloaded, the agent backs off by --sync-interval-cap", async () => {
    const log = recordingLogger();
    const server = new ProxyServer(serverOptions({ "max-concurrent-handshakes": "1", "max-pending-handshakes": "0" }), {
      logger: log,
    });
    await server.start();
    const port = portOf(server.addresses().agent);
    const blocker = await stalledHandshake(port);
    try {
      const err = await connectSession({
        host: "127.0.0.1",
        port,
        tls: { ca: readText(certs.ca.cert), servername: "localhost" },
        timeoutMs: 5_000,
      }).then(
        () => assert.fail("a shed connection must not succeed"),
        (e: Error) => e,
      );
      assert.ok(serverIsShedding(err), `shedding recognised: ${err.message}`);
      assert.match(err.message, /overloaded and shed the connection/);
      assert.ok(
        log.warnings.some((w) => /shedding new connections/.test(w.msg)),
        "the server says it sheds",
      );
      assert.match(
        await server.metrics.registry.metrics(),
        /cluster_proxy_server_tls_handshakes_shed_total\{port="agent-port"\} [1-9]/,
      );

      // The agent's side, against a server that sheds every connection (the pacer's alert).
      const shedding = net.createServer((c) => {
        c.on("error", () => undefined);
        c.once("data", () => c.end(SHED_ALERT));
      });
      await new Promise<void>((resolve) => shedding.listen(0, "127.0.0.1", resolve));
      const warning = await firstWarning(
        agentOptions(portOf(shedding.address() ?? undefined)),
        (w) => w.obj.overloaded === true,
      ).finally(() => shedding.close());
      assert.match(warning.msg, /overloaded/);
      const retryInMs = Number(warning.obj.retryInMs);
      assert.ok(
        retryInMs >= 2_000 && retryInMs <= 4_000,
        `backs off by half to all of --sync-interval-cap (4s): ${retryInMs} ms`,
      );
    } finally {
      blocker.destroy();
      await server.close();
    }
  });
});

describe("diagnosable TLS and configuration failures", () => {
  let server: ProxyServer;
  const serverLog = recordingLogger();
  before(async () => {
    server = new ProxyServer(serverOptions(), { logger: serverLog });
    await server.start();
  });
  after(() => server.close());

  /** The server's warnings about rejected handshakes logged since `from`. */
  const rejections = (from: number): string[] =>
    serverLog.warnings
      .slice(from)
      .filter((w) => /rejected a TLS handshake/.test(w.msg))
      .map((w) => w.msg);

  test("agent with a certificate from another CA: the agent names --agent-cert and the server's CA; the server logs unknown CA", async () => {
    const from = serverLog.warnings.length;
    const w = await firstWarning(
      agentOptions(portOf(server.addresses().agent), { "agent-cert": stranger.cert, "agent-key": stranger.key }),
    );
    assert.match(String(w.obj.err), /refused --agent-cert \(not signed by the server's --cluster-ca-cert/);
    assert.doesNotMatch(String(w.obj.err), /^cancelled$/);
    await waitFor("the server's rejection log", () => rejections(from).length > 0);
    assert.match(rejections(from)[0]!, /client certificate not signed by --cluster-ca-cert \(unknown CA/);
  });

  // The server cannot log this one for a node client: node checks the server's certificate after
  // OpenSSL's handshake and just closes (no alert); Go clients send an alert, logged as "the
  // client does not trust --cluster-cert".
  test("agent whose --ca-cert is not the server's CA: the message names --ca-cert", async () => {
    const w = await firstWarning(agentOptions(portOf(server.addresses().agent), { "ca-cert": stranger.ca }));
    assert.match(String(w.obj.err), /not signed by --ca-cert/);
  });

  test("agent pointed at a plaintext port: wrong port or protocol", async () => {
    const w = await firstWarning(agentOptions(portOf(server.addresses().health)));
    assert.match(String(w.obj.err), /wrong port or protocol/);
  });

  test("agent certificate at a client front door: the SDK names proxy.cert, the server says agent certificate at a client door", async () => {
    const from = serverLog.warnings.length;
    const east = certs.agents.get("east")!;
    const client = new TunnelClient({
      proxy: {
        host: "127.0.0.1",
        port: portOf(server.addresses().server),
        ca: readText(certs.ca.cert),
        cert: readText(east.cert),
        key: readText(east.key),
      },
      dialTimeoutMs: 10_000,
    });
    try {
      const err = await client.dial("east:443").then(
        () => assert.fail("the dial must fail"),
        (e: Error) => e,
      );
      assert.match(err.message, /refused proxy\.cert/);
      assert.doesNotMatch(err.message, /stream reset|^cancelled/);
    } finally {
      await client.close();
    }
    await waitFor("the server's rejection log", () => rejections(from).length > 0);
    assert.match(rejections(from)[0]!, /--server-ca-cert .*agent certificate .* at a client front door/);
  });

  test("SDK without a client certificate: 'requires a client certificate: set proxy.cert and proxy.key'", async () => {
    const client = new TunnelClient({
      proxy: {
        host: "127.0.0.1",
        port: portOf(server.addresses().server),
        ca: readText(certs.ca.cert),
      },
      dialTimeoutMs: 10_000,
    });
    try {
      const err = await client.dial("east:443").then(
        () => assert.fail("the dial must fail"),
        (e: Error) => e,
      );
      assert.match(err.message, /requires a client certificate: set proxy\.cert and proxy\.key/);
    } finally {
      await client.close();
    }
  });

  test("plaintext HTTP CONNECT to the TLS CONNECT port: wrong port or protocol", async () => {
    const err = await dialConnect("east:443", {
      proxy: { host: "127.0.0.1", port: portOf(server.addresses().httpConnect) },
      timeoutMs: 10_000,
    }).then(
      () => assert.fail("the dial must fail"),
      (e: Error) => e,
    );
    assert.match(err.message, /wrong port or protocol/);
  });

  test("the server's handshake warnings are rate-limited, and say how many were held back", () => {
    const log = recordingLogger();
    const clock = new ManualClock();
    const limited = new HandshakeFailureLog(log, 3, 10_000, clock);
    const port = { port: "--agent-port", clientCa: "--cluster-ca-cert", cert: "--cluster-cert", front: false };
    const err = Object.assign(new Error("bad"), { code: "ERR_SSL_PEER_DID_NOT_RETURN_A_CERTIFICATE" });
    for (let i = 0; i < 10; i++) limited.failed(err, undefined, port);
    assert.equal(log.warnings.length, 3);
    clock.advance(10_000);
    limited.failed(err, undefined, port);
    assert.equal(log.warnings.length, 4);
    assert.equal(log.warnings[3]!.obj.suppressedBefore, 7);
    assert.match(log.warnings[0]!.msg, /the client sent no certificate/);
  });

  test("a PEM file that is not what its flag needs is refused at start-up, naming the flag", async () => {
    for (const [flag, path] of [
      ["server-ca-cert", certs.server.key],
      ["cluster-ca-cert", join(dir, "empty.pem")],
      ["cluster-key", certs.server.cert],
    ] as const) {
      writeFileSync(join(dir, "empty.pem"), "not a certificate\n");
      const s = new ProxyServer(serverOptions({ [flag]: path }));
      await assert.rejects(
        s.start(),
        (e: Error) =>
          e instanceof TlsFileError && e.flag === `--${flag}` && e.message.startsWith(`--${flag}: ${path}: `),
      );
    }
    const agent = new ProxyAgent(agentOptions(1, { "ca-cert": certs.server.key }));
    await assert.rejects(agent.start(), (e: Error) => e instanceof TlsFileError && e.message.startsWith("--ca-cert:"));
    await agent.close();
  });

  test("all missing required flags are reported at once", () => {
    assert.throws(
      () =>
        parseServerOptions({
          ...serverOptions(),
          clusterCert: "",
          clusterKey: "",
          clusterCaCert: "",
          serverCaCert: "",
        }),
      (e: Error) =>
        e instanceof ConfigError &&
        /4 problems/.test(e.message) &&
        ["--cluster-cert", "--cluster-key", "--cluster-ca-cert", "--server-ca-cert"].every((f) =>
          e.message.includes(`${f}:`),
        ),
    );
    // (changed copies of valid option sets: the flag helpers validate, a copy is validated again)
    assert.throws(
      () => validateAgentOptions({ ...agentOptions(1), caCert: "", proxyServerHost: "", proxyServerPort: 0 }),
      (e: Error) =>
        e instanceof ConfigError &&
        e.message.includes("--ca-cert:") &&
        e.message.includes("--proxy-server-host:") &&
        e.message.includes("--proxy-server-port:"),
    );
  });
});

function readText(path: string): string {
  return readFileSync(path, "utf8");
}
