// Writes a Secret / ConfigMap / projected volume's files the way a kubelet does (its AtomicWriter),
// so that a running process sees a complete old or a complete new set of files, never a mix:
//
//   <dir>/..2026_11_23_22_10_15.123456789/<files>   the payload of one version
//   <dir>/..data -> ..2026_11_23_22_10_15.123456789  swapped by rename(2) of a new symlink
//   <dir>/<key>  -> ..data/<key>                      one symlink per top-level entry
//
// Watchers that follow the ..data symlink (fs.watch on the dir, or re-reading <dir>/<key>) see the
// update as one event, as on a real node.
import { createHash } from "node:crypto";
import { mkdirSync, readdirSync, readlinkSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

/** Relative path (no leading "/", no "..") -> content. */
export type Payload = Map<string, Buffer | string>;

export function payloadDigest(p: Payload): string {
  const h = createHash("sha256");
  for (const k of [...p.keys()].sort()) {
    const v = p.get(k)!;
    h.update(`${k}\0${Buffer.byteLength(v)}\0`).update(v);
  }
  return h.digest("hex");
}

function checkPath(rel: string): void {
  if (rel === "" || rel.startsWith("/") || rel.split("/").some((s) => s === ".." || s === "" || s.startsWith("..")))
    throw new Error(`volume file path ${JSON.stringify(rel)} is not a plain relative path`);
}

let seq = 0;
function versionDirName(now: Date): string {
  const p = (n: number, w = 2): string => String(n).padStart(w, "0");
  const ts =
    `${now.getUTCFullYear()}_${p(now.getUTCMonth() + 1)}_${p(now.getUTCDate())}_` +
    `${p(now.getUTCHours())}_${p(now.getUTCMinutes())}_${p(now.getUTCSeconds())}`;
  seq = (seq + 1) % 1_000_000;
  return `..${ts}.${process.pid}${p(seq, 6)}`;
}

/**
 * Makes `dir` hold exactly `payload`, atomically (see above). Creates `dir` if needed. Returns the
 * payload's digest, which callers keep to skip rewrites of unchanged content.
 */
export function writeAtomic(dir: string, payload: Payload, now = new Date()): string {
  for (const k of payload.keys()) checkPath(k);
  mkdirSync(dir, { recursive: true });
  let old: string | null = null;
  try {
    old = readlinkSync(join(dir, "..data"));
  } catch {
    /* first write */
  }
  const version = versionDirName(now);
  const vdir = join(dir, version);
  mkdirSync(vdir);
  for (const [rel, content] of payload) {
    mkdirSync(dirname(join(vdir, rel)), { recursive: true });
    writeFileSync(join(vdir, rel), content);
  }
  const tmp = join(dir, "..data_tmp");
  rmSync(tmp, { force: true });
  symlinkSync(version, tmp);
  renameSync(tmp, join(dir, "..data"));
  const top = new Set([...payload.keys()].map((k) => k.split("/")[0]!));
  for (const name of top) {
    const link = join(dir, name);
    try {
      if (readlinkSync(link) === join("..data", name)) continue;
    } catch {
      /* missing or not a link */
    }
    rmSync(link, { recursive: true, force: true });
    symlinkSync(join("..data", name), link);
  }
  for (const entry of readdirSync(dir)) {
    if (entry.startsWith("..")) {
      if (entry !== "..data" && entry !== version && entry === old) rmSync(join(dir, entry), { recursive: true });
      continue;
    }
    if (!top.has(entry)) rmSync(join(dir, entry), { recursive: true, force: true });
  }
  return payloadDigest(payload);
}

/**
 * Replaces each occurrence of a mount path (a whole path: not followed by more of a file name) by
 * its directory, in one pass, longest path first: a directory put in is never scanned again, so a
 * mount at `/tmp` does not rewrite a state directory under /tmp that another mount put in.
 */
export function substituteMountPaths(subs: readonly (readonly [string, string])[]): (s: string) => string {
  const sorted = [...subs].sort((a, b) => b[0].length - a[0].length);
  if (sorted.length === 0) return (s) => s;
  const to = new Map(sorted.map(([from, dir]) => [from, dir]));
  const pattern = new RegExp(
    `(${sorted.map(([from]) => from.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|")})(?![A-Za-z0-9._-])`,
    "g",
  );
  return (s) => s.replace(pattern, (m: string) => to.get(m) ?? m);
}
