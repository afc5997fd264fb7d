/** Test-only: a CLI context that captures what a command prints, and running the CLI with it. */
import { EventEmitter } from "node:events";
import type { CliContext } from "../cli-context.js";
import { runCli } from "../program.js";

/** A {@link CliContext} whose standard output and error go to `out` and `err`. */
export interface Captured extends CliContext {
  out: string[];
  err: string[];
}

/** A capturing context: no colours, no signals sent, `env` as the environment. */
export function capture(env: NodeJS.ProcessEnv = {}): Captured {
  const out: string[] = [];
  const err: string[] = [];
  return {
    out,
    err,
    stdout: (t) => void out.push(t),
    stderr: (t) => void err.push(t),
    env,
    signals: new EventEmitter(),
    colors: false,
    logFd: 2,
  };
}

/** Run `cluster-proxy <args>`: its exit status and what it printed. */
export async function runCaptured(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number; out: string; err: string }> {
  const ctx = capture(env);
  const code = await runCli(args, ctx);
  return { code, out: ctx.out.join(""), err: ctx.err.join("") };
}
