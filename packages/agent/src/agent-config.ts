/**
 * Checking the agent's options and turning them into what the connect loop uses: the agent ID,
 * the `agentidentifiers` header value and the TLS material. Every error names the flag.
 */
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import * as net from "node:net";
import * as tls from "node:tls";
import { ConfigError, throwConfigProblems, type AgentOptions } from "@cluster-proxy/api";
import { parseHostPort, validateAgentIdentifiers } from "@cluster-proxy/protocol";
import { pemProblem, proxyFromEnvironment, type HttpProxy } from "@cluster-proxy/tunnel";
import { DestinationPolicy, parseAllowEntry, type DestinationRuleSpec } from "./destination-policy.js";

/** Cluster names: what a `host=` identifier and a dial host can carry without escaping. */
const CLUSTER_NAME = /^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$/;

function fail(flag: string, why: string): never {
  throw new ConfigError(`--${flag}: ${why}`);
}

type Report = (flag: string, why: string) => void;

function checkDuration(bad: Report, flag: string, ms: number, min: number): void {
  if (!Number.isFinite(ms) || ms < min) bad(flag, `must be at least ${min} ms (got ${ms})`);
}

function checkPort(bad: Report, flag: string, port: number, allowZero: boolean): void {
  if (!Number.isInteger(port) || port < (allowZero ? 0 : 1) || port > 65535) {
    bad(flag, `${port} is not a port number (${allowZero ? 0 : 1}-65535)`);
  }
}

/**
 * Validate agent options without touching files. Throws one {@link ConfigError} naming every flag
 * at fault (all of them, so a user fixes them in one go):
 * required files, identifiers (as the Go agent validates them), cluster name, apiserver
 * address, ports and durations.
 */
export function validateAgentOptions(o: AgentOptions): void {
  const problems: string[] = [];
  const bad: Report = (flag, why) => void problems.push(`--${flag}: ${why}`);
  if (!o.proxyServerHost) bad("proxy-server-host", "must not be empty");
  checkPort(bad, "proxy-server-port", o.proxyServerPort, false);
  if (!o.caCert) bad("ca-cert", "is required (the CA the proxy server's certificate chains to)");
  if (Boolean(o.agentCert) !== Boolean(o.agentKey)) {
    bad(o.agentCert ? "agent-key" : "agent-cert", "--agent-cert and --agent-key must be given together");
  }
  if (o.agentId && !/^[\x21-\x7e]+$/.test(o.agentId)) {
    bad("agent-id", `"${o.agentId}" must be printable ASCII without spaces`);
  }
  try {
    validateAgentIdentifiers(o.agentIdentifiers ?? "");
  } catch (err) {
    bad("agent-identifiers", (err as Error).message);
  }
  if (o.clusterName && !CLUSTER_NAME.test(o.clusterName)) {
    bad("cluster-name", `"${o.clusterName}" is not a valid cluster name (letters, digits, ".", "-", "_")`);
  }
  const api = o.apiserverAddress;
  if (!api) bad("apiserver-address", "must not be empty");
  if (!parseHostPort(api)) {
    // a bare host (or bracketed IPv6 literal) is fine: the requested port is kept
    const bare = api.startsWith("[") && api.endsWith("]") ? net.isIPv6(api.slice(1, -1)) : !api.includes(":");
    if (!bare || /[\s/]/.test(api)) bad("apiserver-address", `"${api}" is neither host:port nor a host`);
  }
  checkPort(bad, "health-server-port", o.healthServerPort, true);
  checkPort(bad, "admin-server-port", o.adminServerPort, true);
  checkDuration(bad, "sync-interval", o.syncInterval, 1);
  checkDuration(bad, "sync-interval-cap", o.syncIntervalCap, 1);
  if (o.syncIntervalCap < o.syncInterval) bad("sync-interval-cap", "must not be below --sync-interval");
  checkDuration(bad, "keepalive-time", o.keepaliveTime, 0);
  checkDuration(bad, "keepalive-timeout", o.keepaliveTimeout, 1);
  checkDuration(bad, "dial-timeout", o.dialTimeout, 1);
  if (o.handshakeTimeout !== undefined) checkDuration(bad, "handshake-timeout", o.handshakeTimeout, 1);
  checkDuration(bad, "connection-stall-timeout", o.connectionStallTimeout, 0);
  if (o.certReloadInterval !== undefined) checkDuration(bad, "cert-reload-interval", o.certReloadInterval, 0);
  try {
    allowEntryRules(o);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    problems.push(err.message);
  }
  throwConfigProblems(problems);
}

/** The `--allow-destinations` entries as rules; throws a ConfigError naming the entry. */
function allowEntryRules(o: AgentOptions): DestinationRuleSpec[] {
  return (o.allowDestinations ?? []).map((entry) => {
    try {
      const rule = parseAllowEntry(entry);
      DestinationPolicy.parse({ allow: [rule] });
      return rule;
    } catch (err) {
      return fail("allow-destinations", `"${entry}": ${(err as Error).message}`);
    }
  });
}

