// Run in the test environment's lab namespace by bench/portforward.ts:
//
//   portforward-client.ts <proxyHost:port> <servername> <certDir> <target> bulk <seconds>
//     echo traffic as fast as the tunnel takes it for <seconds>; prints {ok, bytesPerSecond}
//   portforward-client.ts <proxyHost:port> <servername> <certDir> <target> firstbyte <count>
//     <count> fresh tunnels (dial, one byte, its echo); prints {ok, ms: [...]}
//
// certDir holds ca.crt, tls.crt and tls.key (the proxy-client Secret's keys).
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { tunnelClientFromCertDir } from "../test/infra/env/proxy-client.js";
import { errorMessage } from "@cluster-proxy/errors";

const [address, servername, certDir, target, mode, arg] = process.argv.slice(2);

const client = tunnelClientFromCertDir(address ?? "", servername ?? "", certDir ?? "");

async function bulk(seconds: number): Promise<void> {
  const socket = await client.dial(target!);
  let received = 0;
  socket.on("data", (chunk: Buffer) => (received += chunk.length));
  const block = randomBytes(256 * 1024);
  const t0 = performance.now();
  const deadline = t0 + seconds * 1000;
  while (performance.now() < deadline) {
    if (!socket.write(block)) await new Promise((r) => socket.once("drain", r));
  }
  const elapsed = (performance.now() - t0) / 1000;
  socket.destroy();
  console.log(JSON.stringify({ ok: true, bytesPerSecond: Math.round(received / elapsed) }));
}

async function firstByte(count: number): Promise<void> {
  const ms: number[] = [];
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    const socket = await client.dial(target!);
    const echoed = new Promise<void>((resolve) => socket.once("data", () => resolve()));
    socket.write("x");
    await echoed;
    ms.push(performance.now() - t0);
    socket.destroy();
  }
  console.log(JSON.stringify({ ok: true, ms }));
}

try {
  if (mode === "bulk") await bulk(Number(arg));
  else if (mode === "firstbyte") await firstByte(Number(arg));
  else throw new Error(`unknown mode ${mode}`);
} catch (err) {
  console.log(JSON.stringify({ ok: false, error: errorMessage(err) }));
} finally {
  await client.close();
}
