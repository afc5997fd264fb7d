// Runs inside the lab namespace: forwards Unix sockets (which are reachable from any network
// namespace, being files) to the clusters' apiservers, so a test runner in another namespace
// (root, or cp-test-<pid>) can reach them without any route into ours.
//   node test/infra/env/bridge.mjs /path/hub.sock=10.200.0.1:6443 ...
import { rmSync } from "node:fs";
import net from "node:net";

for (const spec of process.argv.slice(2)) {
  const [sock, target] = spec.split("=");
  const i = target.lastIndexOf(":");
  const host = target.slice(0, i);
  const port = Number(target.slice(i + 1));
  rmSync(sock, { force: true });
  const server = net.createServer((c) => {
    const up = net.connect({ host, port });
    up.setTimeout(0);
    c.pipe(up).pipe(c);
    const close = () => {
      c.destroy();
      up.destroy();
    };
    c.on("error", close);
    up.on("error", close);
    c.on("close", close);
    up.on("close", close);
  });
  server.listen(sock, () => process.stdout.write(`bridge: ${sock} -> ${target}\n`));
}
const stop = () => process.exit(0);
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
