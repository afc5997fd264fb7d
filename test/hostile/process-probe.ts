// Shared measurements of the hostile-client suite (test/hostile): what a process holds, read from
// /proc, so each attack can assert that the server and agents come back to their baseline.
import { readdir, readFile } from "node:fs/promises";
import { waitUntil } from "@cluster-proxy/tunnel/testing";

/** Open file descriptors of `pid` (sockets, files, pipes). */
export async function openFds(pid: number): Promise<number> {
  return (await readdir(`/proc/${pid}/fd`)).length;
}

/** Resident set size of `pid` in MiB. */
export async function rssMiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(status);
  if (!m?.[1]) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(m[1]) / 1024;
}

/** A process's footprint at one moment. */
export interface Footprint {
  fds: number;
  rssMiB: number;
}

export async function footprint(pid: number): Promise<Footprint> {
  return { fds: await openFds(pid), rssMiB: await rssMiB(pid) };
}

/**
 * Waits until `pid` holds at most `baseline.fds + fdSlack` descriptors (default slack 16) and at
 * most `baseline.rssMiB + rssSlackMiB` (default 64 MiB); fails with both readings after
 * `timeoutMs` (default 30 s, generous for a busy machine).
 */
export async function waitForBaseline(
  pid: number,
  baseline: Footprint,
  what: string,
  opts: { fdSlack?: number; rssSlackMiB?: number; timeoutMs?: number } = {},
): Promise<Footprint> {
  const fdSlack = opts.fdSlack ?? 16;
  const rssSlack = opts.rssSlackMiB ?? 64;
  let last = await footprint(pid);
  await waitUntil(
    `${what} back near its baseline (fds ${baseline.fds}+${fdSlack}, RSS ${baseline.rssMiB.toFixed(1)}+${rssSlack} MiB)`,
    async () => {
      last = await footprint(pid);
      if (last.fds <= baseline.fds + fdSlack && last.rssMiB <= baseline.rssMiB + rssSlack) return true;
      throw new Error(`fds ${last.fds}, RSS ${last.rssMiB.toFixed(1)} MiB`);
    },
    { timeoutMs: opts.timeoutMs ?? 30_000, everyMs: 200 },
  );
  return last;
}
