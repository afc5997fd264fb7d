/**
 * A kubectl process in the test environment's lab namespace (where its kubeconfigs' addresses
 * route), with its output lines and their arrival times: for what runs a while (`logs -f`,
 * `get -w`, `port-forward`, `attach`) or takes stdin.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { nsOf } from "./config.js";
import type { TestEnv } from "./fixture.js";

/** How a kubectl run ended. */
export interface KubectlDone {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** One running kubectl (`ip netns exec <lab> kubectl --kubeconfig <kubeconfig> ...args`). */
export class KubectlProcess {
  readonly child: ChildProcess;
  stdout = "";
  stderr = "";
  /** Each complete stdout line, with the time it arrived. */
  readonly lines: { at: number; line: string }[] = [];
  /** Resolves when the process has ended. */
  readonly exited: Promise<KubectlDone>;
  private partial = "";
  private readonly waiters = new Set<() => void>();

  constructor(
    env: TestEnv,
    kubeconfig: string,
    args: string[],
    opts: { env?: Record<string, string>; cwd?: string } = {},
  ) {
    this.child = spawn(
      "ip",
      ["netns", "exec", nsOf("lab"), join(env.state.binDir, "kubectl"), "--kubeconfig", kubeconfig, ...args],
      { env: { ...process.env, ...opts.env }, cwd: opts.cwd, stdio: ["pipe", "pipe", "pipe"] },
    );
    this.child.stdout!.on("data", (d: Buffer) => {
      const at = Date.now();
      this.stdout += d.toString();
      const parts = (this.partial + d.toString()).split("\n");
      this.partial = parts.pop()!;
      for (const line of parts) this.lines.push({ at, line });
      this.notify();
    });
    this.child.stderr!.on("data", (d: Buffer) => {
      this.stderr += d.toString();
      this.notify();
    });
    this.exited = new Promise((resolve) => {
      this.child.on("close", (code) => {
        this.notify();
        resolve({ code, stdout: this.stdout, stderr: this.stderr });
      });
    });
  }

  /** Whether the process has ended. */
  get ended(): boolean {
    return this.child.exitCode !== null || this.child.signalCode !== null;
  }

  private notify(): void {
    for (const w of this.waiters) w();
  }

  /** Resolves once `check` holds (checked on every output), or fails after timeoutMs or when kubectl ends. */
  until<T>(what: string, timeoutMs: number, check: () => T | undefined | null | false): Promise<T> {
    return new Promise((resolve, reject) => {
      const attempt = (): void => {
        const v = check();
        if (v) {
          cleanup();
          resolve(v);
        } else if (this.ended) {
          cleanup();
          reject(new Error(`kubectl ended before ${what}: ${this.stdout}${this.stderr}`));
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`timed out after ${timeoutMs}ms waiting for ${what}: ${this.stdout}${this.stderr}`));
      }, timeoutMs);
      const cleanup = (): void => {
        clearTimeout(timer);
        this.waiters.delete(attempt);
      };
      this.waiters.add(attempt);
      attempt();
    });
  }

  /** SIGTERM, SIGKILL after 5 s; resolves when it has ended. */
  async stop(): Promise<void> {
    if (!this.ended) this.child.kill("SIGTERM");
    const t = setTimeout(() => this.child.kill("SIGKILL"), 5_000);
    await this.exited;
    clearTimeout(t);
  }
}

/**
 * Runs kubectl to its end, bounded by `timeoutMs` (default 60 s, then SIGKILL), with `input` (or
 * nothing) on its stdin.
 */
export async function runKubectl(
  env: TestEnv,
  kubeconfig: string,
  args: string[],
  opts: { env?: Record<string, string>; input?: string; timeoutMs?: number; cwd?: string } = {},
): Promise<KubectlDone> {
  const k = new KubectlProcess(env, kubeconfig, args, opts);
  k.child.stdin!.end(opts.input ?? "");
  const t = setTimeout(() => k.child.kill("SIGKILL"), opts.timeoutMs ?? 60_000);
  const done = await k.exited;
  clearTimeout(t);
  return done;
}
