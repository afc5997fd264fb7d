/**
 * The first hour works as written: every command of the README's local-hub block and every
 * command the running `cluster-proxy up` prints is run verbatim (extracted, never re-typed)
 * against that `up`, as a user runs them: in a second shell, in a checkout whose
 * node_modules/.bin is not on PATH until the README's `export` line puts it there. The SDK
 * snippets of the README and the ready screen run too, and kubectl exec and port-forward through
 * the generated kubeconfig reach east's stand-in apiserver.
 *
 * `up` uses its defaults (port base 8080, ./.cluster-proxy): the README's commands name them.
 * The work directory is a temp dir linked to the checkout's files (node_modules, packages, ...),
 * so ./.cluster-proxy there is this test's own.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { promisify } from "node:util";
import { canListen } from "@cluster-proxy/tunnel/testing";
import { Harness } from "../framework/harness.js";
import { REPO } from "../framework/repo.js";
import { waitForProc, type Proc } from "../framework/process.js";
import { assertShownOutput, docBlock, transcriptSteps } from "../infra/addon/readme-install.js";

const run = promisify(execFile);
const h = new Harness();
let work = "";
let up: Proc;
/** The user's PATH: kubectl's directory, no node_modules/.bin. */
let userPath = "";
const env = (): NodeJS.ProcessEnv => ({ ...process.env, PATH: userPath, NO_COLOR: "1", KUBECONFIG: "" });

/** The ```sh block of the README's local-hub section, as commands (continuation lines joined). */
function readmeLocalHubCommands(readme: string): string[] {
  const start = readme.indexOf("## The local hub: `cluster-proxy up`");
  const section = readme.slice(start, readme.indexOf("\n## ", start + 1));
  const block = /```sh\n([^]*?)```/.exec(section)?.[1];
  assert.ok(block, "the local-hub section has a sh block");
  return block
    .replace(/\\\n\s*/g, "")
    .split("\n")
    .filter((l) => l.trim() !== "");
}

/** The commands of up's ready screen: its indented shell lines. */
function readyScreenCommands(output: string): string[] {
  const screen = output.slice(output.indexOf("cluster-proxy hub is up."));
  return [...screen.matchAll(/^ {2}((?:curl|cluster-proxy|kubectl|export) .+)$/gm)].map((m) => m[1]!);
}

/** A TypeScript/JavaScript snippet run as an ES module in the work directory. */
async function runSnippet(name: string, code: string): Promise<string> {
  const file = join(work, `${name}.mjs`);
  await writeFile(file, code);
  const { stdout } = await run(process.execPath, [file], { cwd: work, env: env(), timeout: 30_000 });
  return stdout;
}

/** Run one printed command in bash as the user would, after the export lines before it. */
async function sh(command: string, exports: string[]): Promise<{ code: number; out: string }> {
  const script = [...exports, command].join("\n");
  return run("bash", ["-c", script], { cwd: work, env: env(), timeout: 60_000 }).then(
    ({ stdout, stderr }) => ({ code: 0, out: stdout + stderr }),
    (e: { code?: number; stdout?: string; stderr?: string }) => ({
      code: typeof e.code === "number" ? e.code : -1,
      out: (e.stdout ?? "") + (e.stderr ?? ""),
    }),
  );
}

