// Small process helpers: bounded synchronous commands, detached background processes in a
// network namespace, PID liveness and bounded stopping.
import { spawn, spawnSync } from "node:child_process";
import { closeSync, openSync } from "node:fs";

export class CommandError extends Error {}

export interface RunOptions {
  timeoutMs?: number;
  input?: string;
  allowFail?: boolean;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

export interface RunResult {
  status: number;
  stdout: string;
  stderr: string;
}

/** Runs a command to completion (bounded by timeoutMs, default 60s). Throws on failure unless allowFail. */
export function run(cmd: string, args: string[], opts: RunOptions = {}): RunResult {
  const res = spawnSync(cmd, args, {
    encoding: "utf8",
    timeout: opts.timeoutMs ?? 60_000,
    input: opts.input,
    env: opts.env ?? process.env,
    cwd: opts.cwd,
    maxBuffer: 64 * 1024 * 1024,
  });
  const out: RunResult = { status: res.status ?? -1, stdout: res.stdout ?? "", stderr: res.stderr ?? "" };
  if (res.error) {
    if (opts.allowFail) return { ...out, stderr: `${out.stderr}${res.error.message}` };
    throw new CommandError(`${cmd} ${args.join(" ")}: ${res.error.message}`);
  }
  if (out.status !== 0 && !opts.allowFail) {
    throw new CommandError(
      `${cmd} ${args.join(" ")} exited ${out.status ?? res.signal}: ${out.stderr.trim() || out.stdout.trim()}`,
    );
  }
  return out;
}

/** Same as run(), inside network namespace `ns` (ip netns exec works from any namespace as root). */
export function runIn(ns: string, cmd: string, args: string[], opts: RunOptions = {}): RunResult {
  return run("ip", ["netns", "exec", ns, cmd, ...args], opts);
}

/**
 * Starts a long-running process detached (own session), in namespace `ns`, output appended to
 * `logFile`. `ip netns exec` execs the command, so the returned PID is the process itself.
 * `netOnly` enters only the network namespace (nsenter --net), keeping the caller's mount
 * namespace: needed by a process that itself creates named network namespaces (`ip netns add`
 * inside `ip netns exec`'s private mount namespace would not be seen by anyone else).
 */
export function startDetached(
  ns: string,
  cmd: string,
  args: string[],
  logFile: string,
  env?: NodeJS.ProcessEnv,
  cwd?: string,
  netOnly = false,
): number {
  const fd = openSync(logFile, "a");
  try {
    const [launcher, ...launch] = netOnly ? ["nsenter", `--net=/run/netns/${ns}`, "--"] : ["ip", "netns", "exec", ns];
    const child = spawn(launcher, [...launch, cmd, ...args], {
      detached: true,
      stdio: ["ignore", fd, fd],
      env: env ?? process.env,
      cwd,
    });
    if (child.pid === undefined) throw new CommandError(`could not start ${cmd}`);
    child.unref();
    return child.pid;
  } finally {
    closeSync(fd);
  }
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
  // A zombie (our own exited child not yet reaped) counts as dead.
  const stat = run("ps", ["-o", "stat=", "-p", String(pid)], { allowFail: true }).stdout.trim();
  return stat !== "" && !stat.startsWith("Z");
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** SIGTERM, wait up to graceMs, then SIGKILL. Bounded. */
export async function stopPids(pids: number[], graceMs = 5_000): Promise<void> {
  const live = pids.filter((p) => p > 1 && pidAlive(p));
  for (const p of live) {
    try {
      process.kill(p, "SIGTERM");
    } catch {
      /* gone */
    }
  }
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline && live.some(pidAlive)) await sleep(100);
  for (const p of live) {
    if (pidAlive(p)) {
      try {
        process.kill(p, "SIGKILL");
      } catch {
        /* gone */
      }
    }
  }
  const killDeadline = Date.now() + 3_000;
  while (Date.now() < killDeadline && live.some(pidAlive)) await sleep(50);
}

/** Polls `check` every intervalMs until it returns a truthy value or timeoutMs passes (then throws with `what`). */
export async function waitFor<T>(
  what: string,
  timeoutMs: number,
  check: () => T | Promise<T>,
  intervalMs = 500,
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let lastErr: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v) return v;
    } catch (err) {
      lastErr = err;
    }
    if (Date.now() > deadline) {
      const detail = lastErr instanceof Error ? `: ${lastErr.message}` : "";
      throw new CommandError(`timed out after ${(timeoutMs / 1000).toFixed(0)}s waiting for ${what}${detail}`);
    }
    await sleep(intervalMs);
  }
}
