import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { agentOptionSpecs } from "./agent-options.js";
import { GO_AGENT_FLAGS, GO_SERVER_FLAGS, type GoFlag } from "./go-flags.js";
import { ConfigError, flagValues, goFlagStatus, type OptionSpec } from "./options.js";
import { serverOptionSpecs } from "./server-options.js";
import { agentAlpnProtocols, tlsProfileOptions } from "./tls-profile.js";

/** The value a Go flag's default has when written on a command line. */
function goDefaultArg(g: GoFlag): string {
  if (g.default !== "") return g.default;
  if (g.type === "bool") return "false";
  if (g.type === "duration") return "0s";
  if (g.type === "int" || g.type === "float32" || g.type === "uint") return "0";
  return "";
}

for (const [component, goFlags, specs] of [
  ["proxy-server", GO_SERVER_FLAGS, serverOptionSpecs],
  ["proxy-agent", GO_AGENT_FLAGS, agentOptionSpecs],
] as const) {
  describe(`every flag of the Go ${component}`, () => {
    const byFlag = new Map<string, OptionSpec>(specs.map((s) => [s.flag, s]));

    test("is in our schema: the same, accepted with a note, or refused unless default", () => {
      const missing = goFlags.filter((g) => !byFlag.has(g.flag)).map((g) => g.flag);
      assert.deepEqual(missing, []);
      for (const g of goFlags) {
        const status = goFlagStatus(byFlag.get(g.flag)!);
        assert.notEqual(status, "ours", `--${g.flag} is a Go flag but marked as ours`);
      }
    });

    test("only Go flags claim a Go status", () => {
      const goNames = new Set(goFlags.map((g) => g.flag));
      const claims = specs.filter((s) => goFlagStatus(s) !== "ours" && !goNames.has(s.flag)).map((s) => s.flag);
      assert.deepEqual(claims, []);
    });

    test("has Go's default: passing the Go default explicitly changes nothing", () => {
      const defaults = flagValues(specs, {}, {});
      for (const g of goFlags) {
        const spec = byFlag.get(g.flag)!;
        const given = flagValues(specs, { [g.flag]: goDefaultArg(g) }, {});
        assert.deepEqual(given[spec.key], defaults[spec.key], `--${g.flag}=${goDefaultArg(g)}`);
      }
    });

    test("a refused flag names itself and says why when set to anything but its default", () => {
      for (const spec of specs.filter((s) => s.unsupported)) {
        const other = spec.kind === "boolean" ? String(spec.default !== true) : "something-else";
        assert.throws(
          () => flagValues(specs, { [spec.flag]: other }, {}),
          (err: Error) =>
            err instanceof ConfigError &&
            err.message.startsWith(`--${spec.flag}: not supported by cluster-proxy`) &&
            err.message.includes(spec.unsupported!),
        );
      }
    });
  });
}

describe("TLS profile flags", () => {
  test("Go cipher names map to OpenSSL names; TLS 1.3 names are kept as defaults", () => {
    const p = tlsProfileOptions(["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"], "VersionTLS12");
    assert.equal(p.minVersion, "TLSv1.2");
    assert.ok(p.ciphers?.endsWith(":ECDHE-RSA-AES128-GCM-SHA256"));
    assert.ok(p.ciphers?.startsWith("TLS_AES_128_GCM_SHA256:"));
    assert.deepEqual(tlsProfileOptions([], ""), { minVersion: "TLSv1.2" });
    assert.equal(tlsProfileOptions([], "VersionTLS13").minVersion, "TLSv1.3");
  });

  test("unknown or insecure names and versions are refused naming the flag", () => {
    assert.throws(
      () => tlsProfileOptions(["TLS_RSA_WITH_AES_128_GCM_SHA256"]),
      /^ConfigError: --cipher-suites: "TLS_RSA/,
    );
    assert.throws(() => tlsProfileOptions([], "TLS1.2"), /^ConfigError: --tls-min-version: "TLS1.2" is not one of/);
    assert.throws(() => tlsProfileOptions(["TLS_AES_128_GCM_SHA256"], ""), /--cipher-suites: lists only TLS 1.3/);
  });

  test("--alpn-proto protocols come before h2", () => {
    assert.deepEqual(agentAlpnProtocols(["konnectivity"]), ["konnectivity", "h2"]);
    assert.deepEqual(agentAlpnProtocols([]), ["h2"]);
    assert.deepEqual(agentAlpnProtocols(["h2", "x"]), ["h2", "x"]);
  });
});