/**
 * The destination policy: the JSON file of `--destination-policy` (if any) plus the rules of
 * `--allow-destinations`; open when neither is given. Throws a {@link ConfigError} naming the flag,
 * the file and the entry (e.g. `--destination-policy: /etc/policy.json: allow[1].cidrs[0]: ...`).
 */
export async function loadDestinationPolicy(o: AgentOptions): Promise<DestinationPolicy> {
  const extra = allowEntryRules(o);
  if (!o.destinationPolicy) return extra.length ? DestinationPolicy.parse({ allow: extra }) : DestinationPolicy.open();
  const file = o.destinationPolicy;
  const text = (await readFlagFile("destination-policy", file)).toString("utf8");
  let spec: unknown;
  try {
    spec = JSON.parse(text);
  } catch (err) {
    return fail("destination-policy", `${file} is not valid JSON: ${(err as Error).message}`);
  }
  try {
    return DestinationPolicy.parse(spec, extra);
  } catch (err) {
    return fail("destination-policy", `${file}: ${(err as Error).message}`);
  }
}

/**
 * The forward proxy to the proxy server from `HTTPS_PROXY`/`NO_PROXY` (undefined: direct), with
 * the CA of `--https-proxy-ca-cert`. A malformed variable or an unreadable CA file is a
 * {@link ConfigError} naming it.
 */
export async function resolveHubProxy(
  o: AgentOptions,
  env: NodeJS.ProcessEnv = process.env,
): Promise<HttpProxy | undefined> {
  let url: URL | undefined;
  try {
    url = proxyFromEnvironment(o.proxyServerHost, o.proxyServerPort, env);
  } catch (err) {
    throw new ConfigError((err as Error).message, { cause: err });
  }
  if (!url) return undefined;
  if (!o.httpsProxyCaCert) return { url };
  const ca = await readFlagFile("https-proxy-ca-cert", o.httpsProxyCaCert);
  const problem = pemProblem(ca, "certificate");
  if (problem) fail("https-proxy-ca-cert", `${o.httpsProxyCaCert} ${problem}`);
  return { url, ca };
}

/** The agent ID: `--agent-id`, else env `PROXY_AGENT_ID`, else a random UUID. */
export function resolveAgentID(o: AgentOptions, env: NodeJS.ProcessEnv = process.env): string {
  return o.agentId || env.PROXY_AGENT_ID || randomUUID();
}

/**
 * The `agentidentifiers` header value: `--agent-identifiers`, plus `host=<cluster-name>` when
 * a cluster name is set and not already listed. May be empty (the header is always sent).
 */
export function agentIdentifiersHeader(o: AgentOptions): string {
  const ids = o.agentIdentifiers ?? "";
  if (!o.clusterName) return ids;
  if (validateAgentIdentifiers(ids).host.includes(o.clusterName)) return ids;
  const extra = `host=${encodeURIComponent(o.clusterName)}`;
  return ids ? `${ids}&${extra}` : extra;
}

/**
 * The `authorization` metadata value from `--service-account-token-path` (`Bearer <token>`), or
 * undefined when no token file is configured. Re-read on every connect so rotated tokens work;
 * trailing line breaks are dropped (they are not valid in a header value).
 */
export async function readAuthorization(o: AgentOptions): Promise<string | undefined> {
  if (!o.serviceAccountTokenPath) return undefined;
  const token = (await readFlagFile("service-account-token-path", o.serviceAccountTokenPath)).toString("utf8");
  return `Bearer ${token.replace(/[\r\n]+$/, "")}`;
}

/** PEM material for the TLS connection to the server. */
export interface AgentTlsMaterial {
  ca: Buffer;
  cert?: Buffer;
  key?: Buffer;
}

async function readFlagFile(flag: string, path: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (err) {
    return fail(flag, `cannot read ${path}: ${(err as Error).message}`);
  }
}

/**
 * Read and check the CA, certificate and key files. Throws {@link ConfigError} naming the flag
 * for unreadable files, bad PEM or a key that does not match the certificate.
 */
export async function loadAgentTls(o: AgentOptions): Promise<AgentTlsMaterial> {
  const ca = await readFlagFile("ca-cert", o.caCert);
  try {
    tls.createSecureContext({ ca });
    const problem = pemProblem(ca, "certificate");
    if (problem) throw new Error(problem);
  } catch (err) {
    fail("ca-cert", `${o.caCert} is not a usable PEM CA certificate: ${(err as Error).message}`);
  }
  if (!o.agentCert) return { ca };
  const cert = await readFlagFile("agent-cert", o.agentCert);
  const key = await readFlagFile("agent-key", o.agentKey);
  const keyProblem = pemProblem(key, "key");
  if (keyProblem) fail("agent-key", `${o.agentKey}: ${keyProblem}`);
  try {
    const problem = pemProblem(cert, "certificate");
    if (problem) throw new Error(problem);
    tls.createSecureContext({ cert });
  } catch (err) {
    fail("agent-cert", `${o.agentCert} is not a usable PEM certificate: ${(err as Error).message}`);
  }
  try {
    tls.createSecureContext({ cert, key });
  } catch (err) {
    fail("agent-key", `${o.agentKey} is not a usable private key for --agent-cert: ${(err as Error).message}`);
  }
  return { ca, cert, key };
}
