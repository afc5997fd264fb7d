/**
 * Many idle konnectivity agents in one process, for the scale scenarios. Each agent is what a
 * real one is on the wire: its own mTLS connection (HTTP/2, ALPN h2) and one
 * `/AgentService/Connect` stream with `agentid` and `agentidentifiers` metadata, kept open. They
 * serve no dials (the scenarios measure the server). With `resume`, each agent keeps its own TLS
 * session cache, as our agent does; SIGUSR2 drops every connection and reconnects them all at once
 * (the reconnect storm after a hub restart), printing `reconnected <n> failed <m> resumed <r> in <ms>`.
 *
 * Usage: load-agent.ts '<json config>' (see LoadAgentConfig). Prints `connected <n> failed <m>`
 * when every attempt has finished, then stays until killed. Attempts are bounded (count, 20 s each).
 */
import { readFileSync } from "node:fs";
import type * as http2 from "node:http2";
import { AGENT_CONNECT_METHOD, Metadata } from "@cluster-proxy/protocol";
import { connectSession, openCall, TlsSessionCache, type ClientCall } from "@cluster-proxy/tunnel";
import { errorMessage } from "@cluster-proxy/errors";

export interface LoadAgentConfig {
  host: string;
  port: number;
  count: number;
  ca: string;
  cert: string;
  key: string;
  idPrefix: string;
  identifiers: string;
  concurrency: number;
  /** Keep a TLS session cache per agent and resume on reconnect (our agent); false: Go's agent. */
  resume?: boolean;
}

const cfg = JSON.parse(process.argv[2] ?? "{}") as LoadAgentConfig;
const tls = { ca: readFileSync(cfg.ca), cert: readFileSync(cfg.cert), key: readFileSync(cfg.key) };
const caches = Array.from({ length: cfg.count }, () => (cfg.resume ? new TlsSessionCache(1) : undefined));
let held: { session: http2.ClientHttp2Session; call: ClientCall }[] = [];
let next = 0;
let ok = 0;
let failed = 0;
let lastError = "";

async function one(i: number): Promise<void> {
  const sessions = caches[i];
  const session = await connectSession({
    host: cfg.host,
    port: cfg.port,
    tls,
    timeoutMs: 20_000,
    ...(sessions ? { sessions } : {}),
  });
  const call = openCall(session, AGENT_CONNECT_METHOD, {
    metadata: { [Metadata.agentID]: `${cfg.idPrefix}-${i}`, [Metadata.agentIdentifiers]: cfg.identifiers },
  });
  call.on("message", () => undefined);
  const timer = setTimeout(() => session.destroy(), 20_000);
  try {
    const headers = await call.waitForHeaders();
    if (headers["grpc-status"] !== undefined && headers["grpc-status"] !== "0") {
      throw new Error(`refused: ${String(headers["grpc-message"])}`);
    }
  } finally {
    clearTimeout(timer);
  }
  held.push({ session, call });
}

async function worker(): Promise<void> {
  for (let i = next++; i < cfg.count; i = next++) {
    try {
      await one(i);
      ok++;
    } catch (e) {
      failed++;
      lastError = errorMessage(e);
    }
  }
}

/** Connect every agent, `concurrency` at a time; resolves with the counts. */
async function connectAll(): Promise<string> {
  next = 0;
  ok = 0;
  failed = 0;
  lastError = "";
  await Promise.all(Array.from({ length: Math.max(1, cfg.concurrency) }, () => worker()));
  return `${ok} failed ${failed}`;
}

const resumed = (): number => caches.reduce((a, c) => a + (c?.stats.resumed ?? 0), 0);
process.stdout.write(`connected ${await connectAll()}${lastError ? ` last error: ${lastError}` : ""}\n`);

let storming = false;
process.on("SIGUSR2", () => {
  if (storming) return;
  storming = true;
  const t0 = performance.now();
  const resumed0 = resumed();
  for (const h of held) h.session.destroy();
  held = [];
  void connectAll().then((counts) => {
    const ms = performance.now() - t0;
    process.stdout.write(
      `reconnected ${counts} resumed ${resumed() - resumed0} in ${ms.toFixed(0)}${lastError ? ` last error: ${lastError}` : ""}\n`,
    );
  });
});
// Stay alive (the sessions keep the loop busy); the runner kills this process by PID.
setInterval(() => undefined, 60_000);
