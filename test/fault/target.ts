/**
 * The fault suite's target process, run inside a cluster namespace: byte-exact transfers
 * ({@link serveTransfer}) on 127.0.0.1:<port>. Prints `listening <port>` when ready and runs
 * until killed.
 *   node --conditions=source --import tsx test/fault/target.ts <port>
 */
import * as net from "node:net";
import { serveTransfer } from "../framework/harness.js";

const port = Number(process.argv[2] ?? 0);
const server = net.createServer(serveTransfer);
server.maxConnections = 20_000;
server.listen(port, "127.0.0.1", () => {
  process.stdout.write(`listening ${(server.address() as net.AddressInfo).port}\n`);
});
