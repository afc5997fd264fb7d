import assert from "node:assert/strict";
import { once } from "node:events";
import * as net from "node:net";
import { test } from "node:test";
import { FREE_PORT_LOW, ephemeralPortLow, freePort, waitUntil } from "./wait.js";

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

test("freePort stays below the kernel's ephemeral range and never hands out a port twice", async () => {
  const ports = [];
  for (let i = 0; i < 50; i++) ports.push(await freePort());
  assert.equal(new Set(ports).size, ports.length);
  for (const port of ports) assert.ok(port >= FREE_PORT_LOW && port < ephemeralPortLow(), `port ${port}`);
});

test("freePort passes over a port that is in use", async () => {
  const first = await freePort();
  // The next port of its walk, held by a listener (or by someone else already): not returned.
  const next = first + 1 < ephemeralPortLow() ? first + 1 : FREE_PORT_LOW;
  const held = net.createServer();
  const listening = new Promise<void>((resolve) => {
    held.once("error", () => resolve());
    held.listen(next, "127.0.0.1", () => resolve());
  });
  await listening;
  try {
    assert.notEqual(await freePort(), next);
  } finally {
    if (held.listening) await new Promise<void>((resolve) => held.close(() => resolve()));
  }
});
