/**
 * The error catalog across every package (the CLI depends on all of them): each user-visible
 * error class is a ClusterProxyError whose code is in the catalog and names it; the CLI maps
 * every code to an exit status; a port conflict keeps the listen error as its cause all the way
 * to the exit status and message; the generated references match the catalog.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { ClusterProxyError, ConfigError, ErrorCodes, errorCatalogEntries, serverOptionSpecs } from "@cluster-proxy/api";
import { KubeApiError } from "@cluster-proxy/kube";
import { DestinationRefusedError } from "@cluster-proxy/agent";
import { HttpConnectError } from "@cluster-proxy/client";
import { CertificateError, SingleCaLayoutError } from "@cluster-proxy/pki";
import { IdentifiersError, PacketDecodeError, decodePacket, parseAgentIdentifiers } from "@cluster-proxy/protocol";
import { AgentAuthError } from "@cluster-proxy/server";
import {
  ConnectError,
  DialError,
  ProtocolError,
  ProxyConnectError,
  TlsFileError,
  TunnelClosedError,
} from "@cluster-proxy/tunnel";
import { CommandFailure } from "./cli-context.js";
import {
  ERRORS_BEGIN,
  ERRORS_END,
  ERROR_REFERENCE_PATH,
  ERROR_TABLE_PATH,
  errorReferenceMarkdown,
  replaceErrorReference,
} from "./reference/error-reference.js";
import { EXIT_FAILURE, EXIT_STATUS_BY_CODE, EXIT_USAGE, exitStatusOf } from "./exit-status.js";
import { PortInUseError, portConflictMessage } from "./up/port-conflicts.js";
import { runCaptured } from "./testing/capture.js";

/** One instance of every user-visible error class, by class name. */
function oneOfEach(): Map<string, ClusterProxyError> {
  const errors: ClusterProxyError[] = [
    new ConfigError("--x: bad"),
    new CommandFailure("step failed"),
    new PortInUseError("port 1 is already in use"),
    new DialError("no agent", "endpoint"),
    new HttpConnectError(403, "Forbidden", "refused"),
    new TunnelClosedError("cut"),
    new ProtocolError("bad packet"),
    new ConnectError("unreachable"),
    new ProxyConnectError("proxy refused"),
    new PacketDecodeError("garbage"),
    new IdentifiersError("bad identifiers"),
    new AgentAuthError("token not valid"),
    new DestinationRefusedError("dial to x:1 refused by the agent's destination policy (allowed: none)"),
    new TlsFileError("--cert", "/nonexistent", "cannot read"),
    new CertificateError("bad certificate"),
    new SingleCaLayoutError("/nonexistent"),
    new KubeApiError(404, "NotFound", "not found"),
  ];
  return new Map(errors.map((e) => [e.name, e]));
}

describe("error catalog across the packages", () => {
  test("every user-visible error is a ClusterProxyError whose catalog entry names its class", () => {
    const byClass = oneOfEach();
    for (const [name, err] of byClass) {
      assert.ok(err instanceof ClusterProxyError, `${name} extends ClusterProxyError`);
      const entry = errorCatalogEntries.find((e) => e.code === err.code);
      assert.ok(entry, `${name}: code ${err.code} is in the catalog`);
      assert.ok(entry.raisedBy.includes(name), `${entry.code} lists ${name} in raisedBy`);
    }
    // ... and every class the catalog names exists (entries without a class say what reports them).
    for (const entry of errorCatalogEntries)
      for (const raiser of entry.raisedBy.filter((r) => /^[A-Z]\w+$/.test(r)))
        assert.equal(byClass.get(raiser)?.code, entry.code, `${raiser} carries ${entry.code}`);
  });

  test("errors raised by the code, not only constructed, carry their codes", () => {
    assert.throws(() => parseAgentIdentifiers("host=%zz"), { code: ErrorCodes.agentIdentifiers });
    assert.throws(() => decodePacket(Buffer.from([0xff, 0xff, 0xff])), { code: ErrorCodes.packetDecode });
  });
});

