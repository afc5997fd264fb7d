import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { parseAddonManagerOptions, addonManagerOptionSpecs } from "./addon-manager-options.js";
import { agentOptionSpecs, agentOptionsSchema, parseAgentOptions } from "./agent-options.js";
import { certsOptionSpecs, parseCertsOptions, parseUpOptions, upOptionSpecs } from "./command-options.js";
import { ConfigError, flagValues } from "./options.js";
import { gatewayOptionsSchema } from "./gateway-options.js";
import { argsFor, defineOptions, opt, parseOptions, resolveOptions, rules } from "./option-schema.js";
import {
  parseServerOptions,
  serverOptionSpecs,
  serverOptionsSchema,
  type ServerOptionsInput,
} from "./server-options.js";

/** The minimal valid server: agent port certificates and CA, front door certificates and CA. */
const SERVER: ServerOptionsInput = {
  clusterCert: "/s.crt",
  clusterKey: "/s.key",
  clusterCaCert: "/agent-ca.crt",
  serverCert: "/s.crt",
  serverKey: "/s.key",
  serverCaCert: "/client-ca.crt",
};

/** {@link SERVER} as flags. */
const SERVER_FLAGS = {
  "cluster-cert": "/s.crt",
  "cluster-key": "/s.key",
  "cluster-ca-cert": "/agent-ca.crt",
  "server-cert": "/s.crt",
  "server-key": "/s.key",
  "server-ca-cert": "/client-ca.crt",
} as const;

function problems(fn: () => unknown): string[] {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    assert.equal(err.code, "CP_ERR_CONFIG");
    const lines = err.message.split("\n");
    return lines.length === 1 ? lines : lines.slice(1).map((l) => l.trim());
  }
  return [];
}

describe("schema defaults", () => {
  test("the defaults live in the schema: parsing nothing gives the flag table's defaults", () => {
    for (const [specs, parse] of [
      [serverOptionSpecs, () => parseServerOptions(SERVER)],
      [agentOptionSpecs, () => parseAgentOptions({ caCert: "/ca.crt" })],
      [addonManagerOptionSpecs, () => parseAddonManagerOptions({})],
      [certsOptionSpecs, () => parseCertsOptions({ dir: "/d" })],
      [upOptionSpecs, () => parseUpOptions({})],
    ] as const) {
      const parsed: Record<string, unknown> = parse();
      for (const spec of specs) {
        if (spec.key in SERVER || spec.key === "caCert" || spec.key === "dir") continue;
        assert.deepEqual(parsed[spec.key], spec.default, `--${spec.flag}`);
      }
      // and flagValues (the flag layer) fills in the same defaults
      const resolved = flagValues(specs, {}, {});
      for (const spec of specs) assert.deepEqual(resolved[spec.key], spec.default, `--${spec.flag}`);
    }
  });

  test("defaults that used to be constants beside the code", () => {
    const server = parseServerOptions(SERVER);
    assert.equal(server.maxConcurrentHandshakes, 16);
    assert.equal(server.maxPendingHandshakes, 20_000);
    assert.equal(server.keepaliveTimeout, 10_000);
    assert.equal(server.certReloadInterval, 10_000);
    assert.deepEqual(server.agentIdentityNamespaces, ["open-cluster-management-agent-addon"]);
    assert.deepEqual(server.cipherSuites, []);
    const agent = parseAgentOptions({ caCert: "/ca.crt" });
    assert.equal(agent.handshakeTimeout, 60_000);
    assert.equal(agent.certReloadInterval, 10_000);
    assert.equal(agent.logFileMaxSize, 1800);
  });

  test("a list default is a fresh copy each time", () => {
    const a = parseServerOptions(SERVER);
    a.proxyStrategies.push("destHost");
    assert.deepEqual(parseServerOptions(SERVER).proxyStrategies, ["default"]);
  });

  test("a required value left out is refused like one given empty (defaults pass the rules)", () => {
    assert.deepEqual(
      problems(() => parseAgentOptions({})),
      ["--ca-cert: is required (the CA the proxy server's certificate chains to)"],
    );
    assert.deepEqual(
      problems(() => parseCertsOptions({})),
      ["--dir: required (the directory to write the certificates to)"],
    );
  });
});

