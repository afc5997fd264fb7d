/**
 * Interop against the REAL Go proxy-server v0.36.0 (issue 4): our client SDK in front, the Go
 * agent or ours behind; HA: our agent against two and three Go servers behind one round-robin
 * TCP balancer. Cases are written once in matrix.ts; processes: go-harness.ts.
 *
 * | case                                   | our client→Go srv→Go agent | our client→Go srv→our agent |
 * |----------------------------------------|-----|-----|
 * | small request (Go http-test-server)    | Y   | Y   |
 * | 64 MiB byte-exact each way             | Y   | Y   |
 * | 50 concurrent, 10 cancelled mid-dial   | Y (AbortSignal at 300 ms on a target whose SYNs hang) | Y |
 * | refused destination, text through      | Y   | Y   |
 * | unknown cluster: No agent available    | Y   | Y   |
 * | client close → destination sees FIN    | Y   | Y   |
 * | destination close → all bytes, EOF     | Y   | Y   |
 * | agent killed mid-transfer              | Y   | Y   |
 * | DRAIN → new dials go to the other agent| Y (Go v0.36 sends DRAIN only when traffic wakes its loop: the test sends some) | Y |
 * | int64 random > 2^53 exact              | Y (raw DIAL_REQ 2^63−1, 2^53+1; SDK's own randoms) | Y |
 * | destHost (case, IPv4/IPv6 literals)    | Y   | Y   |
 * | HA: our agent → balancer → 2 / 3 Go servers | - | Y (connected to every server; each proxies) |
 *
 * Section 8 of the protocol doc covered here: 1 (partly: readiness and open_server_connections
 * in HA), 4, 5, 6, 9, 11, 12, 15, 17, 20, 21, 28; 26 by construction (our agent runs its 30 s
 * keepalive default against the Go server's 30 s enforcement). For the rest see the list at
 * the top of our-server.test.ts.
 */
import { after } from "node:test";
import { haSuite, pairingSuite } from "./matrix.js";
import { reportPairings } from "../framework/go-harness.js";

pairingSuite({ client: "ts", server: "go", agent: "go" });
pairingSuite({ client: "ts", server: "go", agent: "ts" });
haSuite({ server: "go", agent: "ts", client: "ts", counts: [2, 3] });

after(() => reportPairings("go-server.test.ts"));
