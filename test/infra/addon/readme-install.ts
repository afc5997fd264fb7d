// The commands the README, the guides in docs/, the chart's README and the chart's notes give an
// operator, as the end-to-end tests run them: every command exactly as written (kubectl, helm and
// cluster-proxy on PATH, KUBECONFIG the hub's). In the guide's install block by hand, the long-running
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

/** The languages of the marked blocks: shell commands, a typed transcript, a file, a program's lines. */
export type DocBlockLang = "sh" | "console" | "json" | "go";

/**
 * The ```<lang> code between `<!-- <name>:begin -->` and `<!-- <name>:end -->` of the repository
 * file `file` (e.g. README.md, docs/guides/install-hub.md), exactly as the reader sees it.
 */
export function markedBlock(
  file: string,
  name: string,
  lang: DocBlockLang,
  text = readFileSync(join(repoRoot, file), "utf8"),
): string {
  const begin = `<!-- ${name}:begin -->`;
  const start = text.indexOf(begin);
  const end = text.indexOf(`<!-- ${name}:end -->`);
  if (start < 0 || end < start) throw new Error(`${file} has no ${begin} ... <!-- ${name}:end --> block`);
  const block = new RegExp("```" + lang + "\\n([\\s\\S]*?)```").exec(text.slice(start, end))?.[1];
  if (!block) throw new Error(`the ${name} block of ${file} has no \`\`\`${lang} code`);
  return block;
}

/**
 * Every marked block a suite runs, and the repository file it lives in. A block moves with its
 * markers; test/integration/docs.test.ts checks that each one is where this table says.
 */
export const DOC_BLOCKS = {
  "install-chart": { file: "README.md", lang: "sh" },
  "install-hub": { file: "docs/guides/install-hub.md", lang: "sh" },
  "operations-chart": { file: "docs/guides/install-hub.md", lang: "sh" },
  "operations-health": { file: "docs/guides/hub-operations.md", lang: "console" },
  "operations-kubeconfig": { file: "docs/guides/hub-operations.md", lang: "console" },
  "operations-port-forward": { file: "docs/guides/hub-operations.md", lang: "console" },
  "operations-port-forward-use": { file: "docs/guides/hub-operations.md", lang: "console" },
  "operations-local-hub": { file: "docs/guides/hub-operations.md", lang: "console" },
  "workstation-start": { file: "README.md", lang: "sh" },
  "workstation-health": { file: "docs/guides/hub-operations.md", lang: "console" },
  "workstation-port-forward": { file: "docs/guides/hub-operations.md", lang: "console" },
  "workstation-kubeconfig": { file: "docs/guides/hub-operations.md", lang: "console" },
  "workstation-gateway": { file: "docs/guides/hub-operations.md", lang: "console" },
  "kubevela-cluster-gateway-deploy": { file: "docs/guides/hub-operations.md", lang: "sh" },
  "kubevela-cluster-gateway-cluster": { file: "docs/guides/hub-operations.md", lang: "sh" },
  "kubevela-cluster-gateway-get": { file: "docs/guides/hub-operations.md", lang: "console" },
  "take-one-out": { file: "charts/cluster-proxy/README.md", lang: "sh" },
  "uninstall-chart": { file: "charts/cluster-proxy/README.md", lang: "sh" },
  "own-placement": { file: "charts/cluster-proxy/README.md", lang: "sh" },
  "gateway-expose": { file: "docs/guides/gateway.md", lang: "sh" },
  "gateway-grant-hub": { file: "docs/guides/gateway.md", lang: "sh" },
  "gateway-grant-managed": { file: "docs/guides/gateway.md", lang: "sh" },
  "gateway-kubeconfig": { file: "docs/guides/gateway.md", lang: "sh" },
  "gateway-aggregated": { file: "docs/guides/gateway.md", lang: "sh" },
  "gateway-oidc": { file: "docs/guides/gateway.md", lang: "sh" },
  "gateway-exposed-services": { file: "docs/guides/gateway.md", lang: "sh" },
  "gateway-audit": { file: "docs/guides/gateway.md", lang: "sh" },
  "fleet-aggregated": { file: "docs/guides/gateway.md", lang: "sh" },
  "fleet-open": { file: "docs/guides/gateway.md", lang: "sh" },
  "fleet-token": { file: "docs/guides/gateway.md", lang: "sh" },
  "fleet-grant-viewer": { file: "docs/guides/gateway.md", lang: "sh" },
  "fleet-grant-auditor": { file: "docs/guides/gateway.md", lang: "sh" },
  "cluster-profile-enable": { file: "docs/guides/cluster-profile.md", lang: "sh" },
  "cluster-profile-consumer": { file: "docs/guides/cluster-profile.md", lang: "sh" },
  "cluster-profile-grant-managed": { file: "docs/guides/cluster-profile.md", lang: "sh" },
  "cluster-profile-provider": { file: "README.md", lang: "json" },
  "cluster-profile-go": { file: "README.md", lang: "go" },
  "cluster-profile-kubectl": { file: "README.md", lang: "sh" },
} as const satisfies Record<string, { file: string; lang: DocBlockLang }>;