describe("rules", () => {
  test("every problem at once, each naming its flag: field rules and cross-field rules", () => {
    const found = problems(() =>
      parseAgentOptions({
        caCert: "",
        proxyServerPort: 0,
        clusterName: "East_1",
        agentCert: "/a.crt",
        syncInterval: 2000,
        syncIntervalCap: 1000,
      }),
    );
    assert.equal(found.length, 5, found.join("\n"));
    for (const flag of ["ca-cert", "proxy-server-port", "cluster-name", "agent-key", "sync-interval-cap"])
      assert.ok(
        found.some((p) => p.startsWith(`--${flag}: `)),
        `--${flag} in ${found.join(" / ")}`,
      );
    assert.ok(found.includes("--sync-interval-cap: must not be below --sync-interval"));
    assert.ok(found.includes("--agent-key: --agent-cert and --agent-key must be given together"));
  });

  test("server cross-field rules (moved from the server package) keep their texts", () => {
    assert.deepEqual(
      problems(() => parseServerOptions({ ...SERVER, clusterCaCert: "", agentNamespace: "ns" })),
      [
        "--agent-service-account: cannot be empty when agent token authentication is enabled",
        "--authentication-audience: cannot be empty when agent token authentication is enabled",
      ],
    );
    assert.deepEqual(
      problems(() => parseServerOptions({ ...SERVER, mode: "both", httpConnectPlain: true })),
      [
        "--http-connect-plain: plain HTTP CONNECT is only allowed on a loopback address, but --http-connect-port binds to all addresses (set --http-connect-bind-address=127.0.0.1, or use a Unix socket)",
      ],
    );
    assert.deepEqual(
      problems(() => parseServerOptions({ ...SERVER, proxyStrategies: ["destHost", "destHost", "x"] })),
      [
        '--proxy-strategies: "destHost" is listed twice',
        '--proxy-strategies: "x" is not one of destHost, default, defaultRoute',
      ],
    );
    assert.deepEqual(
      problems(() => parseServerOptions({ ...SERVER, enableContentionProfiling: true })),
      ["--enable-contention-profiling: needs --enable-profiling, as in Go"],
    );
    assert.deepEqual(
      problems(() => parseServerOptions({ ...SERVER, cipherSuites: ["TLS_RSA_WITH_RC4_128_SHA"] })),
      [
        '--cipher-suites: "TLS_RSA_WITH_RC4_128_SHA" is not a supported cipher suite (Go crypto/tls names of secure suites, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256; insecure suites such as TLS_RSA_* are refused)',
      ],
    );
  });

  test("a choice names its values", () => {
    assert.deepEqual(
      problems(() => parseServerOptions({ ...SERVER, mode: "udp" as "grpc" })),
      ['--mode: "udp" is not one of grpc, http-connect, both'],
    );
  });

  test("the flag layer reports every bad flag at once too", () => {
    assert.deepEqual(
      problems(() => flagValues(serverOptionSpecs, { "server-port": "x", "keepalive-time": "soon", bogus: "1" }, {})),
      [
        "--bogus: unknown flag",
        '--server-port: "x" is not a port number (0-65535)',
        '--keepalive-time: "soon" is not a duration (use e.g. 500ms, 10s, 1m, 1h)',
      ],
    );
  });

  test("an optional option is undefined when left out; given, its type and rules apply", () => {
    const schema = defineOptions({
      file: opt.optional(opt.path("", { flag: "file", description: "a file" }, rules.nonEmpty())),
      port: opt.optional(opt.port(0, { flag: "port", description: "a port" }, rules.port(false))),
    });
    const none = resolveOptions(schema, {}, {});
    assert.deepEqual(none, { file: undefined, port: undefined });
    assert.deepEqual(resolveOptions(schema, { file: "f", port: "80" }, {}), { file: "f", port: 80 });
    assert.deepEqual(
      problems(() => parseOptions(schema, { file: "", port: 0 })),
      ["--file: must not be empty", "--port: 0 is not a port number (1-65535)"],
    );
    assert.equal(schema.specs[0]!.default, undefined);
  });

  test("a flag with a bare value takes it when given without one; others need a value", () => {
    const schema = defineOptions({
      route: opt.optional(opt.string("", { flag: "route", description: "a route", bareValue: "aggregated" })),
      name: opt.string("", { flag: "name", description: "a name" }),
    });
    assert.equal(resolveOptions(schema, { route: true }, {}).route, "aggregated");
    assert.equal(resolveOptions(schema, { route: "direct" }, {}).route, "direct");
    assert.deepEqual(
      problems(() => resolveOptions(schema, { name: true }, {})),
      ["--name: needs a value"],
    );
  });

  test("addon manager: --install-placement is <namespace>/<name>", () => {
    assert.equal(parseAddonManagerOptions({ installPlacement: "ns/all" }).installPlacement, "ns/all");
    assert.deepEqual(
      problems(() => parseAddonManagerOptions({ installPlacement: "all" })),
      ['--install-placement: "all" is not <namespace>/<name> of a Placement'],
    );
  });

  test("certs and up: cluster names by the one rule, ca reserved, --update with --force", () => {
    assert.deepEqual(
      problems(() => parseCertsOptions({ dir: "/d", cluster: ["east", "ca"], update: true, force: true })),
      [
        '--cluster: "ca" is reserved (agent-ca.crt in the certificate directory is the agent CA)',
        "--update: cannot be combined with --force",
      ],
    );
    assert.match(
      problems(() => parseUpOptions({ clusters: ["east", "prod.east"] }))[0]!,
      /^--clusters: cluster name "prod\.east" is invalid/,
    );
    assert.deepEqual(
      problems(() => parseUpOptions({ clusters: [] })),
      ["--clusters: give at least one cluster name"],
    );
  });
});

