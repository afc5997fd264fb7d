/**
 * The local hub profile `cluster-proxy up` writes (`<state-dir>/hub.json`), and which hub a hub operation
 * uses: `--hub-profile`, a Kubernetes hub, `./.cluster-proxy/hub.json`, `KUBECONFIG` or in-cluster.
 * Guide: docs/guides/hub-operations.md#cluster-proxy-up-trying-kubectl-without-kubernetes
 */
import { existsSync, readFileSync } from "node:fs";
import { rm, writeFile } from "node:fs/promises";
import { join, relative, resolve } from "node:path";
import { ConfigError, clusterNameProblem } from "@cluster-proxy/api";
import { CommandFailure } from "../cli-context.js";
import type { Hub, ProxyCredentials, ProxyEndpoint } from "../hub/hub-access.js";
import { errorMessage } from "@cluster-proxy/errors";

/** `up`'s default state directory (relative to the working directory). */
export const DEFAULT_STATE_DIR = ".cluster-proxy";
/** The profile's file name in the state directory. */
export const PROFILE_FILE = "hub.json";

/** What `up` writes for the hub operations. Paths are absolute. */
export interface LocalHubProfile {
  kind: "cluster-proxy-local-hub";
  /** The process running the hub. */
  pid: number;
  clusters: string[];
  host: string;
  /** `fleet`: the fleet view's page (`http://<host>:<fleet>/-/fleet/`; absent in older profiles). */
  ports: { grpc: number; connectTls: number; connectPlain: number; health: number; fleet?: number };
  files: { ca: string; clientCert: string; clientKey: string; apiserverCa: string };
}

/** The profile file of the state directory `stateDir`. */
export const profilePath = (stateDir: string): string => join(resolve(stateDir), PROFILE_FILE);

/** Write `profile` into `stateDir` (replacing an older one). */
export async function writeLocalHubProfile(stateDir: string, profile: LocalHubProfile): Promise<string> {
  const file = profilePath(stateDir);
  await writeFile(file, JSON.stringify(profile, null, 2) + "\n", { mode: 0o644 });
  return file;
}

/** Remove the profile of `stateDir` if it is still the one of process `pid`. */
export async function removeLocalHubProfile(stateDir: string, pid: number): Promise<void> {
  const file = profilePath(stateDir);
  try {
    const current = JSON.parse(readFileSync(file, "utf8")) as Partial<LocalHubProfile>;
    if (current.pid !== pid) return;
  } catch {
    return;
  }
  await rm(file, { force: true });
}

/** The flags that decide between the local hub and a Kubernetes hub. */
export interface LocalHubFlags {
  hubProfile?: string;
  kubeconfig?: string;
  proxyServerHost?: string;
}

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
};

const shown = (file: string): string => {
  const rel = relative(process.cwd(), file);
  return rel && !rel.startsWith("..") ? rel : file;
};

/** Read and check a profile file; `flag` names where it came from for the messages. */
export function readLocalHubProfile(file: string, flag: string): LocalHubProfile {
  let profile: Partial<LocalHubProfile>;
  try {
    profile = JSON.parse(readFileSync(file, "utf8")) as Partial<LocalHubProfile>;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT")
      throw new ConfigError(`${flag} ${file}: no such file (it is written by "cluster-proxy up" once the hub is up)`);
    throw new ConfigError(`${flag} ${file}: not a hub profile of "cluster-proxy up" (${code ?? errorMessage(err)})`, {
      cause: err,
    });
  }
  if (profile.kind !== "cluster-proxy-local-hub" || !profile.ports || !profile.files || !profile.clusters)
    throw new ConfigError(`${flag} ${file}: not a hub profile of "cluster-proxy up"`);
  if (typeof profile.pid === "number" && !isAlive(profile.pid))
    throw new CommandFailure(
      `the local hub of ${shown(file)} is not running (its "cluster-proxy up", pid ${profile.pid}, has stopped): start it again with "cluster-proxy up" (or "npm run up"), or pass --kubeconfig for a Kubernetes hub`,
    );
  return profile as LocalHubProfile;
}

/**
 * The local hub the flags select, or undefined for a Kubernetes hub (see the module comment).
 * `cwd` is where `./.cluster-proxy/hub.json` is looked for.
 */
export function selectLocalHub(flags: LocalHubFlags, cwd = process.cwd()): LocalHubProfile | undefined {
  if (flags.hubProfile !== undefined) return readLocalHubProfile(resolve(cwd, flags.hubProfile), "--hub-profile");
  if (flags.kubeconfig !== undefined || flags.proxyServerHost !== undefined) return undefined;
  const file = join(cwd, DEFAULT_STATE_DIR, PROFILE_FILE);
  return existsSync(file) ? readLocalHubProfile(file, `./${DEFAULT_STATE_DIR}/${PROFILE_FILE}`) : undefined;
}

/**
 * `getHub` guarded: when no Kubernetes hub is configured at all (no --kubeconfig, no KUBECONFIG,
 * not in a pod), a message saying what to give instead of what the Kubernetes client would
 * answer (`Invalid URL`).
 */
export function requireConfiguredHub(
  getHub: () => Promise<Hub>,
  flags: LocalHubFlags,
  env: NodeJS.ProcessEnv,
): () => Promise<Hub> {
  return () => {
    const configured =
      flags.kubeconfig !== undefined ||
      (env.KUBECONFIG ?? "").split(":").some((f) => f !== "" && existsSync(f)) ||
      (env.KUBERNETES_SERVICE_HOST !== undefined && env.KUBERNETES_SERVICE_PORT !== undefined);
    if (!configured)
      return Promise.reject(
        new ConfigError(
          `no hub to ask: start a local one with "cluster-proxy up" (then this command finds ./${DEFAULT_STATE_DIR}/${PROFILE_FILE}, or pass --hub-profile <state-dir>/${PROFILE_FILE}), or give a Kubernetes hub with --kubeconfig or KUBECONFIG${env.KUBECONFIG ? ` (KUBECONFIG=${env.KUBECONFIG} names no existing file)` : ""}`,
        ),
      );
    return getHub();
  };
}

/** The local hub's door: the gRPC client door or the mTLS HTTP CONNECT door. */
export function localEndpoint(profile: LocalHubProfile, door: "grpc" | "connect"): ProxyEndpoint {
  return { host: profile.host, port: door === "grpc" ? profile.ports.grpc : profile.ports.connectTls };
}

/** The local hub's client certificate and serving CA. */
export function localCredentials(profile: LocalHubProfile): ProxyCredentials {
  const read = (what: string, file: string): Buffer => {
    try {
      return readFileSync(file);
    } catch (err) {
      throw new CommandFailure(
        `the local hub's ${what} ${file}: ${(err as NodeJS.ErrnoException).code ?? errorMessage(err)} (was the state directory removed? restart "cluster-proxy up")`,
        { cause: err },
      );
    }
  };
  return {
    ca: read("CA", profile.files.ca),
    cert: read("client certificate", profile.files.clientCert),
    key: read("client key", profile.files.clientKey),
  };
}

/** `cluster` checked against the local hub's demo clusters (a usage error naming --cluster). */
export function localCluster(profile: LocalHubProfile, cluster: string): string {
  const bad = clusterNameProblem(cluster);
  if (bad !== undefined) throw new ConfigError(`--cluster: ${bad}`);
  if (!profile.clusters.includes(cluster))
    throw new ConfigError(
      `--cluster: the local hub has no cluster named ${cluster} (its clusters: ${profile.clusters.join(", ")})`,
    );
  return cluster;
}
