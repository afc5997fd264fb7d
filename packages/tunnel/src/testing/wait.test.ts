import assert from "node:assert/strict";
import { once } from "node:events";
import * as net from "node:net";
import { test } from "node:test";
import { freePort, waitUntil } from "./wait.js";

test("waitUntil resolves once the check holds, sync or async, and counts a throwing check as not yet", async () => {
  let n = 0;
  await waitUntil("the third look", () => ++n >= 3, { everyMs: 1 });
  assert.equal(n, 3);
  let m = 0;
  await waitUntil(
    "an async check",
    () => {
      if (++m < 2) throw new Error("not up yet");
      return Promise.resolve(true);
    },
    { everyMs: 1 },
  );
  assert.equal(m, 2);
});

test("waitUntil throws after its deadline, naming what it waited for and the check's last error", async () => {
  await assert.rejects(
    waitUntil("never", () => false, { timeoutMs: 30, everyMs: 5 }),
    {
      message: "timed out after 30 ms waiting for never",
    },
  );
  await assert.rejects(
    waitUntil(
      "a broken check",
      () => {
        throw new Error("boom");
      },
      { timeoutMs: 30, everyMs: 5 },
    ),
    { message: "timed out after 30 ms waiting for a broken check (last: boom)" },
  );
});

test("freePort returns a port that can be listened on", async () => {
  const port = await freePort();
  const server = net.createServer().listen(port, "127.0.0.1");
  await once(server, "listening");
  assert.equal((server.address() as net.AddressInfo).port, port);
  await new Promise<void>((resolve) => server.close(() => resolve()));
});
