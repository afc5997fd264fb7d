import assert from "node:assert/strict";
import { closeSync, openSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { withoutOpensslInternals } from "@cluster-proxy/tunnel";
import {
  CappedLogFile,
  cleanLogFields,
  createLogger,
  effectiveLogLevel,
  logFilePath,
  logFormatFor,
} from "./log-output.js";

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

describe("--log-format and error texts", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cp-logfmt-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const OPENSSL =
    "error:0A000412:SSL routines:ssl3_read_bytes:sslv3 alert bad certificate:../deps/openssl/openssl/ssl/record/rec_layer_s3.c:1605:SSL alert number 42";

  /** Log one warning through a logger of `options` into a file, and return what was written. */
  async function written(options: Parameters<typeof createLogger>[0], name: string): Promise<string> {
    const file = join(dir, `${name}.out`);
    const fd = openSync(file, "w");
    try {
      const log = await createLogger(options, "proxy-agent", fd);
      log.warn({ serverID: "s1", err: OPENSSL }, "cannot connect");
    } finally {
      closeSync(fd);
    }
    return readFileSync(file, "utf8");
  }

  test("not a terminal: JSON by default (what collectors and the tests read); text when asked", async () => {
    const json = JSON.parse(await written({ logLevel: "info" }, "default")) as Record<string, unknown>;
    assert.equal(json.msg, "cannot connect");
    assert.equal(json.serverID, "s1");
    assert.equal(json.err, "sslv3 alert bad certificate (SSL alert number 42)", "no OpenSSL internals");
    const text = await written({ logLevel: "info", logFormat: "text" }, "text");
    assert.match(text, /^\[\d\d:\d\d:\d\d\.\d{3}\] WARN \(proxy-agent\): cannot connect /);
    assert.match(text, /"serverID":"s1"/);
    assert.doesNotMatch(text, /deps\/openssl|0A000412/);
    assert.equal(text.trim().split("\n").length, 1, "one line per entry");
    assert.equal(logFormatFor("", openSync(join(dir, "text.out"), "r")), "json");
    assert.equal(logFormatFor("text", 0), "text");
  });

  test("OpenSSL error strings keep their reason and detail, other text is untouched", () => {
    assert.equal(withoutOpensslInternals(OPENSSL), "sslv3 alert bad certificate (SSL alert number 42)");
    assert.equal(
      withoutOpensslInternals(
        "C0D7A2B7F87F0000:error:0A00010B:SSL routines:ssl3_get_record:wrong version number:../deps/openssl/openssl/ssl/record/ssl3_record.c:354:\n",
      ),
      "wrong version number",
    );
    assert.equal(
      withoutOpensslInternals(`refused --agent-cert [${OPENSSL}]`),
      "refused --agent-cert [sslv3 alert bad certificate (SSL alert number 42)]",
    );
    assert.equal(withoutOpensslInternals("connect ECONNREFUSED 127.0.0.1:1"), "connect ECONNREFUSED 127.0.0.1:1");
    assert.deepEqual(cleanLogFields({ err: OPENSSL, n: 1 }), {
      err: "sslv3 alert bad certificate (SSL alert number 42)",
      n: 1,
    });
  });
});