describe("exit statuses", () => {
  test("every code has one: 2 for usage and configuration, 1 for failures while running", () => {
    for (const entry of errorCatalogEntries) assert.ok(entry.code in EXIT_STATUS_BY_CODE, entry.code);
    assert.equal(Object.keys(EXIT_STATUS_BY_CODE).length, errorCatalogEntries.length);
    assert.equal(exitStatusOf(new ConfigError("--x: bad")), EXIT_USAGE);
    assert.equal(EXIT_STATUS_BY_CODE.CP_ERR_USAGE, EXIT_USAGE);
    assert.equal(exitStatusOf(new CommandFailure("failed")), EXIT_FAILURE);
    assert.equal(exitStatusOf(new PortInUseError("taken")), EXIT_FAILURE);
    assert.equal(exitStatusOf(new KubeApiError(403, "Forbidden", "forbidden")), EXIT_FAILURE);
    assert.equal(exitStatusOf(new Error("anything else")), EXIT_FAILURE);
    assert.equal(exitStatusOf("not even an error"), EXIT_FAILURE);
    // The wrapper decides: a command failure around a configuration error is a failure.
    assert.equal(exitStatusOf(new CommandFailure("x", { cause: new ConfigError("y") })), EXIT_FAILURE);
  });

  test("runCli exits with the status of the error's code", async () => {
    const { code, err } = await runCaptured(["health", "--output", "yaml2"]);
    assert.deepEqual(
      { code, err },
      {
        code: 2,
        err: 'cluster-proxy health: --output: "yaml2" is not one of table, wide, json, yaml\n',
      },
    );
    assert.equal((await runCaptured(["server", "--no-such-flag"])).code, 2);
  });
});

describe("cause through a proxy-server start failure", () => {
  let dir: string;
  let blocker: net.Server;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cp-cli-errors-"));
    blocker = net.createServer().listen(0, "127.0.0.1");
    await EventEmitter.once(blocker, "listening");
  });
  after(async () => {
    blocker.close();
    await rm(dir, { recursive: true, force: true });
  });

  test("a busy --server-port ends `server` naming the port and its flag, exit status 1", async () => {
    const certs = join(dir, "certs");
    const written = await runCaptured(["certs", "--dir", certs]);
    assert.equal(written.code, 0, written.err);
    const taken = (blocker.address() as net.AddressInfo).port;
    const options = {
      serverPort: taken,
      serverBindAddress: "127.0.0.1",
      agentPort: 0,
      agentBindAddress: "127.0.0.1",
      healthPort: 0,
      healthBindAddress: "127.0.0.1",
      adminPort: 0,
      adminBindAddress: "127.0.0.1",
    };
    const flags = Object.entries({
      ...options,
      serverCert: join(certs, "server.crt"),
      serverKey: join(certs, "server.key"),
      serverCaCert: join(certs, "client-ca.crt"),
      clusterCert: join(certs, "server.crt"),
      clusterKey: join(certs, "server.key"),
      clusterCaCert: join(certs, "agent-ca.crt"),
    }).map(([key, value]) => `--${serverOptionSpecs.find((s) => s.key === key)!.flag}=${value}`);
    const { code, err } = await runCaptured(["server", ...flags]);
    assert.equal(code, 1, err);
    assert.equal(
      err,
      `cluster-proxy server: port ${taken} (--server-port) on 127.0.0.1 is already in use: free it or choose another with --server-port\n`,
    );
    // The conflict is found through the cause, not by parsing the message.
    const wrapped = new ConfigError(`--server-port: cannot listen on 127.0.0.1:${taken}: in use`, {
      cause: Object.assign(new Error("in use"), { code: "EADDRINUSE", port: taken, address: "127.0.0.1" }),
    });
    assert.equal(
      portConflictMessage(wrapped, serverOptionSpecs, { serverPort: taken }),
      `port ${taken} (--server-port) on 127.0.0.1 is already in use: free it or choose another with --server-port`,
    );
    assert.equal(
      portConflictMessage(new ConfigError(wrapped.message), serverOptionSpecs, { serverPort: taken }),
      undefined,
    );
  });
});

describe("generated error reference", () => {
  test("the troubleshooting guide's error table and the error reference match the catalog (run npm run docs:flags)", async () => {
    const root = new URL("../../../", import.meta.url);
    const guide = await readFile(fileURLToPath(new URL(ERROR_TABLE_PATH, root)), "utf8");
    assert.equal(replaceErrorReference(guide), guide, `${ERROR_TABLE_PATH}'s error table is stale`);
    const reference = await readFile(fileURLToPath(new URL(ERROR_REFERENCE_PATH, root)), "utf8");
    assert.equal(reference, errorReferenceMarkdown(), `${ERROR_REFERENCE_PATH} is stale`);
  });

  test("documents every code, and the table every code still raised", () => {
    const reference = errorReferenceMarkdown();
    const table = replaceErrorReference(`${ERRORS_BEGIN}\n${ERRORS_END}\n`);
    for (const entry of errorCatalogEntries) {
      assert.ok(reference.includes(`## \`${entry.code}\``), entry.code);
      assert.ok(reference.includes(entry.summary), entry.code);
      if (entry.fix) assert.ok(reference.includes(entry.fix), entry.code);
      assert.equal(table.includes(`| \`${entry.code}\` |`), !entry.deprecated, entry.code);
    }
  });
});
