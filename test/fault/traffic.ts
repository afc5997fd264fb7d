/**
 * What the fault suite's clients do and what they saw: transfers through either front door
 * (HTTP CONNECT and the gRPC SDK, both on the hub's Unix sockets) to a cluster's transfer target,
 * each with a watchdog so a hang is reported as one instead of stalling the suite; and the leak
 * comparison of a process's figures before and after a fault.
 */
import { createHash } from "node:crypto";
import { once } from "node:events";
import type { Duplex } from "node:stream";
import { TunnelClient, dialConnect } from "@cluster-proxy/client";
import type { ProcessStats } from "@cluster-proxy/kit/process";
import { PatternStream, patternHash } from "../framework/harness.js";
import { PORT, type ClusterName, type FaultLab } from "./lab.js";
import { errorMessage } from "@cluster-proxy/errors";

export type Door = "connect" | "grpc";

/** Marks an outcome where the client waited past its watchdog: the failure the suite exists to catch. */
export const HANG = "HANG";
/** Marks a transfer that completed with wrong bytes. */
export const CORRUPT = "CORRUPT";

/** The address that reaches a cluster's transfer target. */
export const targetOf = (c: ClusterName): string => `127.0.0.1.${c}:${PORT.target}`;

/** Dial `c`'s transfer target through one front door of the lab's server. */
export function dialTarget(
  lab: FaultLab,
  door: Door,
  c: ClusterName,
  client: TunnelClient | undefined,
  timeoutMs = 10_000,
): Promise<Duplex> {
  if (door === "connect")
    return dialConnect(targetOf(c), { proxy: { udsPath: lab.sock("server-connect") }, timeoutMs });
  if (!client) throw new Error("the gRPC door needs a TunnelClient");
  return client.dial(targetOf(c), { timeoutMs });
}

/** A TunnelClient on the lab server's gRPC Unix socket. */
export function grpcClient(lab: FaultLab): TunnelClient {
  return new TunnelClient({ proxy: { udsPath: lab.sock("server-grpc") }, dialTimeoutMs: 10_000 });
}

/** How a client's connection ended. */
export interface Ending {
  how: "end" | "error" | "hang";
  error?: string;
  /** ms from `since` (see {@link Download.endedWithin}). */
  at: number;
  bytes: number;
}

/**
 * A download of `bytes` (default: more than any test waits for) from the target. Tracks bytes
 * received and how and when the connection ended; never rejects.
 */
export class Download {
  received = 0;
  readonly ended: Promise<Ending>;
  private readonly hash = createHash("sha256");
  private waiters: { n: number; resolve: () => void }[] = [];

  constructor(
    readonly socket: Duplex,
    readonly bytes = 4 * 1024 ** 3,
    readonly seed = 5,
  ) {
    socket.on("error", () => undefined); // seen through `ended`; a second error must not throw
    socket.write(`source ${bytes} ${seed}\n`);
    socket.on("data", (c: Buffer) => {
      this.received += c.length;
      this.hash.update(c);
      this.waiters = this.waiters.filter((w) => (this.received >= w.n ? (w.resolve(), false) : true));
    });
    this.ended = new Promise((resolve) => {
      socket.once("end", () => resolve({ how: "end", at: Date.now(), bytes: this.received }));
      socket.once("error", (e: Error) =>
        resolve({ how: "error", error: e.message, at: Date.now(), bytes: this.received }),
      );
      socket.once("close", () => resolve({ how: "end", at: Date.now(), bytes: this.received }));
    });
  }

  /** Resolve once `n` bytes arrived (rejects after `ms`). */
  async whenReceived(n: number, ms = 15_000): Promise<void> {
    if (this.received >= n) return;
    await withTimeout(new Promise<void>((resolve) => this.waiters.push({ n, resolve })), ms, `${n} bytes received`);
  }

  /** How it ended, timed from `since`; `how: "hang"` if it had not ended `ms` after `since`. */
  async endedWithin(since: number, ms: number): Promise<Ending> {
    const ending = await Promise.race([
      this.ended,
      new Promise<Ending>((r) =>
        setTimeout(() => r({ how: "hang", at: Date.now(), bytes: this.received }), since + ms - Date.now()).unref(),
      ),
    ]);
    return { ...ending, at: ending.at - since };
  }

