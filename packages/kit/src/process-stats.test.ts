import { test } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { setImmediate as nextTurn } from "node:timers/promises";
import { PROCESS_STATS_PATH, processStats, processStatsHandler, type ProcessStats } from "./process-stats.js";

test("processStats counts fds and referenced timers, and gc=true frees garbage", () => {
  const timer = setTimeout(() => undefined, 60_000);
  const withTimer = processStats();
  clearTimeout(timer);
  const without = processStats();
  assert.equal((withTimer.activeResources.Timeout ?? 0) - (without.activeResources.Timeout ?? 0), 1);
  assert.ok(typeof without.openFds === "number" && without.openFds > 2);

  const holder: { garbage?: { i: number; s: string }[] } = {
    garbage: Array.from({ length: 300_000 }, (_, i) => ({ i, s: `item ${i}` })),
  };
  const held = processStats().heapUsedBytes;
  assert.equal(holder.garbage?.length, 300_000);
  holder.garbage = undefined;
  const collected = processStats({ gc: true }).heapUsedBytes;
  assert.ok(collected < held - 10 * 1024 * 1024, `heap ${held} -> ${collected} after gc`);
});

test("the /debug/process handler answers JSON, collecting garbage first with ?gc=1, and counts collections", async () => {
  assert.equal(processStats().gc, null, "no counting before a handler exists");
  const server = http.createServer(processStatsHandler()).listen(0, "127.0.0.1");
  await once(server, "listening");
  try {
    const { port } = server.address() as AddressInfo;
    const res = await fetch(`http://127.0.0.1:${port}${PROCESS_STATS_PATH}?gc=1`);
    assert.equal(res.headers.get("content-type"), "application/json");
    const body = (await res.json()) as ProcessStats;
    assert.ok(body.rssBytes > 0 && body.heapUsedBytes > 0);
    assert.ok((body.activeResources.TCPServerWrap ?? 0) >= 1);
    // The observer hears of a collection a turn or two after it ran (bounded wait).
    for (let i = 0; i < 100 && (processStats().gc?.major ?? 0) === 0; i++) await nextTurn();
    assert.ok((processStats().gc?.major ?? 0) >= 1, "the full collection of ?gc=1 is counted as major");
  } finally {
    server.close();
  }
});
