import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { substituteMountPaths, writeAtomic } from "../infra/env/volumes.js";

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

test("substituteMountPaths replaces whole mount paths once, the longest first", () => {
  const sub = substituteMountPaths([
    ["/tmp", "/state/pod/volumes/tmp"],
    ["/etc/app/serving", "/tmp/state/pod/volumes/serving"],
    ["/etc/app", "/state/pod/volumes/app"],
  ]);
  // A directory put in (here under /tmp) is not rewritten by the /tmp mount.
  assert.equal(sub("--cert=/etc/app/serving/tls.crt"), "--cert=/tmp/state/pod/volumes/serving/tls.crt");
  assert.equal(
    sub("--conf=/etc/app/x.yaml --scratch=/tmp"),
    "--conf=/state/pod/volumes/app/x.yaml --scratch=/state/pod/volumes/tmp",
  );
  // Only whole paths: /tmpfiles and /etc/apple are not mounts.
  assert.equal(sub("/tmpfiles /etc/apple"), "/tmpfiles /etc/apple");
  assert.equal(substituteMountPaths([])("/tmp"), "/tmp");
});
