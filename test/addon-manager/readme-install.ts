// The README's "Install on a hub" commands, as the end-to-end test runs them: every command
// exactly as written (kubectl and cluster-proxy on PATH, KUBECONFIG the hub's), except that the
// long-running `cluster-proxy addon-manager ... &` becomes a ManagerProcess of the test (with the
// same flags) so the test can read its log, restart it and stop it.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { repoRoot } from "../env/config.js";

export const INSTALL_BEGIN = "<!-- install-hub:begin -->";
export const INSTALL_END = "<!-- install-hub:end -->";

export type InstallStep = { kind: "shell"; script: string } | { kind: "manager"; args: string[] };

/** The steps of the README's install block, in order. */
export function readmeInstallSteps(readme = readFileSync(join(repoRoot, "README.md"), "utf8")): InstallStep[] {
  const start = readme.indexOf(INSTALL_BEGIN);
  const end = readme.indexOf(INSTALL_END);
  if (start < 0 || end < start) throw new Error(`README.md has no ${INSTALL_BEGIN} ... ${INSTALL_END} block`);
  const block = /```sh\n([\s\S]*?)```/.exec(readme.slice(start, end))?.[1];
  if (!block) throw new Error("the README's install block has no ```sh code");
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
