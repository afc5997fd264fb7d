// Run inside a network namespace by the addon-manager tests (ip netns exec ... node --import tsx):
//
//   tunnel-probe.ts transfer <proxyHost:port> <servername> <certDir> <target> <seconds>
//     streams data through the hub's gRPC front door to an echo target and checks every byte
//     that comes back; prints one JSON line {ok, bytes, error?} at the end.
//   tunnel-probe.ts cert <host:port> <servername> <caFile>
//     prints the sha256 fingerprint of the certificate a TLS server presents (one JSON line).
//
// certDir holds ca.crt, tls.crt and tls.key (the proxy-client Secret's keys).
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import tls from "node:tls";
import { TunnelClient } from "@cluster-proxy/client";
import { errorMessage } from "@cluster-proxy/errors";

const [mode, address, servername, pathArg, target, secondsArg] = process.argv.slice(2);
const [host, portText] = (address ?? "").split(/:(?=\d+$)/);
const port = Number(portText);

async function transfer(): Promise<void> {
  const dir = pathArg!;
  const client = new TunnelClient({
    proxy: {
      host: host!,
      port,
      servername: servername!,
      ca: readFileSync(join(dir, "ca.crt")),
      cert: readFileSync(join(dir, "tls.crt")),
      key: readFileSync(join(dir, "tls.key")),
    },
  });
  const socket = await client.dial(target!);
  const deadline = Date.now() + Number(secondsArg) * 1000;
  const sent: Buffer[] = [];
  let sentBytes = 0;
  let received = 0;
  let mismatch: string | undefined;
  let expected = Buffer.alloc(0);
  socket.on("data", (chunk: Buffer) => {
    expected = Buffer.concat([expected, ...sent.splice(0)]);
    if (!chunk.equals(expected.subarray(0, chunk.length))) mismatch ??= `mismatch at byte ${received}`;
    expected = expected.subarray(chunk.length);
    received += chunk.length;
  });
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  // 64 KiB every 20 ms until the deadline, then wait for the echo of everything.
  while (Date.now() < deadline && !mismatch) {
    const block = randomBytes(64 * 1024);
    sent.push(block);
    sentBytes += block.length;
    if (!socket.write(block)) await new Promise((r) => socket.once("drain", r));
    await new Promise((r) => setTimeout(r, 20));
  }
  const waitUntil = Date.now() + 30_000;
  while (received < sentBytes && !mismatch && Date.now() < waitUntil && !socket.destroyed)
    await new Promise((r) => setTimeout(r, 50));
  socket.end();
  await Promise.race([closed, new Promise((r) => setTimeout(r, 5_000))]);
  await client.close();
  const ok = !mismatch && received === sentBytes;
  console.log(JSON.stringify({ ok, sent: sentBytes, received, error: mismatch ?? (ok ? undefined : "short echo") }));
}

async function cert(): Promise<void> {
  const socket = tls.connect({
    host,
    port,
    servername: servername!,
    ca: readFileSync(pathArg!),
    ALPNProtocols: ["h2"],
  });
  await new Promise<void>((resolve, reject) => {
    socket.once("secureConnect", resolve);
    socket.once("error", reject);
  });
  console.log(JSON.stringify({ fingerprint: socket.getPeerCertificate().fingerprint256 }));
  socket.destroy();
}

try {
  if (mode === "transfer") await transfer();
  else if (mode === "cert") await cert();
  else throw new Error(`unknown mode ${mode}`);
} catch (err) {
  console.log(JSON.stringify({ ok: false, error: errorMessage(err) }));
}