export type DocBlockName = keyof typeof DOC_BLOCKS;

/** The code of the marked block `name` (see DOC_BLOCKS), exactly as the reader sees it. */
export function docBlock(name: DocBlockName): string {
  const { file, lang } = DOC_BLOCKS[name];
  return markedBlock(file, name, lang);
}

/** One command of a ```console transcript (its `$ ` line, as typed) and the output shown after it. */
export interface TranscriptStep {
  command: string;
  output: string[];
}

/** The steps of a ```console transcript (markedBlock(..., "console")), in order. */
export function transcriptSteps(block: string): TranscriptStep[] {
  const steps: TranscriptStep[] = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("$ ")) steps.push({ command: line.slice(2), output: [] });
    else if (steps.length === 0) {
      if (line.trim()) throw new Error(`a transcript starts with a "$ " line, not: ${line}`);
    } else if (line.trim()) steps[steps.length - 1]!.output.push(line);
  }
  return steps;
}

/**
 * A transcript's output line as a pattern for the real output: runs of spaces match any (tables
 * line up differently), and what varies from run to run matches any value of its shape (latencies,
 * times, kubectl's ages, source ports, pod names' hashes, pod addresses in parentheses); `[...]`
 * marks text the page leaves out (a long reason whose wording depends on timing) and matches any.
 */
export function transcriptLinePattern(line: string): RegExp {
  const escape = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/\s+/g, "\\s+");
  const shapes: [RegExp, (m: RegExpExecArray) => string][] = [
    [/\[\.\.\.\]/y, () => ".+?"],
    [/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ/y, () => "\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ"],
    [/\d+ms(?=\s|$)/y, () => "\\d+(?:ms|\\.\\ds)"],
    [/(?<=\s)\d+[smhd](?:\d+[smhd])?(?=\s|$)/y, () => "\\d+[smhd](?:\\d+[smhd])?"],
    [/(?<=from 127\.0\.0\.1:)\d+(?= to )/y, () => "\\d+"],
    [/(?<=\()\d+\.\d+\.\d+\.\d+(?=\))/y, () => "\\d+\\.\\d+\\.\\d+\\.\\d+"],
    [/\b([a-z][a-z0-9-]*)-[a-z0-9]{8,10}-[a-z0-9]{5}\b/y, (m) => `${escape(m[1]!)}-[a-z0-9]+-[a-z0-9]+`],
  ];
  const text = line.trim();
  let source = "";
  let literal = "";
  for (let i = 0; i < text.length;) {
    let matched = false;
    for (const [shape, pattern] of shapes) {
      shape.lastIndex = i;
      const m = shape.exec(text);
      if (!m) continue;
      source += escape(literal) + pattern(m);
      literal = "";
      i += m[0].length;
      matched = true;
      break;
    }
    if (!matched) literal += text[i++];
  }
  return new RegExp(`^${source}${escape(literal)}$`);
}

/** Each line a transcript shows after `step.command` is a line of `actual` (of its shape, see above). */
export function assertShownOutput(step: TranscriptStep, actual: string): void {
  const lines = actual.split("\n").map((l) => l.trim());
  for (const shown of step.output) {
    const pattern = transcriptLinePattern(shown);
    if (!lines.some((l) => pattern.test(l)))
      throw new Error(`the README shows after \`${step.command}\`:\n  ${shown}\nbut it printed:\n${actual}`);
  }
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
 * Runs `script` as an operator on a machine outside the hub: in the lab namespace (or the network
 * namespace `opts.netns`, e.g. a hub pod's, where cluster DNS names resolve), from the repository
 * root (where `charts/cluster-proxy` is) or `opts.cwd`, with `path`, KUBECONFIG the hub's and
 * `opts.env`; bash stops at the first failing command and traces each (`-x`) to stderr.
 * With `opts.typed`, `script` is one line as typed at a prompt: no `-euxo pipefail`, so
 * `cmd; echo "exit $?"` shows cmd's status.
 */
export function runAsOperator(
  env: TestEnv,
  path: string,
  script: string,
  timeoutMs: number,
  opts: { cwd?: string; env?: Record<string, string>; typed?: boolean; netns?: string } = {},
): Promise<RunResult> {
  const extra = Object.entries(opts.env ?? {}).map(([k, v]) => `${k}=${v}`);
  return new Promise((resolve) => {
    execFile(
      "ip",
      [
        "netns",
        "exec",
        opts.netns ?? nsOf("lab"),
        "env",
        `PATH=${path}`,
        `KUBECONFIG=${env.kubeconfigPath("hub")}`,
        ...extra,
        "bash",
        ...(opts.typed ? [] : ["-euxo", "pipefail"]),
        "-c",
        script,
      ],
      { timeout: timeoutMs, cwd: opts.cwd ?? repoRoot, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) =>
        resolve({ status: err ? (typeof err.code === "number" ? err.code : 1) : 0, stdout, stderr }),
    );
  });
}

/** The steps of the install block by hand (docs/guides/install-hub.md), in order. */
export function readmeInstallSteps(): InstallStep[] {
  const block = docBlock("install-hub");
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
