/**
 * The gateway endpoint's settings from the agent's options (`--gateway-ca-file`,
 * `--service-ca-file`, `--kube-apiserver-url`, `--service-account-dir`,
 * `--gateway-impersonation-prefix`), checked at start: every
 * file readable and PEM where it must be (CA files by the one TLS file reader: `TlsFileError`),
 * the apiserver URL known. Errors name the flag.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { ConfigError, type AgentOptions } from "@cluster-proxy/api";
import { joinHostPort } from "@cluster-proxy/protocol";
import { loadCaFile, type TlsFiles } from "@cluster-proxy/tunnel";
import type { UpstreamSettings } from "./gateway-upstreams.js";
import { errorMessage } from "@cluster-proxy/errors";

/** What the agent builds its gateway endpoint from. */
export interface GatewaySettings {
  /** The gateway CA bundle as read at start. */
  gatewayCa: Buffer;
  /** The files the endpoint's TLS material is reloaded from. */
  files: TlsFiles;
  upstreams: UpstreamSettings;
  /** The prefix every impersonated user and group must carry (the gateway's `--impersonation-prefix`). */
  impersonationPrefix: string;
}

function fail(flag: string, why: string): never {
  throw new ConfigError(`--${flag}: ${why}`);
}

/**
 * The kube-apiserver origin: `--kube-apiserver-url`, else
 * `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT` (an IPv6 host bracketed).
 */
export function kubeApiserverUrl(o: Pick<AgentOptions, "kubeApiserverUrl">, env: NodeJS.ProcessEnv): URL {
  if (o.kubeApiserverUrl) return new URL(o.kubeApiserverUrl);
  const host = env.KUBERNETES_SERVICE_HOST;
  const portText = env.KUBERNETES_SERVICE_PORT ?? "443";
  if (!host) {
    return fail(
      "kube-apiserver-url",
      "not set, and KUBERNETES_SERVICE_HOST is not in the environment (not running in a pod): give the kube-apiserver URL",
    );
  }
  const port = Number(portText);
  try {
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error("bad port");
    return new URL(`https://${joinHostPort(host, port)}`);
  } catch {
    return fail(
      "kube-apiserver-url",
      `not set, and KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT (${host}, ${portText}) make no URL`,
    );
  }
}

/**
 * The gateway endpoint's settings, or undefined when `--gateway-ca-file` is empty (disabled).
 * Throws a {@link ConfigError} naming the flag of an unreadable or non-PEM file.
 */
export async function loadGatewaySettings(
  o: AgentOptions,
  env: NodeJS.ProcessEnv = process.env,
): Promise<GatewaySettings | undefined> {
  if (!o.gatewayCaFile) return undefined;
  if (!o.agentCert || !o.agentKey) {
    fail(
      "gateway-ca-file",
      "needs --agent-cert and --agent-key (the gateway endpoint serves with the agent certificate)",
    );
  }
  const gatewayCa = await loadCaFile({ flag: "--gateway-ca-file", path: o.gatewayCaFile });
  if (o.serviceCaFile) await loadCaFile({ flag: "--service-ca-file", path: o.serviceCaFile });
  const apiserverUrl = kubeApiserverUrl(o, env);
  const token = join(o.serviceAccountDir, "token");
  try {
    await readFile(token);
  } catch (err) {
    fail("service-account-dir", `cannot read ${token}: ${errorMessage(err)}`);
  }
  if (apiserverUrl.protocol === "https:")
    await loadCaFile({ flag: "--service-account-dir", path: join(o.serviceAccountDir, "ca.crt") });
  return {
    gatewayCa,
    files: {
      cert: { flag: "--agent-cert", path: o.agentCert },
      key: { flag: "--agent-key", path: o.agentKey },
      ca: { flag: "--gateway-ca-file", path: o.gatewayCaFile },
    },
    upstreams: { apiserverUrl, serviceAccountDir: o.serviceAccountDir, serviceCaFile: o.serviceCaFile },
    impersonationPrefix: o.gatewayImpersonationPrefix,
  };
}
