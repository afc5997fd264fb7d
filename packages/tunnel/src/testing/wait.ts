/** Test-only: bounded waiting for a condition that has no event of its own, and free ports. */
import { once } from "node:events";
import { readFileSync } from "node:fs";
import * as net from "node:net";
import { inspect } from "node:util";

/** How long {@link waitUntil} waits and how often it looks. */
export interface WaitOptions {
  /** Give up after this long (default 10 s: generous, tests run on busy machines). */
  timeoutMs?: number;
  /** Look again after this long (default 10 ms). */
  everyMs?: number;
}

/**
 * Re-check `check` until it returns true; throw `timed out after <ms> ms waiting for <what>` once
 * `timeoutMs` has passed. A check that throws counts as "not yet"; its last error is named in the
 * timeout's message.
 */
export async function waitUntil(
  what: string,
  check: () => boolean | Promise<boolean>,
  { timeoutMs = 10_000, everyMs = 10 }: WaitOptions = {},
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      if (await check()) return;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const detail =
        lastError === undefined
          ? ""
          : ` (last: ${lastError instanceof Error ? lastError.message : inspect(lastError)})`;
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${detail}`);
    }
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** Where {@link freePort} looks: from here up to the start of the kernel's ephemeral range. */
export const FREE_PORT_LOW = 20_000;

/** The first port of the kernel's ephemeral range (Linux's default where it cannot be read). */
export function ephemeralPortLow(): number {
  try {
    const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 0 ? low : 32_768;
  } catch {
    return 32_768;
  }
}

/** Ports this process has handed out (never handed out twice). */
const handedOut = new Set<number>();
let cursor: number | undefined;

/** Whether `port` can be listened on at 127.0.0.1 right now. */
export function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/**
 * A port on 127.0.0.1 that was free a moment ago (for options where 0 means "disabled"), below
 * the kernel's ephemeral range: between this call and the caller's bind, an outgoing connection of
 * any process in the namespace could take a port from that range (it did, in a CI run: a server
 * refused to start with "port ... already in use"). Never the same port twice in one process.
 */
export async function freePort(): Promise<number> {
  const high = ephemeralPortLow();
  const span = high - FREE_PORT_LOW;
  if (span < 1000) return kernelPort();
  // Start at a random place so that two test processes rarely walk the same ports.
  cursor ??= FREE_PORT_LOW + Math.floor(Math.random() * span);
  for (let tries = 0; tries < span; tries++) {
    const port = cursor;
    cursor = cursor + 1 >= high ? FREE_PORT_LOW : cursor + 1;
    if (handedOut.has(port) || !(await canListen(port))) continue;
    handedOut.add(port);
    return port;
  }
  return kernelPort();
}

/** A port the kernel picks (from the ephemeral range). */
async function kernelPort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** The port of a listening TCP server's `address()` (fails the test for a pipe or no address). */
export function tcpPort(addr: net.AddressInfo | string | null | undefined): number {
  if (!addr || typeof addr === "string") throw new Error(`expected a TCP address, got ${inspect(addr)}`);
  return addr.port;
}
