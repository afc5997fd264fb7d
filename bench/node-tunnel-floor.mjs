/**
 * The memory floor of any Node.js tunnel agent: plain `node` (no TypeScript loader, no
 * libraries) holding one mutual-TLS HTTP/2 session to a proxy-server's agent port and nothing
 * else. bench.ts reports its RSS next to the agents' (agent_rss_mib.node_tunnel_floor): what an
 * agent costs above it is ours to cut; what it costs above a bare `node` is TLS and HTTP/2.
 *
 * usage: node node-tunnel-floor.mjs <host> <port> <ca.crt> <agent.crt> <agent.key>
 */
import { readFileSync } from "node:fs";
import { connect } from "node:http2";

const [host, port, ca, cert, key] = process.argv.slice(2);
const session = connect(`https://${host}:${port}`, {
  ca: readFileSync(ca),
  cert: readFileSync(cert),
  key: readFileSync(key),
  servername: "localhost",
});
session.on("error", (err) => {
  process.stderr.write(`node-tunnel-floor: ${err.message}\n`);
  process.exit(1);
});
session.on("connect", () => {
  session.ping(() => process.stdout.write("connected\n"));
});
setInterval(() => undefined, 60_000);
