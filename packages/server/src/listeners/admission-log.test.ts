import { test } from "node:test";
import assert from "node:assert/strict";
import { silentLogger, type Logger } from "@cluster-proxy/kit";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { AdmissionLog } from "./admission-log.js";

test("AdmissionLog: one warning per port per interval, with the refusals since the last one by reason", () => {
  const lines: { obj: Record<string, unknown>; msg: string }[] = [];
  const logger: Logger = { ...silentLogger, warn: (obj, msg) => void lines.push({ obj, msg: msg ?? "" }) };
  const clock = new ManualClock();
  const log = new AdmissionLog(logger, 10_000, clock);
  log.refused("--agent-port", "hello_timeout");
  for (let i = 0; i < 500; i++) log.refused("--agent-port", i % 2 ? "source_limit" : "hello_limit");
  log.refused("--server-port", "http_request");
  assert.equal(lines.length, 2, "the first refusal of each port is logged, the flood is not");
  assert.deepEqual(lines[0]!.obj.refused, { hello_timeout: 1 });
  assert.match(lines[0]!.msg, /no TLS ClientHello within --client-hello-timeout/);
  assert.match(lines[1]!.msg, /plain HTTP on a TLS port/);
  clock.advance(10_000);
  log.refused("--agent-port", "source_limit");
  assert.equal(lines.length, 3);
  assert.equal(lines[2]!.obj.port, "--agent-port");
  assert.deepEqual(lines[2]!.obj.refused, { source_limit: 251, hello_limit: 250 });
  assert.match(lines[2]!.msg, /--max-handshakes-per-source/);
  assert.match(lines[2]!.msg, /--max-connections-awaiting-hello/);
});
