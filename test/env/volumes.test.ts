import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { mountPathRewriter, writeAtomic } from "./volumes.js";

test("writeAtomic lays files out like a kubelet and swaps ..data on change", () => {
  const dir = mkdtempSync(join(tmpdir(), "cpenv-vol-"));
  try {
    const d1 = writeAtomic(
      dir,
      new Map<string, string>([
        ["a.txt", "one"],
        ["sub/b.txt", "bee"],
      ]),
    );
    assert.equal(readFileSync(join(dir, "a.txt"), "utf8"), "one");
    assert.equal(readFileSync(join(dir, "sub", "b.txt"), "utf8"), "bee");
    assert.equal(readlinkSync(join(dir, "a.txt")), join("..data", "a.txt"));
    const v1 = readlinkSync(join(dir, "..data"));
    assert.match(v1, /^\.\.\d{4}_\d\d_\d\d_/);

    const d2 = writeAtomic(dir, new Map([["a.txt", "two"]]));
    assert.notEqual(d1, d2);
    assert.equal(readFileSync(join(dir, "a.txt"), "utf8"), "two");
    const v2 = readlinkSync(join(dir, "..data"));
    assert.notEqual(v2, v1);
    // The old version and the entry no longer in the payload are gone.
    assert.equal(existsSync(join(dir, v1)), false);
    assert.equal(existsSync(join(dir, "sub")), false);
    assert.deepEqual(readdirSync(dir).sort(), ["..data", v2, "a.txt"].sort());
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("writeAtomic refuses paths that leave the volume", () => {
  const dir = mkdtempSync(join(tmpdir(), "cpenv-vol-"));
  try {
    assert.throws(() => writeAtomic(dir, new Map([["../x", "no"]])), /not a plain relative path/);
    assert.throws(() => writeAtomic(dir, new Map([["/etc/x", "no"]])), /not a plain relative path/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("mount paths are rewritten in one pass, longest first: a mount at /tmp leaves a pod directory under /tmp alone", () => {
  const pod = "/tmp/env/data/hub/kubelet/ns_pod";
  const sub = mountPathRewriter([
    ["/tmp", `${pod}/volumes/tmp`],
    ["/etc/gateway/serving", `${pod}/volumes/serving`],
    ["/etc/gateway", `${pod}/volumes/gateway`],
  ]);
  assert.equal(sub("--proxy-ca=/etc/gateway/serving/ca.crt"), `--proxy-ca=${pod}/volumes/serving/ca.crt`);
  assert.equal(sub("--x=/etc/gateway/x --t=/tmp/a"), `--x=${pod}/volumes/gateway/x --t=${pod}/volumes/tmp/a`);
  assert.equal(sub("unchanged"), "unchanged");
});
