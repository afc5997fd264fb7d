import assert from "node:assert/strict";
import { execFile, spawn, spawnSync } from "node:child_process";
import { realpathSync } from "node:fs";
import { mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { test } from "node:test";
import { promisify } from "node:util";
import {
  COMMANDS_WITH_OWN_FLAGS,
  NODE_FLAGS,
  SHEBANG,
  missingNodeFlags,
  nodeFlagsFor,
  nodeFlagsToApply,
} from "./node-flags.js";

const run = promisify(execFile);
const root = join(import.meta.dirname, "../../..");
/** The flags of the `#!` line: those every Node major accepts. */
const shebangFlags = SHEBANG.split(" ").slice(3);

test("the cluster-proxy executable starts node with the flags of its #! line", async () => {
  const main = await readFile(join(import.meta.dirname, "main.ts"), "utf8");
  assert.equal(main.split("\n")[0], SHEBANG);
  // What the kernel runs for that line: env with everything after it as one argument.
  const [env, rest] = [SHEBANG.slice(2).split(" ")[0]!, SHEBANG.slice(2).split(" ").slice(1).join(" ")];
  const { stdout } = await run(env, [rest, "-p", "JSON.stringify(process.execArgv)"]);
  assert.deepEqual((JSON.parse(stdout) as string[]).slice(0, shebangFlags.length), shebangFlags);
});

/**
 * `npm start` and `npm run up` run the committed launcher on the image's runtime (whatever node
 * runs npm): scripts/node-runtime.mjs --exec passes the arguments, the terminal and the exit
 * status through, and a SIGTERM sent to it alone reaches the command.
 */
test("npm start and npm run up run the launcher on the image's runtime, status and signals passed through", async () => {
  const scripts = (
    JSON.parse(await readFile(join(root, "package.json"), "utf8")) as { scripts: Record<string, string> }
  ).scripts;
  const launch = "node scripts/node-runtime.mjs --exec packages/cli/bin/cluster-proxy.js";
  assert.equal(scripts["start"], launch);
  assert.match(scripts["up"]!, new RegExp(`&& ${launch.replaceAll(".", "\\.")} up$`));

  const { stdout } = await run(process.execPath, [join(root, "scripts", "node-runtime.mjs")], { timeout: 300_000 });
  // process.execPath is the binary's real path (a checkout's .cache may be a link).
  const imageNode = realpathSync(stdout.trim().split("\n").at(-1)!);
  const dir = await mkdtemp(join(tmpdir(), "cp-exec-"));
  try {
    const script = join(dir, "report.mjs");
    await writeFile(
      script,
      [
        "if (process.argv[2] === 'wait') { process.on('SIGTERM', () => process.exit(7)); setInterval(() => {}, 1000); }",
        "else process.exitCode = 3;",
        "process.stdout.write(JSON.stringify({ execPath: process.execPath, argv: process.argv.slice(2) }) + '\\n');",
      ].join("\n"),
    );
    const runner = join(root, "scripts", "node-runtime.mjs");
    const res = spawnSync(process.execPath, [runner, "--exec", script, "a b", "--c"], { encoding: "utf8" });
    assert.equal(res.status, 3, "the exit status is passed on");
    assert.deepEqual(JSON.parse(res.stdout), { execPath: imageNode, argv: ["a b", "--c"] });

    const child = spawn(process.execPath, [runner, "--exec", script, "wait"], { stdio: ["ignore", "pipe", "inherit"] });
    await new Promise<void>((resolve) => child.stdout.once("data", () => resolve()));
    child.kill("SIGTERM");
    const code = await new Promise<number | null>((resolve) => child.once("exit", (c) => resolve(c)));
    assert.equal(code, 7, "the command saw the SIGTERM and its status came back");

    const usage = spawnSync(process.execPath, [runner, "--exec"], { encoding: "utf8" });
    assert.equal(usage.status, 1);
    assert.match(usage.stderr, /--exec needs a script to run/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("nodeFlagsFor: the old-space floor before Node 24, external memory in the global limit from 24 on", () => {
  for (const v of ["20.20.2", "v22.23.3", "23.0.0"]) {
    assert.deepEqual(nodeFlagsFor(v), ["--initial-old-space-size=64", "--max-semi-space-size=4"], v);
  }
  for (const v of ["24.0.0", "v24.21.0", "26.12.1", "27.0.0-pre"]) {
    assert.deepEqual(
      nodeFlagsFor(v),
      ["--external-memory-accounted-in-global-limit", "--initial-old-space-size=128", "--max-semi-space-size=4"],
      v,
    );
  }
  assert.deepEqual(NODE_FLAGS, nodeFlagsFor(process.version));
  assert.deepEqual(shebangFlags, nodeFlagsFor("20.9.0"));
  assert.throws(() => nodeFlagsFor("lts"), /not a Node.js version/);
});

test("nodeFlagsFor a command: the agent's young generation is 1 MiB, every other command's as without one", () => {
  assert.deepEqual(COMMANDS_WITH_OWN_FLAGS, ["agent"]);
  for (const v of ["20.20.2", "24.21.0", "26.12.1"]) {
    const agent = nodeFlagsFor(v, "agent");
    assert.deepEqual(
      agent,
      nodeFlagsFor(v).map((f) => (f.startsWith("--max-semi-space-size=") ? "--max-semi-space-size=1" : f)),
      v,
    );
    for (const command of ["server", "up", "addon-manager", "gateway", "--help", undefined]) {
      assert.deepEqual(nodeFlagsFor(v, command), nodeFlagsFor(v), `${v} ${command}`);
    }
  }
});

test("nodeFlagsToApply: our flags a process lacks or runs at another value, the last one given counting", () => {
  const v = "26.12.1";
  assert.deepEqual(nodeFlagsToApply([], v, "agent"), nodeFlagsFor(v, "agent"));
  assert.deepEqual(nodeFlagsToApply(nodeFlagsFor(v, "agent"), v, "agent"), []);
  // The server's flags (the image's `#!` line of cluster-proxy): the agent starts again for its young generation.
  assert.deepEqual(nodeFlagsToApply(nodeFlagsFor(v), v, "agent"), ["--max-semi-space-size=1"]);
  assert.deepEqual(nodeFlagsToApply(nodeFlagsFor(v), v, "server"), []);
  // Flags appended by an earlier start win: no second restart.
  assert.deepEqual(nodeFlagsToApply([...nodeFlagsFor(v), "--max-semi-space-size=1"], v, "agent"), []);
  assert.deepEqual(nodeFlagsToApply(["--max_semi_space_size=1", ...nodeFlagsFor(v).slice(0, 2)], v, "agent"), []);
  // A value none of our sets gives is the operator's: kept.
  assert.deepEqual(nodeFlagsToApply([...nodeFlagsFor(v), "--max-semi-space-size=8"], v, "agent"), []);
  assert.deepEqual(nodeFlagsToApply(["--initial-old-space-size=512"], v, "server"), [
    "--external-memory-accounted-in-global-limit",
    "--max-semi-space-size=4",
  ]);
  // The #! line of the sources on Node 26: the floor at 64 is raised, external memory added.
  assert.deepEqual(nodeFlagsToApply(shebangFlags, v, undefined), [
    "--external-memory-accounted-in-global-limit",
    "--initial-old-space-size=128",
  ]);
});

test("missingNodeFlags names the flags a process started without, for its Node major", () => {
  assert.deepEqual(missingNodeFlags([], "20.20.2"), nodeFlagsFor("20.20.2"));
  assert.deepEqual(missingNodeFlags(["--inspect", ...nodeFlagsFor("26.12.1")], "26.12.1"), []);
  // V8 accepts either spelling and any value: the operator may have chosen other sizes.
  assert.deepEqual(missingNodeFlags(["--initial_old_space_size=256", "--max_semi_space_size=8"], "20.20.2"), []);
  assert.deepEqual(missingNodeFlags(["--initial-old-space-size=64"], "20.20.2"), ["--max-semi-space-size=4"]);
  // The #! line's flags on Node 26: the old-space floor is there, external memory is not counted.
  assert.deepEqual(missingNodeFlags(shebangFlags, "26.12.1"), ["--external-memory-accounted-in-global-limit"]);
  assert.deepEqual(missingNodeFlags(NODE_FLAGS), []);
});

/**
 * Every runtime we support (image/versions.json: the image's and the other majors', fetched by
 * scripts/node-runtime.mjs; scripts/test.sh fetches them before its loopback-only namespace) and
 * the node running this test start with their flags: no "bad option", no warning.
 */
test("every supported Node.js runtime accepts its flags, each command's", async () => {
  const { stdout } = await run(process.execPath, [join(root, "scripts", "node-runtime.mjs"), "--supported"], {
    timeout: 300_000,
  });
  const runtimes = [...stdout.trim().split("\n"), process.execPath];
  assert.ok(runtimes.length >= 3, stdout);
  for (const node of runtimes) {
    const version = (await run(node, ["--version"])).stdout.trim();
    for (const command of [undefined, ...COMMANDS_WITH_OWN_FLAGS]) {
      const flags = nodeFlagsFor(version, command);
      const res = await run(node, [...flags, "-p", "JSON.stringify(process.execArgv)"]).catch((e: Error) => e);
      if (res instanceof Error) assert.fail(`${version} (${node}) refuses ${flags.join(" ")}: ${res.message}`);
      assert.equal(res.stderr, "", `${version} ${command}: ${res.stderr}`);
      assert.deepEqual((JSON.parse(res.stdout) as string[]).slice(0, flags.length), flags, `${version} ${command}`);
    }
  }
});

/**
 * The committed launcher (what `npm ci` links as `cluster-proxy`) runs through its `#!` line and,
 * on a node that wants other flags, replaces itself once with them: the process that runs the
 * command ends up with every flag of nodeFlagsFor, each at our value.
 */
test("the cluster-proxy launcher runs the command under its node's flags, on every supported runtime", async () => {
  const { stdout } = await run(process.execPath, [join(root, "scripts", "node-runtime.mjs"), "--supported"], {
    timeout: 300_000,
  });
  const dir = await mkdtemp(join(tmpdir(), "cp-launcher-"));
  try {
    // Loaded by every node the launcher starts; only the last one reaches 'exit' (execve replaces the others).
    const preload = join(dir, "report.mjs");
    await writeFile(
      preload,
      "process.on('exit', () => process.stderr.write('EXECARGV ' + JSON.stringify(process.execArgv) + '\\n'));\n",
    );
    for (const node of [...stdout.trim().split("\n"), process.execPath]) {
      const version = (await run(node, ["--version"])).stdout.trim();
      // Node.js 20 has no process.execve: there the #! line's flags are all the command gets.
      const canRestart = (await run(node, ["-p", "typeof process.execve"])).stdout.trim() === "function";
      for (const [command, args] of [
        [undefined, ["--version"]],
        ["agent", ["agent", "--help"]],
      ] as const) {
        const res = await run(join(root, "packages", "cli", "bin", "cluster-proxy.js"), args, {
          env: {
            ...process.env,
            PATH: `${dirname(node)}:${process.env["PATH"] ?? ""}`,
            NODE_OPTIONS: `--import=${pathToFileURL(preload).href}`,
          },
        });
        const line = /^EXECARGV (.*)$/m.exec(res.stderr)?.[1];
        assert.ok(line, `${version}: no report in ${res.stderr}`);
        const execArgv = JSON.parse(line) as string[];
        const flagName = (f: string): string => f.split("=")[0]!;
        for (const flag of canRestart ? nodeFlagsFor(version, command) : shebangFlags) {
          const last = execArgv.filter((f) => flagName(f) === flagName(flag)).at(-1);
          assert.equal(last, flag, `${version} ${args.join(" ")}: ${JSON.stringify(execArgv)}`);
        }
      }
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

/**
 * `node <the server's flags> dist/main.js agent` (the image's `cluster-proxy agent`: its `#!`
 * line carries the default flags) and dist/proxy-agent.js start again once, under the agent's own.
 */
test("cluster-proxy agent and proxy-agent restart under the agent's flags", async () => {
  const dir = await mkdtemp(join(tmpdir(), "cp-agent-flags-"));
  try {
    const preload = join(dir, "report.mjs");
    await writeFile(
      preload,
      "process.on('exit', () => process.stderr.write('EXECARGV ' + JSON.stringify(process.execArgv) + '\\n'));\n",
    );
    const dist = join(root, "packages", "cli", "dist");
    for (const args of [
      [join(dist, "main.js"), "agent", "--help"],
      [join(dist, "proxy-agent.js"), "--help"],
    ]) {
      const res = await run(process.execPath, [...NODE_FLAGS, ...args], {
        env: { ...process.env, NODE_OPTIONS: `--import=${pathToFileURL(preload).href}` },
      });
      const reports = [...res.stderr.matchAll(/^EXECARGV (.*)$/gm)].map((m) => JSON.parse(m[1]!) as string[]);
      assert.equal(reports.length, 1, res.stderr);
      assert.deepEqual(reports[0], [...NODE_FLAGS, "--max-semi-space-size=1"], args.join(" "));
      assert.match(res.stdout, /^Usage: cluster-proxy agent/);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("the published packages' engines are the majors image/versions.json pins", async () => {
  const versions = JSON.parse(await readFile(join(root, "image", "versions.json"), "utf8")) as {
    node: { version: string };
    nodeSupported: { version: string }[];
  };
  const majors = [versions.node, ...versions.nodeSupported].map((p) => Number(p.version.split(".")[0]));
  const oldest = Math.min(...majors);
  // Every major from the oldest supported to the image's is pinned (so the test above starts it).
  for (let m = oldest; m <= Math.max(...majors); m += 2) assert.ok(majors.includes(m), `no pinned Node ${m}`);
  for (const dir of await readdir(join(root, "packages"))) {
    const pkg = JSON.parse(await readFile(join(root, "packages", dir, "package.json"), "utf8")) as {
      engines?: { node?: string };
    };
    assert.equal(pkg.engines?.node, `>=${oldest}`, `packages/${dir}/package.json engines.node`);
  }
});
