import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  ClusterProxyError,
  ConfigError,
  ERROR_CATALOG,
  ErrorCodes,
  errorCatalogEntries,
  isClusterProxyError,
} from "./index.js";

describe("error catalog", () => {
  test("every code is unique, CP_ERR_ and upper case, and ErrorCodes names each entry", () => {
    const codes = errorCatalogEntries.map((e) => e.code);
    assert.equal(new Set(codes).size, codes.length, `duplicate codes: ${codes.join(", ")}`);
    for (const code of codes) assert.match(code, /^CP_ERR_[A-Z][A-Z0-9_]*$/);
    assert.deepEqual(
      Object.entries(ErrorCodes),
      Object.entries(ERROR_CATALOG).map(([name, e]) => [name, e.code]),
    );
  });

  test("every entry is documented: a one-line summary, who raises it, and no stray whitespace", () => {
    for (const e of errorCatalogEntries) {
      for (const text of [e.summary, e.fix ?? "Ok.", e.deprecated ?? "ok"]) {
        assert.ok(text.length > 0 && !text.includes("\n") && text.trim() === text, `${e.code}: ${text}`);
      }
      assert.match(e.summary, /\.$/, `${e.code}: the summary is a sentence`);
      if (e.fix !== undefined) assert.match(e.fix, /\.$/, `${e.code}: the fix is a sentence`);
      if (!e.deprecated) assert.ok(e.raisedBy.length > 0, `${e.code}: say what raises it`);
    }
  });

  test("the codes callers match on today keep their strings", () => {
    assert.equal(ErrorCodes.dialFailed, "CP_ERR_DIAL_FAILED");
    assert.equal(ErrorCodes.tunnelClosed, "CP_ERR_TUNNEL_CLOSED");
    assert.equal(ErrorCodes.protocol, "CP_ERR_PROTOCOL");
    assert.equal(ErrorCodes.connect, "CP_ERR_CONNECT");
    assert.equal(ErrorCodes.config, "CP_ERR_CONFIG");
    assert.equal(ErrorCodes.timeout, "CP_ERR_TIMEOUT");
    assert.equal(ErrorCodes.packetDecode, "CP_ERR_PACKET_DECODE");
    assert.equal(ErrorCodes.agentIdentifiers, "CP_ERR_AGENT_IDENTIFIERS");
    assert.equal(ErrorCodes.destinationRefused, "CP_ERR_DESTINATION_REFUSED");
    assert.equal(ErrorCodes.proxy, "CP_ERR_PROXY");
    assert.equal(ErrorCodes.tlsFile, "CP_ERR_TLS_FILE");
    assert.equal(ErrorCodes.certificate, "CP_ERR_CERTIFICATE");
    assert.equal(ErrorCodes.kubeApi, "CP_ERR_KUBE_API");
    assert.equal(ErrorCodes.command, "CP_ERR_COMMAND");
  });

  test("ClusterProxyError carries its code and keeps its cause", () => {
    const cause = Object.assign(new Error("listen EADDRINUSE"), { code: "EADDRINUSE" });
    const err = new ConfigError("--server-port: cannot listen", { cause });
    assert.ok(err instanceof ClusterProxyError && err instanceof Error);
    assert.ok(isClusterProxyError(err));
    assert.equal(err.code, "CP_ERR_CONFIG");
    assert.equal(err.name, "ConfigError");
    assert.equal(err.cause, cause);
    assert.ok(!isClusterProxyError(cause));
  });
});
