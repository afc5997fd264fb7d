import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { EventEmitter } from "node:events";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { Command } from "commander";
import {
  ConfigError,
  agentOptionSpecs,
  agentOptionsSchema,
  certsOptionSpecs,
  serverOptionSpecs,
  serverOptionsSchema,
  upOptionSpecs,
  withDefaults,
  type OptionField,
  type OptionsOf,
  type OptionsSchema,
} from "@cluster-proxy/api";
import { clusterNamesFromCertificate } from "@cluster-proxy/pki";
import { CRD_BEGIN, CRD_END } from "./reference/crd-reference.js";
import {
  FLAGS_BEGIN,
  FLAGS_END,
  flagReferenceMarkdown,
  replaceCrdReference,
  replaceFlagReference,
} from "./reference/flag-reference.js";
import { addOptionSpecs, commandFlagValues, normalizeGoArgs } from "./commands/option-flags.js";
import { portConflictMessage, portInUse } from "./up/port-conflicts.js";
import { buildProgram, runCli } from "./program.js";
import { runUntilSignalled } from "./commands/shutdown-signals.js";
import { capture } from "./testing/capture.js";

async function run(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; out: string; err: string }> {
  const ctx = capture(env);
  const code = await runCli(args, ctx);
  return { code, out: ctx.out.join(""), err: ctx.err.join("") };
}

/** The flag layer only (flag syntax, environment, defaults), not the schema's rules. */
function parse<F extends Record<string, OptionField>>(
  schema: OptionsSchema<F>,
  args: string[],
  env: NodeJS.ProcessEnv = {},
): OptionsOf<F> {
  const command = new Command("t").exitOverride();
  addOptionSpecs(command, schema.specs);
  command.parse(args, { from: "user" });
  return withDefaults(schema, commandFlagValues(command, schema.specs, env));
}

describe("flag wiring from the option schemas", () => {
  test("defaults come from the schema; flags and env override them", () => {
    const server = parse(serverOptionsSchema, []);
    assert.equal(server.serverPort, 8090);
    assert.deepEqual(server.proxyStrategies, ["default"]);
    assert.equal(server.mode, "grpc");
    assert.equal(server.keepaliveTime, 3_600_000);
    assert.equal(server.deleteExistingUdsFile, true);
    const agent = parse(agentOptionsSchema, ["--agent-id", "from-flag"], { PROXY_AGENT_ID: "from-env" });
    assert.equal(agent.agentId, "from-flag");
    assert.equal(parse(agentOptionsSchema, [], { PROXY_AGENT_ID: "from-env" }).agentId, "from-env");
  });

  test("durations, ports, lists and booleans are parsed the Go way", () => {
    const agent = parse(agentOptionsSchema, [
      "--sync-interval",
      "1m30s",
      "--keepalive-time=500ms",
      "--drain-grace-period",
      "2",
      "--proxy-server-port=9000",
    ]);
    assert.equal(agent.syncInterval, 90_000);
    assert.equal(agent.keepaliveTime, 500);
    assert.equal(agent.drainGracePeriod, 2_000);
    assert.equal(agent.proxyServerPort, 9000);
    const server = parse(serverOptionsSchema, [
      "--proxy-strategies",
      "destHost",
      "--proxy-strategies=defaultRoute,default",
      "--delete-existing-uds-file=false",
      "--http-connect-plain",
    ]);
    assert.deepEqual(server.proxyStrategies, ["destHost", "defaultRoute", "default"]);
    assert.equal(server.deleteExistingUdsFile, false);
    assert.equal(server.httpConnectPlain, true);
  });

  test("bad values throw a ConfigError naming the flag", () => {
    assert.throws(
      () => parse(serverOptionsSchema, ["--server-port", "70000"]),
      (err: Error) => err instanceof ConfigError && err.message.startsWith("--server-port:"),
    );
    assert.throws(() => parse(agentOptionsSchema, ["--sync-interval", "soon"]), /^ConfigError: --sync-interval:/);
    assert.throws(() => parse(serverOptionsSchema, ["--mode", "udp"]), /--mode: "udp" is not one of/);
  });
});

