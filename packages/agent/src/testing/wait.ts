/** Test-only: bounded waiting for a condition that has no event of its own. */
import * as net from "node:net";
import { once } from "node:events";

/** Re-check `condition` every 10 ms until it holds; throw after `timeoutMs`. */
export async function eventually(condition: () => boolean, timeoutMs: number, what = "condition"): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`${what} not reached within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A port on 127.0.0.1 that was free a moment ago (for options where 0 means "disabled"). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
