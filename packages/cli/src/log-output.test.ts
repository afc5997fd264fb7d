import assert from "node:assert/strict";
import { closeSync, openSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { CappedLogFile, createLogger, effectiveLogLevel, logFilePath } from "./log-output.js";

describe("klog's log flags", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cp-log-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test("-v 5 or more turns the default info level into debug; an explicit level wins", () => {
    assert.equal(effectiveLogLevel({ logLevel: "info", v: 4 }), "info");
    assert.equal(effectiveLogLevel({ logLevel: "info", v: 5 }), "debug");
    assert.equal(effectiveLogLevel({ logLevel: "warn", v: 9 }), "warn");
  });

  test("--logtostderr=false writes to --log-file, else <--log-dir>/<name>.log", () => {
    assert.equal(logFilePath({ logLevel: "info" }, "proxy-server"), undefined);
    assert.equal(logFilePath({ logLevel: "info", logtostderr: false, logFile: "/x.log" }, "proxy-server"), "/x.log");
    assert.equal(
      logFilePath({ logLevel: "info", logtostderr: false, logDir: "/d" }, "proxy-agent"),
      "/d/proxy-agent.log",
    );
  });

  test("the file gets every line; stderr only those at or above --stderrthreshold", async () => {
    const file = join(dir, "server.log");
    const errFile = join(dir, "stderr.log");
    const errFd = openSync(errFile, "w");
    try {
      const log = await createLogger(
        { logLevel: "info", logtostderr: false, logFile: file, stderrthreshold: "WARNING" },
        "proxy-server",
        errFd,
      );
      log.info({ n: 1 }, "hello");
      log.warn({ n: 2 }, "careful");
    } finally {
      closeSync(errFd);
    }
    const lines = readFileSync(file, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { msg: string });
    assert.deepEqual(
      lines.map((l) => l.msg),
      ["hello", "careful"],
    );
    const errLines = readFileSync(errFile, "utf8").trim().split("\n");
    assert.equal(errLines.length, 1);
    assert.match(errLines[0]!, /"msg":"careful"/);
  });

  test("--log-file-max-size: the file starts over from empty instead of growing past the limit", () => {
    const file = join(dir, "capped.log");
    const f = new CappedLogFile(file, 100);
    for (let i = 0; i < 10; i++) f.write(`${String(i).repeat(29)}\n`); // 30 bytes a line
    f.close();
    const text = readFileSync(file, "utf8");
    assert.ok(text.length <= 100, `${text.length} bytes`);
    assert.ok(text.endsWith(`${"9".repeat(29)}\n`));
  });

  test("an unwritable --log-file is a ConfigError naming the flag", async () => {
    await assert.rejects(
      createLogger({ logLevel: "info", logtostderr: false, logFile: join(dir, "no", "such", "dir.log") }, "x"),
      /^ConfigError: --log-file: cannot open log file/,
    );
  });
});
