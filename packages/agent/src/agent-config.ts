/**
 * Checking the agent's options and turning them into what the connect loop uses: the agent ID,
 * the `agentidentifiers` header value and the TLS material. Every error names the flag.
 */
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { networkInterfaces } from "node:os";
import { ConfigError, parseAgentOptions, type AgentOptions, type AgentOptionsInput } from "@cluster-proxy/api";
import { validateAgentIdentifiers } from "@cluster-proxy/protocol";
import {
  loadCaFile,
  loadTlsFiles,
  proxyFromEnvironment,
  type FlagFile,
  type HttpProxy,
  type TlsFiles,
} from "@cluster-proxy/tunnel";
import { DestinationPolicy, parseAllowEntry, type DestinationRuleSpec } from "./destination/destination-policy.js";
import { errorMessage } from "@cluster-proxy/errors";

function fail(flag: string, why: string): never {
  throw new ConfigError(`--${flag}: ${why}`);
}

/**
 * Validate agent options without touching files and apply the defaults: the schema of
 * @cluster-proxy/api (required files, identifiers as the Go agent validates them, cluster name,
 * apiserver address, ports, durations and the rules between them) plus the destination rules of
 * `--allow-destinations`, which live with the destination policy. Throws one
 * {@link ConfigError} naming every flag at fault (all of them, so a user fixes them in one go).
 */
export function validateAgentOptions(o: AgentOptionsInput): AgentOptions {
  return parseAgentOptions(o, (values) => {
    try {
      allowEntryRules(values);
      return [];
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      return [err.message];
    }
  });
}

/** The `--allow-destinations` entries as rules; throws a ConfigError naming the entry. */
function allowEntryRules(o: Pick<AgentOptions, "allowDestinations">): DestinationRuleSpec[] {
  return o.allowDestinations.map((entry) => {
    try {
      const rule = parseAllowEntry(entry);
      DestinationPolicy.parse({ allow: [rule] });
      return rule;
    } catch (err) {
      return fail("allow-destinations", `"${entry}": ${errorMessage(err)}`);
    }
  });
}

/** The addresses of this host's network interfaces (a dial to them reaches the agent's own ports). */
export function localInterfaceAddresses(): string[] {
  return Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((i) => i.address));
}

/**
 * The destination policy: the JSON file of `--destination-policy` (if any) plus the rules of
 * `--allow-destinations`. When neither is given, the built-in default
 * ({@link DestinationPolicy.builtIn}: no link-local/metadata addresses, not the agent's own
 * health and admin ports on this host); `--allow-destinations '*'` alone is the open policy
 * (Go's). Throws a {@link ConfigError} naming the flag, the file and the entry (e.g.
 * `--destination-policy: /etc/policy.json: allow[1].cidrs[0]: ...`).
 */
export async function loadDestinationPolicy(
  o: AgentOptions,
  localAddresses: () => string[] = localInterfaceAddresses,
): Promise<DestinationPolicy> {
  const extra = allowEntryRules(o);
  if (!o.destinationPolicy) {
    if (extra.length === 0) {
      return DestinationPolicy.builtIn([o.healthServerPort, o.adminServerPort], localAddresses());
    }
    if (o.allowDestinations.every((entry) => entry.trim() === "*")) return DestinationPolicy.open();
    return DestinationPolicy.parse({ allow: extra });
  }
  const file = o.destinationPolicy;
  const text = (await readFlagFile("destination-policy", file)).toString("utf8");
  let spec: unknown;
  try {
    spec = JSON.parse(text);
  } catch (err) {
    return fail("destination-policy", `${file} is not valid JSON: ${errorMessage(err)}`);
  }
  try {
    return DestinationPolicy.parse(spec, extra);
  } catch (err) {
    return fail("destination-policy", `${file}: ${errorMessage(err)}`);
  }
}

/**
 * The forward proxy to the proxy server from `HTTPS_PROXY`/`NO_PROXY` (undefined: direct), with
 * the CA of `--https-proxy-ca-cert`. A malformed variable is a {@link ConfigError}, a bad CA file a
 * `TlsFileError`, each naming the flag.
 */
export async function resolveHubProxy(
  o: AgentOptions,
  env: NodeJS.ProcessEnv = process.env,
): Promise<HttpProxy | undefined> {
  let url: URL | undefined;
  try {
    url = proxyFromEnvironment(o.proxyServerHost, o.proxyServerPort, env);
  } catch (err) {
    throw new ConfigError(errorMessage(err), { cause: err });
  }
  if (!url) return undefined;
  if (!o.httpsProxyCaCert) return { url };
  return { url, ca: await loadCaFile({ flag: "--https-proxy-ca-cert", path: o.httpsProxyCaCert }) };
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
  const ids = o.agentIdentifiers;
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
    return fail(flag, `cannot read ${path}: ${errorMessage(err)}`);
  }
}

/** The agent's TLS files: --ca-cert, and --agent-cert/--agent-key when given; read at start and on reload. */
export function agentTlsFiles(o: Pick<AgentOptions, "caCert" | "agentCert" | "agentKey">): TlsFiles & { ca: FlagFile } {
  return {
    ca: { flag: "--ca-cert", path: o.caCert },
    ...(o.agentCert
      ? { cert: { flag: "--agent-cert", path: o.agentCert }, key: { flag: "--agent-key", path: o.agentKey } }
      : {}),
  };
}

/**
 * Read and check the CA, certificate and key files ({@link agentTlsFiles}). Throws a
 * `TlsFileError` naming the flag for unreadable files, bad PEM or a key that does not match the
 * certificate.
 */
export async function loadAgentTls(o: AgentOptions): Promise<AgentTlsMaterial> {
  return loadTlsFiles(agentTlsFiles(o));
}