describe("one pass from flags to a component", () => {
  test("resolveOptions gives the schema's validated options, typed by the schema", () => {
    const server = resolveOptions(
      serverOptionsSchema,
      {
        "cluster-cert": "/s.crt",
        "cluster-key": "/s.key",
        "cluster-ca-cert": "/agent-ca.crt",
        "server-cert": "/s.crt",
        "server-key": "/s.key",
        "server-ca-cert": "/client-ca.crt",
        mode: "both",
        "keepalive-time": "30s",
      },
      {},
    );
    const mode: "grpc" | "http-connect" | "both" = server.mode;
    assert.equal(mode, "both");
    assert.equal(server.keepaliveTime, 30_000);
    assert.deepEqual(
      problems(() => resolveOptions(serverOptionsSchema, { "server-port": "1" }, {})),
      problems(() => parseServerOptions({ serverPort: 1 })),
    );
  });

  test("a validated set handed on is not validated again; a changed copy is", () => {
    const server = parseServerOptions(SERVER);
    assert.equal(parseServerOptions(server), server);
    assert.notEqual(parseServerOptions({ ...server }), server);
    assert.deepEqual(
      problems(() => parseServerOptions({ ...server, serverCert: "" })),
      problems(() => parseServerOptions({ ...SERVER, serverCert: "" })),
    );
    // checks that live with their owner still run on an already validated set
    const agent = parseAgentOptions({ caCert: "/ca.crt" });
    assert.deepEqual(
      problems(() => parseAgentOptions(agent, () => ["--allow-destinations: bad"])),
      ["--allow-destinations: bad"],
    );
  });
});

describe("argsFor: a command line from the schema's own flags", () => {
  /** `--flag=value` words back into the raw values the flag layer takes. */
  const rawOf = (args: readonly string[]): Record<string, string> =>
    Object.fromEntries(
      args.map((a) => {
        const m = /^--([^=]+)=(.*)$/s.exec(a);
        assert.ok(m, a);
        return [m[1]!, m[2]!];
      }),
    );

  test("each value in the flag's own syntax, in the order given, undefined left out", () => {
    const args = argsFor(serverOptionsSchema, {
      mode: "both",
      "server-port": 9000,
      "keepalive-time": 5_000,
      "keepalive-timeout": 90_000,
      "handshake-timeout": 1_500,
      "proxy-strategies": ["destHost", "default"],
      "delete-existing-uds-file": false,
      "uds-name": undefined,
    });
    assert.deepEqual(args, [
      "--mode=both",
      "--server-port=9000",
      "--keepalive-time=5s",
      "--keepalive-timeout=90s",
      "--handshake-timeout=1500ms",
      "--proxy-strategies=destHost,default",
      "--delete-existing-uds-file=false",
    ]);
  });

  test("the rendered line parses back with the component's parser to the same values", () => {
    const values = {
      ...SERVER_FLAGS,
      mode: "http-connect",
      "server-count": 3,
      "keepalive-time": 1_250,
      "proxy-strategies": ["destHost"],
      "delete-existing-uds-file": false,
    } as const;
    const parsed: Record<string, unknown> = resolveOptions(
      serverOptionsSchema,
      rawOf(argsFor(serverOptionsSchema, values)),
      {},
    );
    const keyOf = new Map(serverOptionSpecs.map((s) => [s.flag, s.key]));
    for (const [flag, value] of Object.entries(values)) assert.deepEqual(parsed[keyOf.get(flag)!], value, flag);
  });

  test("a flag the schema does not have, or a value of another type, does not type-check", () => {
    // Checked by the type checker only (never called): each call must fail to type-check.
    const typeErrors = (): unknown[] => [
      // @ts-expect-error: no such flag (a renamed or removed flag fails here)
      argsFor(agentOptionsSchema, { "proxy-server-hostname": "h" }),
      // @ts-expect-error: --proxy-server-port is a port, not text
      argsFor(agentOptionsSchema, { "proxy-server-port": "8091" }),
      // @ts-expect-error: --mode is one of grpc, http-connect, both
      argsFor(serverOptionsSchema, { mode: "udp" }),
      // @ts-expect-error: a server flag is not a gateway flag
      argsFor(gatewayOptionsSchema, { "server-count": 1 }),
    ];
    assert.equal(typeof typeErrors, "function");
    // and at run time (an untyped caller) the same is refused
    const untyped = (v: object): Parameters<typeof argsFor<typeof agentOptionsSchema.fields>>[1] => ({ ...v });
    assert.throws(() => argsFor(agentOptionsSchema, untyped({ nope: "x" })), /--nope is not a flag/);
  });

  test("a value the flag could not carry back is refused", () => {
    assert.throws(() => argsFor(serverOptionsSchema, { "proxy-strategies": ["a,b"] }), /cannot be a list item/);
    assert.throws(() => argsFor(serverOptionsSchema, { "keepalive-time": 1.5 }), /milliseconds/);
    assert.throws(() => argsFor(serverOptionsSchema, { "server-port": Number.NaN }), /expected a number/);
  });
});