describe("cluster-proxy command line", () => {
  test("a bad port exits 2 with one line naming --server-port", async () => {
    const r = await run(["server", "--server-port", "70000"]);
    assert.equal(r.code, 2);
    assert.equal(r.out, "");
    assert.equal(r.err, "cluster-proxy server: --server-port: 70000 is not a port number (0-65535)\n");
  });

  test("server: a TLS file that cannot be read exits 2 with the reader's one line naming the flag and file", async () => {
    const r = await run([
      "server",
      ...["--cluster-cert", "/nonexistent/tls.crt", "--cluster-key", "/nonexistent/tls.key"],
      ...["--cluster-ca-cert", "/nonexistent/ca.crt", "--server-port", "0", "--uds-name", "/nonexistent/proxy.sock"],
      ...["--agent-port", "0", "--health-port", "0", "--admin-port", "0"],
    ]);
    assert.equal(r.code, 2);
    assert.equal(
      r.err,
      "cluster-proxy server: --cluster-cert: /nonexistent/tls.crt: cannot read: ENOENT: no such file or directory, open '/nonexistent/tls.crt'\n",
    );
  });

  test("agent: a bad --allow-destinations entry, then a TLS file that cannot be read, exits 2 naming the flag", async () => {
    const agent = ["agent", "--proxy-server-host", "127.0.0.1", "--ca-cert", "/nonexistent/ca.crt"];
    const ports = ["--health-server-port", "0", "--admin-server-port", "0", "--log-level", "silent"];
    assert.deepEqual(await run([...agent, ...ports, "--allow-destinations", "bad entry"]), {
      code: 2,
      out: "",
      err: 'cluster-proxy agent: --allow-destinations: "bad entry": allow[0].hosts[0]: "bad entry" is not a host pattern (a DNS name, "*.suffix" or "*")\n',
    });
    assert.deepEqual(await run([...agent, ...ports]), {
      code: 2,
      out: "",
      err: "cluster-proxy agent: --ca-cert: /nonexistent/ca.crt: cannot read: ENOENT: no such file or directory, open '/nonexistent/ca.crt'\n",
    });
  });

  test("addon-manager: a malformed --install-placement exits 2 naming it", async () => {
    const r = await run(["addon-manager", "--install-placement", "global"]);
    assert.equal(r.code, 2);
    assert.match(r.err, /--install-placement: "global" is not <namespace>\/<name> of a Placement/);
  });

  test("gateway: bad and missing flags exit 2, each problem naming its flag", async () => {
    const r = await run([
      "gateway",
      "--dial-timeout",
      "0s",
      "--oidc-issuer-url",
      "http://idp",
      "--oidc-required-claim",
      "x",
    ]);
    assert.equal(r.code, 2);
    for (const flag of [
      "--serving-cert",
      "--proxy-server-host",
      "--identity-cert",
      "--agent-ca",
      "--dial-timeout",
      "--oidc-issuer-url",
      "--oidc-client-id",
      "--oidc-required-claim",
    ])
      assert.match(r.err, new RegExp(`${flag}: `), flag);
  });

  test("gateway: a TLS file that cannot be read exits 2 with the reader's one line naming the flag and file (read at start)", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cp-cli-gateway-"));
    try {
      // A hub that is never asked: the files are read before anything talks to it.
      const kubeconfig = join(dir, "hub.kubeconfig");
      await writeFile(
        kubeconfig,
        [
          "apiVersion: v1",
          "kind: Config",
          "clusters: [{name: hub, cluster: {server: 'https://127.0.0.1:1'}}]",
          "users: [{name: u, user: {token: t}}]",
          "contexts: [{name: hub, context: {cluster: hub, user: u}}]",
          "current-context: hub",
          "",
        ].join("\n"),
      );
      const missing = (name: string): string => join(dir, "nonexistent", name);
      const r = await run([
        "gateway",
        ...["--hub-kubeconfig", kubeconfig, "--port", "0", "--health-port", "0"],
        ...["--serving-cert", missing("tls.crt"), "--serving-key", missing("tls.key")],
        ...["--proxy-server-host", "127.0.0.1", "--proxy-ca", missing("proxy-ca.crt")],
        ...["--proxy-cert", missing("proxy.crt"), "--proxy-key", missing("proxy.key")],
        ...["--identity-cert", missing("id.crt"), "--identity-key", missing("id.key")],
        ...["--agent-ca", missing("agent-ca.crt"), "--audit-log", join(dir, "audit.log")],
      ]);
      assert.equal(r.code, 2);
      assert.equal(
        r.err,
        `cluster-proxy gateway: --proxy-cert: ${missing("proxy.crt")}: cannot read: ENOENT: no such file or directory, open '${missing("proxy.crt")}'\n`,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test("an unknown flag exits 2 naming the flag", async () => {
    const r = await run(["agent", "--sync-intervall", "1s"]);
    assert.equal(r.code, 2);
    assert.match(r.err, /^cluster-proxy agent: --sync-intervall: unknown flag/);
    assert.match(r.err, /did you mean --sync-interval\?/);
    assert.equal(r.err.split("\n").length, 2, "one line");
    const top = await run(["--bogus"]);
    assert.equal(top.code, 2);
    assert.match(top.err, /^cluster-proxy: --bogus: unknown flag/);
  });

  test("a flag without its value, a bad duration and an unknown command exit 2", async () => {
    assert.deepEqual(await run(["server", "--agent-port"]), {
      code: 2,
      out: "",
      err: "cluster-proxy server: --agent-port: needs a value\n",
    });
    const d = await run(["agent", "--keepalive-time", "10 minutes"]);
    assert.equal(d.code, 2);
    assert.match(d.err, /--keepalive-time: "10 minutes" is not a duration/);
    const u = await run(["serve"]);
    assert.equal(u.code, 2);
    assert.match(u.err, /unknown command 'serve'/);
  });

  test("--help explains every command with an example; --version prints the version", async () => {
    const top = await run(["--help"]);
    assert.equal(top.code, 0);
    for (const word of ["up", "server", "agent", "certs", "Examples:", "curl -p -x"])
      assert.ok(top.out.includes(word), word);
    for (const [cmd, flag] of [
      ["server", "--server-port <port>"],
      ["agent", "--proxy-server-host <string>"],
      ["certs", "--hub-host <list>"],
      ["up", "--port-base <port>"],
    ] as const) {
      const r = await run([cmd, "--help"]);
      assert.equal(r.code, 0, cmd);
      assert.ok(r.out.includes("Example"), `${cmd} help has an example`);
      assert.ok(r.out.includes(flag), `${cmd} help lists ${flag}`);
    }
    const server = await run(["server", "--help"]);
    assert.match(server.out, /--server-port <port> +Port of the client front door .*\[default 8090; Go-compatible\]/);
    assert.match(server.out, /--server-id <string> .*env PROXY_SERVER_ID/);
    const version = await run(["--version"]);
    assert.equal(version.code, 0);
    assert.match(version.out, /^\d+\.\d+\.\d+\n$/);
  });
});

describe("Go flag spellings", () => {
  test("-v is klog's verbosity, never --version: -v=3, -v 3, --v=3 and -v3 all parse", async () => {
    for (const spelling of [["-v=3"], ["-v", "3"], ["--v=3"], ["-v3"]]) {
      for (const cmd of ["server", "agent"]) {
        // A bad port after -v proves parsing went on past it (no version printed, no exit 0).
        const port = cmd === "server" ? "--server-port" : "--proxy-server-port";
        const r = await run([cmd, ...spelling, port, "70000"]);
        assert.equal(r.code, 2, `${cmd} ${spelling.join(" ")}`);
        assert.equal(r.out, "");
        assert.match(r.err, new RegExp(`^cluster-proxy ${cmd}: ${port}: 70000 is not a port number`));
      }
    }
    const top = await run(["-v"]);
    assert.equal(top.code, 2);
    assert.match(top.err, /-v: unknown flag/);
    assert.equal(normalizeGoArgs(["-v=5", "--", "-v=1"], serverOptionSpecs).join(" "), "--v=5 -- -v=1");
  });

  test("a Go flag we do not support is refused naming the flag and why; its default is accepted", async () => {
    const r = await run(["server", "--enable-lease-controller"]);
    assert.equal(r.code, 2);
    assert.match(
      r.err,
      /^cluster-proxy server: --enable-lease-controller: not supported by cluster-proxy \(only false, the Go default, is accepted\): servers do not publish Leases/,
    );
    const a = await run(["agent", "--count-server-leases=true"]);
    assert.equal(a.code, 2);
    assert.match(a.err, /--count-server-leases: not supported/);
    const server = parse(serverOptionsSchema, ["--enable-lease-controller=false", "--logtostderr=true"]);
    assert.equal(server.enableLeaseController, false);
  });

  test("help marks Go flags we accept with what they do here", async () => {
    const r = await run(["agent", "--help"]);
    assert.match(r.out, /-v, --v <int>/);
    assert.match(r.out, /--xfr-channel-size <int> .*Go flag: accepted \(must be positive\), no effect/s);
  });
});

describe("cluster-proxy certs", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cp-cli-certs-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test("writes the CA, server, client and per-cluster agent certificates", async () => {
    const target = join(dir, "certs");
    const r = await run([
      "certs",
      "--dir",
      target,
      "--cluster",
      "east,west",
      "--cluster",
      "7south",
      "--hub-host",
      "hub.test",
    ]);
    assert.equal(r.code, 0, r.err);
    for (const name of [
      "ca",
      "client-ca",
      "agent-ca",
      "server",
      "client",
      "agent-east",
      "agent-west",
      "agent-7south",
    ]) {
      assert.ok(r.out.includes(join(target, `${name}.crt`)), `${name}.crt listed`);
      assert.equal((await stat(join(target, `${name}.key`))).mode & 0o777, 0o600);
    }
    const server = new X509Certificate(await readFile(join(target, "server.crt")));
    assert.equal(server.checkHost("hub.test"), "hub.test");
    assert.equal(server.checkHost("localhost"), undefined, "--hub-host replaces the default hosts");
    assert.deepEqual(clusterNamesFromCertificate(await readFile(join(target, "agent-7south.crt"))), ["7south"]);

    const again = await run(["certs", "--dir", target]);
    assert.equal(again.code, 1);
    assert.match(again.err, /ca\.crt already exists.*--update.*--force/);
    const forced = await run(["certs", "--dir", target, "--force"]);
    assert.equal(forced.code, 0, forced.err);
    assert.match(forced.out, /client-ca\.crt +client CA: server --server-ca-cert/);
    assert.match(forced.out, /agent-ca\.crt +agent CA: server --cluster-ca-cert/);

    // --update keeps the CAs and the clusters already there, and adds a cluster
    const ca = await readFile(join(target, "ca.crt"), "utf8");
    const update = await run(["certs", "--dir", target, "--update", "--cluster", "north"]);
    assert.equal(update.code, 0, update.err);
    assert.equal(await readFile(join(target, "ca.crt"), "utf8"), ca);
    assert.match(update.out, /agent-north\.crt/);
    const nothing = await run(["certs", "--dir", target, "--update"]);
    assert.match(nothing.out, /nothing to do/);
  });

  test("the single-CA layout of older releases is refused with the command that splits it; --update splits it", async () => {
    const old = join(dir, "old");
    const { createCertificateAuthority, issueCertificate, agentClusterUri } = await import("@cluster-proxy/pki");
    const { mkdir } = await import("node:fs/promises");
    await mkdir(old);
    const ca = await createCertificateAuthority({ commonName: "cluster-proxy-ca" });
    const put = async (base: string, pem: { certPem: string; keyPem: string }): Promise<void> => {
      await writeFile(join(old, `${base}.crt`), pem.certPem);
      await writeFile(join(old, `${base}.key`), pem.keyPem, { mode: 0o600 });
    };
    await put("ca", ca);
    await put("server", await issueCertificate(ca, { commonName: "s", dnsNames: ["hub.test"], usage: "both" }));
    await put("client", await issueCertificate(ca, { commonName: "c", usage: "client" }));
    await put(
      "agent-east",
      await issueCertificate(ca, { commonName: "e", uris: [agentClusterUri("east")], usage: "client" }),
    );

    const refused = await run(["certs", "--dir", old]);
    assert.equal(refused.code, 1);
    assert.match(refused.err, /single-CA layout of an older cluster-proxy/);
    assert.ok(refused.err.includes(`cluster-proxy certs --dir ${old} --update`), refused.err);
    assert.ok(
      refused.err.includes(
        `--server-ca-cert ${join(old, "client-ca.crt")} --cluster-ca-cert ${join(old, "agent-ca.crt")}`,
      ),
    );

    const split = await run(["certs", "--dir", old, "--update"]);
    assert.equal(split.code, 0, split.err);
    assert.match(split.out, /split the single CA/);
    assert.equal(await readFile(join(old, "ca.crt"), "utf8"), ca.certPem);
    const east = new X509Certificate(await readFile(join(old, "agent-east.crt")));
    assert.ok(east.checkIssued(new X509Certificate(await readFile(join(old, "agent-ca.crt")))));
    const server = new X509Certificate(await readFile(join(old, "server.crt")));
    assert.equal(server.checkHost("hub.test"), "hub.test", "the hosts of the old server.crt are kept");
    assert.equal(server.checkHost("localhost"), undefined);
  });

  test("bad input names the flag", async () => {
    const noDir = await run(["certs"]);
    assert.equal(noDir.code, 2);
    assert.match(noDir.err, /^cluster-proxy certs: --dir: required/);
    const badCluster = await run(["certs", "--dir", join(dir, "x"), "--cluster", "East_1"]);
    assert.equal(badCluster.code, 2);
    assert.match(badCluster.err, /^cluster-proxy certs: --cluster: cluster name "East_1" is invalid/);
    const badAlg = await run(["certs", "--dir", join(dir, "x"), "--key-algorithm", "DSA"]);
    assert.equal(badAlg.code, 2);
    assert.match(badAlg.err, /--key-algorithm: "DSA" is not one of ECDSA-P256, RSA-2048/);
  });
});

describe("two-stage shutdown", () => {
  test("first signal runs the graceful stage", async () => {
    const source = new EventEmitter();
    const done = runUntilSignalled(source, {
      graceful: (sig) => Promise.resolve(sig === "SIGTERM" ? 0 : 9),
      forced: () => Promise.resolve(1),
    });
    source.emit("SIGTERM");
    assert.equal(await done, 0);
    assert.equal(source.listenerCount("SIGTERM") + source.listenerCount("SIGINT"), 0);
  });

  test("a second signal during the graceful stage forces the exit", async () => {
    const source = new EventEmitter();
    let gracefulStarted!: () => void;
    const started = new Promise<void>((r) => (gracefulStarted = r));
    const done = runUntilSignalled(source, {
      graceful: () => {
        gracefulStarted();
        return new Promise<number>(() => undefined); // never finishes
      },
      forced: (sig) => Promise.resolve(sig === "SIGINT" ? 1 : 9),
    });
    source.emit("SIGINT");
    await started;
    source.emit("SIGINT");
    assert.equal(await done, 1);
  });

  test("a failing stage exits 1 and is reported; abort starts the graceful stage", async () => {
    const source = new EventEmitter();
    const errors: unknown[] = [];
    const abort = new AbortController();
    const done = runUntilSignalled(
      source,
      {
        graceful: () => Promise.reject(new Error("boom")),
        forced: () => Promise.resolve(0),
        onError: (err) => errors.push(err),
      },
      abort.signal,
    );
    abort.abort();
    assert.equal(await done, 1);
    assert.equal((errors[0] as Error).message, "boom");
  });
});

describe("port conflicts", () => {
  test("are recognised from errno errors and from errors that carry them as their cause", () => {
    const errno = Object.assign(new Error("listen EADDRINUSE: address already in use 127.0.0.1:8090"), {
      code: "EADDRINUSE",
      port: 8090,
      address: "127.0.0.1",
    });
    assert.deepEqual(portInUse(errno), { port: 8090, address: "127.0.0.1" });
    const wrapped = new ConfigError(
      "--server-port: cannot listen on 127.0.0.1:8090: listen EADDRINUSE: address already in use 127.0.0.1:8090",
      { cause: errno },
    );
    assert.deepEqual(portInUse(wrapped), { port: 8090, address: "127.0.0.1" });
    assert.equal(portInUse(new Error("connection refused 127.0.0.1:8090")), undefined);
    assert.equal(
      portConflictMessage(wrapped, serverOptionSpecs, { serverPort: 8090, agentPort: 8091 }),
      "port 8090 (--server-port) on 127.0.0.1 is already in use: free it or choose another with --server-port",
    );
  });
});

describe("flag and CRD reference (docs/reference)", () => {
  test("covers every flag of every command and replaces only the marked section", () => {
    const md = flagReferenceMarkdown();
    for (const spec of [...serverOptionSpecs, ...agentOptionSpecs, ...certsOptionSpecs, ...upOptionSpecs])
      assert.ok(md.includes(`\`--${spec.flag}\``), spec.flag);
    const readme = `# t\n\nintro\n\n${FLAGS_BEGIN}\nOLD-CONTENT\n${FLAGS_END}\n\nafter\n`;
    const updated = replaceFlagReference(readme);
    assert.ok(updated.startsWith(`# t\n\nintro\n\n${FLAGS_BEGIN}\n`));
    assert.ok(updated.endsWith(`${FLAGS_END}\n\nafter\n`));
    assert.ok(!updated.includes("OLD-CONTENT"));
    assert.equal(replaceFlagReference(updated), updated);
    assert.throws(() => replaceFlagReference("# no markers\n"), /flags:begin/);
  });

  test("every command the program registers has a section listing each of its flags", () => {
    const md = flagReferenceMarkdown();
    const sections = new Map(
      md
        .split(/^### /m)
        .slice(1)
        .map((s) => [/^`cluster-proxy ([a-z-]+)`/.exec(s)?.[1], s] as const),
    );
    const commands = buildProgram(capture()).commands;
    assert.ok(commands.length >= 11, "the whole tree");
    const missing: string[] = [];
    for (const command of commands) {
      const section = sections.get(command.name());
      if (section === undefined) {
        missing.push(`cluster-proxy ${command.name()}: no section`);
        continue;
      }
      for (const option of command.options) {
        if (option.long === undefined || option.long === "--help") continue;
        if (!section.includes(`\`${option.long}\``)) missing.push(`cluster-proxy ${command.name()} ${option.long}`);
      }
    }
    assert.deepEqual(missing, []);
  });

  test("scripts/gen-flag-docs.ts --check fails on a stale page and passes once written", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cp-flag-docs-"));
    try {
      const readme = join(dir, "README.md");
      await writeFile(readme, `# t\n${FLAGS_BEGIN}\n${FLAGS_END}\n${CRD_BEGIN}\n${CRD_END}\n`);
      const script = fileURLToPath(new URL("../../../scripts/gen-flag-docs.ts", import.meta.url));
      const runScript = (...args: string[]) =>
        new Promise<{ code: number; stderr: string }>((resolve) => {
          execFile(
            process.execPath,
            ["--conditions=source", "--import", "tsx", script, "--readme", readme, ...args],
            (err, _stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr }),
          );
        });
      const stale = await runScript("--check");
      assert.equal(stale.code, 1);
      assert.match(stale.stderr, /out of date/);
      assert.equal((await runScript()).code, 0);
      assert.equal((await runScript("--check")).code, 0);
      assert.ok((await readFile(readme, "utf8")).includes("`--server-port`"));
      assert.ok((await readFile(readme, "utf8")).includes("`spec.proxyServer.entrypoint.type`"));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test("docs/reference/flags.md and crd.md match the schemas (run npm run docs:flags)", async () => {
    const page = (rel: string) => readFile(fileURLToPath(new URL(`../../../${rel}`, import.meta.url)), "utf8");
    const flags = await page("docs/reference/flags.md");
    assert.equal(replaceFlagReference(flags), flags, "docs/reference/flags.md is stale");
    const crd = await page("docs/reference/crd.md");
    assert.equal(replaceCrdReference(crd), crd, "docs/reference/crd.md is stale");
  });
});