  /** True iff every byte of the full download arrived and matches the target's pattern. */
  exact(): boolean {
    return this.received === this.bytes && this.hash.digest("hex") === patternHash(this.bytes, this.seed);
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** Download `bytes` from `c` through `door` and check them; resolves with what went wrong, or "" if exact. */
export async function exactDownload(
  lab: FaultLab,
  door: Door,
  c: ClusterName,
  client: TunnelClient | undefined,
  bytes: number,
  seed: number,
  ms = 60_000,
): Promise<string> {
  try {
    const d = new Download(await dialTarget(lab, door, c, client), bytes, seed);
    const ending = await d.endedWithin(Date.now(), ms);
    d.destroy();
    if (ending.how === "hang") return `${HANG}: download of ${bytes} B via ${door} to ${c} stuck at ${ending.bytes} B`;
    if (d.received < bytes) return `download via ${door} to ${c} cut at ${d.received} B: ${ending.error ?? "EOF"}`;
    if (!d.exact()) return `${CORRUPT}: download via ${door} to ${c}: ${d.received}/${bytes} B, wrong bytes`;
    return "";
  } catch (e) {
    return `download via ${door} to ${c}: ${errorMessage(e)}`;
  }
}

/** Upload `bytes` to `c` through `door`; resolves with what went wrong, or "" if the target's hash matches. */
export async function exactUpload(
  lab: FaultLab,
  door: Door,
  c: ClusterName,
  client: TunnelClient | undefined,
  bytes: number,
  seed: number,
  ms = 60_000,
): Promise<string> {
  let socket: Duplex | undefined;
  try {
    const s = await dialTarget(lab, door, c, client);
    socket = s;
    s.on("error", () => undefined); // seen through `answer`; a second error must not throw
    const answer = new Promise<string>((resolve, reject) => {
      let text = "";
      s.on("data", (c: Buffer) => {
        text += c.toString();
        if (text.includes("\n")) resolve(text.trim());
      });
      s.once("error", reject);
      s.once("close", () => reject(new Error(`closed before the target answered (${JSON.stringify(text)})`)));
    });
    answer.catch(() => undefined); // awaited below; may settle before that
    const gen = new PatternStream(seed);
    const hash = createHash("sha256");
    s.write(`sink ${bytes}\n`);
    for (let left = bytes; left > 0; left -= 64 * 1024) {
      const chunk = gen.next(Math.min(64 * 1024, left));
      hash.update(chunk);
      // A cut connection never drains: `answer` rejects with why instead.
      if (!s.write(chunk)) await withTimeout(Promise.race([once(s, "drain"), answer]), ms, "upload drain");
    }
    const got = await withTimeout(answer, ms, "the target's hash");
    const want = `${hash.digest("hex")} ${bytes}`;
    return got === want ? "" : `${CORRUPT}: upload via ${door} to ${c}: target saw ${got}, sent ${want}`;
  } catch (e) {
    return `upload via ${door} to ${c}: ${errorMessage(e)}`;
  } finally {
    socket?.destroy();
  }
}

export async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>(
        (_, reject) => (timer = setTimeout(() => reject(new Error(`${HANG}: no ${what} within ${ms} ms`)), ms)),
      ),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** The figures compared for leaks. */
export interface Footprint {
  fds: number;
  timers: number;
  handles: number;
  heapMiB: number;
}

export function footprint(s: ProcessStats): Footprint {
  const handles = Object.values(s.activeResources).reduce((a, b) => a + b, 0);
  return {
    fds: s.openFds ?? -1,
    timers: s.activeResources.Timeout ?? 0,
    handles,
    heapMiB: Math.round((s.heapUsedBytes / 1024 ** 2) * 10) / 10,
  };
}

/** Allowed growth: a few fds/handles (log files, a lazily opened resolver), a few MiB of heap (code caches). */
export const LEAK_SLACK: Footprint = { fds: 3, timers: 2, handles: 3, heapMiB: 8 };

/** Every figure of `after` that grew more than `slack` over `before`, as text ([] = no leak). */
export function leaks(before: Footprint, after: Footprint, slack: Footprint = LEAK_SLACK): string[] {
  const out: string[] = [];
  for (const k of ["fds", "timers", "handles", "heapMiB"] as const) {
    if (after[k] - before[k] > slack[k]) out.push(`${k} ${before[k]} -> ${after[k]} (allowed +${slack[k]})`);
  }
  return out;
}
