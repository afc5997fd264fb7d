// The commands the README, the chart's README and the chart's notes give an operator, as the
// end-to-end tests run them: every command exactly as written (kubectl, helm and cluster-proxy on
// PATH, KUBECONFIG the hub's). In the README's install block by hand, the long-running
// `cluster-proxy addon-manager ... &` becomes a ManagerProcess of the test (with the same flags) so
// the test can read its log, restart it and stop it.
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { NODE_FLAGS } from "@cluster-proxy/cli";
import { nsOf, paths, repoRoot } from "../env/config.js";
import type { RunResult } from "../env/exec.js";
import type { TestEnv } from "../env/fixture.js";

export type InstallStep = { kind: "shell"; script: string } | { kind: "manager"; args: string[] };

/**
 * The ```sh code between `<!-- <name>:begin -->` and `<!-- <name>:end -->` of the repository file
 * `file` (e.g. README.md, charts/cluster-proxy/README.md), exactly as the reader sees it.
 */
export function markedShellBlock(
  file: string,
  name: string,
  text = readFileSync(join(repoRoot, file), "utf8"),
): string {
  const begin = `<!-- ${name}:begin -->`;
  const start = text.indexOf(begin);
  const end = text.indexOf(`<!-- ${name}:end -->`);
  if (start < 0 || end < start) throw new Error(`${file} has no ${begin} ... <!-- ${name}:end --> block`);
  const block = /```sh\n([\s\S]*?)```/.exec(text.slice(start, end))?.[1];
  if (!block) throw new Error(`the ${name} block of ${file} has no \`\`\`sh code`);
  return block;
}

/**
 * The commands a rendered NOTES.txt prints for the reader to run: its lines indented by five
 * spaces that start with kubectl, helm or cluster-proxy. A command with a `<placeholder>` is
 * refused: what the notes print must run as printed.
 */
export function notesCommands(notes: string): string[] {
  const commands = notes
    .split("\n")
    .filter((l) => /^ {5}(kubectl|helm|cluster-proxy) /.test(l))
    .map((l) => l.trim());
  const placeholder = commands.find((c) => /<[a-z][^>]*>/.test(c));
  if (placeholder) throw new Error(`the notes print a command that cannot run as printed: ${placeholder}`);
  return commands;
}

/**
 * A PATH where an operator's commands find `cluster-proxy` (the built CLI, as an installed package
 * or the image has it), `kubectl` and `helm` (the environment's), under `dir`.
 */
export function operatorPath(env: TestEnv, dir: string): string {
  const bin = join(dir, "bin");
  mkdirSync(bin, { recursive: true });
  writeFileSync(
    join(bin, "cluster-proxy"),
    `#!/bin/sh\nexec "${process.execPath}" ${NODE_FLAGS.join(" ")} "${join(repoRoot, "packages", "cli", "dist", "main.js")}" "$@"\n`,
    { mode: 0o755 },
  );
  symlinkSync(paths.helm, join(bin, "helm"));
  return [bin, env.state.binDir, dirname(process.execPath), process.env.PATH].join(":");
}

/**
 * Runs `script` as an operator on a machine outside the hub: in the lab namespace, from the
 * repository root (where `charts/cluster-proxy` is), with `path` and KUBECONFIG the hub's; bash
 * stops at the first failing command and traces each (`-x`) to stderr.
 */
export function runAsOperator(env: TestEnv, path: string, script: string, timeoutMs: number): Promise<RunResult> {
  return new Promise((resolve) => {
    execFile(
      "ip",
      [
        "netns",
        "exec",
        nsOf("lab"),
        "env",
        `PATH=${path}`,
        `KUBECONFIG=${env.kubeconfigPath("hub")}`,
        "bash",
        "-euxo",
        "pipefail",
        "-c",
        script,
      ],
      { timeout: timeoutMs, cwd: repoRoot, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) =>
        resolve({ status: err ? (typeof err.code === "number" ? err.code : 1) : 0, stdout, stderr }),
    );
  });
}

/** The steps of the README's install block, in order. */
export function readmeInstallSteps(readme = readFileSync(join(repoRoot, "README.md"), "utf8")): InstallStep[] {
  const block = markedShellBlock("README.md", "install-hub", readme);
  const steps: InstallStep[] = [];
  const lines = block.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.replace(/\s+#.*$/, "").trimEnd();
    if (!line.trim() || line.trimStart().startsWith("#")) continue;
    if (line.startsWith("cluster-proxy addon-manager ")) {
      if (!line.endsWith(" &")) throw new Error(`the manager's line must run it in the background: ${line}`);
      steps.push({ kind: "manager", args: line.slice("cluster-proxy addon-manager ".length, -2).trim().split(/\s+/) });
      continue;
    }
    const heredoc = /<<'(\w+)'$/.exec(line);
    if (!heredoc) {
      steps.push({ kind: "shell", script: line });
      continue;
    }
    const body: string[] = [line];
    for (i++; i < lines.length && lines[i] !== heredoc[1]; i++) body.push(lines[i]!);
    if (i >= lines.length) throw new Error(`unterminated here-document after: ${line}`);
    body.push(heredoc[1]!);
    steps.push({ kind: "shell", script: body.join("\n") });
  }
  return steps;
}

/**
 * The manager's flags from the README but `--kubeconfig` and `--namespace`, which ManagerProcess
 * sets (the test's hub kubeconfig, and this namespace, returned).
 */
export function managerFlags(args: string[]): { args: string[]; namespace: string } {
  const out: string[] = [];
  let namespace = "";
  for (let i = 0; i < args.length; i++) {
    const [flag, inline] = args[i]!.split(/=(.*)/s) as [string, string | undefined];
    const value = inline ?? args[++i];
    if (value === undefined) throw new Error(`${flag} has no value in the README's manager line`);
    if (flag === "--kubeconfig") continue;
    if (flag === "--namespace") namespace = value;
    else out.push(`${flag}=${value}`);
  }
  if (!namespace) throw new Error("the README's manager line has no --namespace");
  return { args: out, namespace };
}