/** What a command must show besides exiting 0. */
function expectOutput(command: string, out: string): void {
  assert.doesNotMatch(out, /DeprecationWarning|DEP0\d+|ExperimentalWarning/, `${command}: no node warnings\n${out}`);
  if (/^curl .*http:\/\/(east|west):80\//.test(command))
    assert.match(out, new RegExp(`hello from ${/(east|west):80/.exec(command)![1]}`), command);
  if (/^cluster-proxy health/.test(command)) {
    assert.match(out, /^east +True +True +True +[\d.]+m?s +-$/m, out);
    assert.match(out, /^west +True +True +True +[\d.]+m?s +-$/m, out);
  }
  if (/^cluster-proxy kubeconfig/.test(command)) assert.match(out, /^wrote \S+\.kubeconfig/m, out);
  if (/^kubectl .* get namespaces/.test(command)) assert.match(out, /^east-apps +Active/m, out);
  const echo = /^kubectl .* exec sample -- echo (.+)$/.exec(command);
  if (echo) assert.equal(out, `${echo[1]}\n`);
  if (/^kubectl .* exec sample -- hostname$/.test(command)) assert.equal(out, "sample\n");
}

/** Start a long-running printed command (port-forward), use what it forwards, stop it with Ctrl-C. */
async function portForward(command: string, exports: string[]): Promise<void> {
  const p = h.spawnProc("port-forward", "bash", ["-c", [...exports, `exec ${command}`].join("\n")], {
    env: env(),
    cwd: work,
  });
  await waitForProc(p, "port-forward to listen", () => Promise.resolve(/Forwarding from/.test(p.output())));
  const port = /Forwarding from 127\.0\.0\.1:(\d+) -> (\w+):80/.exec(p.output());
  assert.ok(port, p.output());
  const { stdout } = await run("curl", ["-sS", "--max-time", "10", `http://127.0.0.1:${port[1]}/`]);
  assert.match(stdout, new RegExp(`^hello from ${port[2]}`));
  assert.equal(await p.kill("SIGINT"), 0, p.output());
}

/** Run `commands` in order, each after the export lines before it; every one must succeed. */
async function runAll(where: string, commands: string[]): Promise<void> {
  const exports: string[] = [];
  for (const command of commands) {
    if (command.startsWith("export ")) {
      exports.push(command);
      continue;
    }
    if (command.startsWith("cluster-proxy port-forward ")) {
      await portForward(command, exports);
      continue;
    }
    const { code, out } = await sh(command, exports);
    assert.equal(code, 0, `${where}: ${command}\n${out}`);
    expectOutput(command, out);
  }
}

before(async () => {
  await h.init([]);
  work = await mkdtemp(join(tmpdir(), "cp-first-hour-"));
  // A checkout to run npm in: what `npm run up` reads, linked.
  for (const f of [
    "node_modules",
    "package.json",
    "packages",
    "scripts",
    "image",
    "tsconfig.base.json",
    "tsconfig.build.json",
  ])
    await symlink(join(REPO, f), join(work, f));
  for (let p = 8080; p <= 8096; p++)
    assert.ok(await canListen(p), `port ${p} is taken: the README's commands use up's default ports 8080-8096`);
  const kubectlDir = join(
    execFileSync(process.execPath, [join(REPO, "scripts", "k8s-binaries.mjs")], { encoding: "utf8" })
      .trim()
      .split("\n")
      .pop()!,
    "bin",
  );
  assert.ok(existsSync(join(kubectlDir, "kubectl")), kubectlDir);
  userPath = [
    kubectlDir,
    dirname(process.execPath),
    ...(process.env.PATH ?? "").split(delimiter).filter((d) => !d.includes("node_modules")),
  ].join(delimiter);
  // The README's first line as written, after its `npm ci` (the install CI has done; its
  // node_modules is linked): `npm run up` builds and runs up on the image's Node.js, in a process
  // group of its own that gets Ctrl-C as a terminal's would.
  const firstLine = readFileSync(join(REPO, "README.md"), "utf8").split("\n")[1] ?? "";
  const command = /^npm ci && (.+?)\s+#/.exec(firstLine)?.[1];
  if (command !== "npm run up") assert.fail(`the README's first line runs npm run up: ${firstLine}`);
  up = h.spawnProc("up", "bash", ["-c", command], { env: env(), cwd: work, processGroup: true });
  await waitForProc(up, "up's ready screen", () => Promise.resolve(/Running; press Ctrl-C/.test(up.output())));
});

after(async () => {
  if (up) {
    await up.kill("SIGINT");
  }
  await h.close();
  if (work) await rm(work, { recursive: true, force: true });
});

test("without the README's export line there is no cluster-proxy on the user's PATH (the line is needed)", async () => {
  const { code } = await sh("command -v cluster-proxy", []);
  assert.notEqual(code, 0);
});

test("every command of the README's local-hub block succeeds as written", async () => {
  const commands = readmeLocalHubCommands(readFileSync(join(REPO, "README.md"), "utf8"));
  assert.ok(commands.some((c) => c.startsWith("cluster-proxy health")));
  await runAll("README", commands);
});

test("the local-hub transcript of the hub operations guide runs as shown", async () => {
  // After the local-hub block, which wrote .cluster-proxy/east.kubeconfig.
  assert.ok(existsSync(join(work, ".cluster-proxy", "east.kubeconfig")), "the local-hub block ran first");
  const steps = transcriptSteps(docBlock("operations-local-hub"));
  assert.ok(steps.length > 0);
  for (const step of steps) {
    const { code, out } = await sh(step.command, []);
    assert.equal(code, 0, `${step.command}\n${out}`);
    assertShownOutput(step, out);
  }
});

test("every command up's ready screen prints succeeds as printed", async () => {
  const commands = readyScreenCommands(up.output());
  for (const want of [
    "curl ",
    "cluster-proxy kubeconfig ",
    "kubectl ",
    "cluster-proxy health",
    "cluster-proxy port-forward ",
  ])
    assert.ok(
      commands.some((c) => c.startsWith(want)),
      `the ready screen prints a ${want.trim()} line:\n${up.output()}`,
    );
  await runAll("ready screen", commands);
});

test("the --help examples for the local hub succeed as printed", async () => {
  const exports = [`export PATH=${join(work, "node_modules", ".bin")}:$PATH`];
  const examples: string[] = [];
  for (const command of ["health", "kubeconfig", "port-forward"]) {
    const help = await sh(`cluster-proxy ${command} --help`, exports);
    assert.equal(help.code, 0, help.out);
    for (const m of help.out.matchAll(/^ {2}(cluster-proxy .+?)\s+# the local hub of "cluster-proxy up"/gm))
      examples.push(m[1]!);
  }
  assert.equal(examples.length, 3, examples.join("\n"));
  await runAll("--help", [...exports, ...examples]);
});

test("the SDK snippets of the README and of the ready screen print east's answer", async () => {
  const readme = readFileSync(join(REPO, "README.md"), "utf8");
  const sdk = readme.slice(readme.indexOf("## The SDK in five lines"));
  const readmeSnippet = /```ts\n([^]*?)```/.exec(sdk)?.[1];
  assert.ok(readmeSnippet);
  assert.match(await runSnippet("readme-sdk", readmeSnippet), /^HTTP\/1\.1 200 OK[^]*hello from east/);
  const screen = up.output();
  const from = screen.indexOf('  import { dial, loadProxyTls } from "@cluster-proxy/client";');
  assert.ok(from > 0, screen);
  const snippet = screen
    .slice(from, screen.indexOf("\n\n", from))
    .split("\n")
    .map((l) => l.replace(/^ {2}/, ""))
    .join("\n");
  assert.match(await runSnippet("screen-sdk", snippet), /^HTTP\/1\.1 200 OK[^]*hello from /);
});

test("kubectl exec and port-forward through the generated kubeconfig reach east's stand-in apiserver (exec runs)", async () => {
  const kubeconfig = join(work, ".cluster-proxy", "east.kubeconfig");
  if (!existsSync(kubeconfig)) {
    const { code, out } = await sh(
      `cluster-proxy kubeconfig --cluster east --token demo-token-east --output ${kubeconfig}`,
      [`export PATH=${join(work, "node_modules", ".bin")}:$PATH`],
    );
    assert.equal(code, 0, out);
  }
  // Before the fix the proxy URL lacked the ":" and kubectl's WebSocket dialer sent no
  // Proxy-Authorization: the door answered Internal Server Error. Now exec runs in east's
  // pretend container, and port-forward reaches the stand-in, which says it runs no containers.
  const exec = await sh(`kubectl --kubeconfig ${kubeconfig} exec sample -- echo exec through the hub`, []);
  assert.equal(exec.code, 0, exec.out);
  assert.equal(exec.out, "exec through the hub\n");
  const missing = await sh(`kubectl --kubeconfig ${kubeconfig} exec sample -- date`, []);
  assert.equal(missing.code, 127, missing.out);
  assert.match(missing.out, /date: command not found/);
  const forward = await sh(`kubectl --kubeconfig ${kubeconfig} port-forward pod/sample :80`, []);
  assert.notEqual(forward.code, 0);
  assert.match(
    forward.out,
    /portforward reached the stand-in kube-apiserver of cluster east through the hub/,
    forward.out,
  );
  // The proxy URL of older releases (https://east@..., no password): plain requests still carry
  // the cluster, exec and port-forward do not, and the door now says what is missing instead of
  // a bare Internal Server Error.
  const old = join(work, ".cluster-proxy", "east-no-password.kubeconfig");
  await writeFile(old, readFileSync(kubeconfig, "utf8").replace("https://east:@", "https://east@"));
  const get = await sh(`kubectl --kubeconfig ${old} get namespaces`, []);
  assert.equal(get.code, 0, get.out);
  for (const command of [`exec sample -- date`, `port-forward pod/sample :80`]) {
    const r = await sh(`kubectl --kubeconfig ${old} ${command}`, []);
    assert.notEqual(r.code, 0, command);
    assert.match(
      r.out,
      /No agent available for kubernetes\.default\.svc:443: name the cluster in the proxy URL \(https:\/\/<cluster>:@host:port\)/,
      `${command}: ${r.out}`,
    );
  }
});
