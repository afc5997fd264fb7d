/**
 * The pieces bench/gateway.ts runs, all on loopback: the certificates of the gateway's trust roles
 * (docs/design/gateway.md) made with @cluster-proxy/pki, the two stand-in apiservers (the managed
 * cluster's and the hub's), the files the agent and the gateway read (service account directory,
 * hub kubeconfig), and the gateway process. Processes go through the harness, so they are stopped
 * by PID at the end.
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import * as https from "node:https";
import { join } from "node:path";
import { GATEWAY_ENDPOINT_HOST, gatewayEndpointAddress } from "@cluster-proxy/api";
import { NODE_FLAGS } from "@cluster-proxy/cli";
import {
  agentClusterUri,
  createCertificateAuthority,
  issueCertificate,
  writeStandaloneCerts,
  type CertKeyPaths,
  type CertificateAndKey,
  type StandaloneCertPaths,
} from "@cluster-proxy/pki";
import { CLI } from "../test/framework/repo.js";
import { freePort, type Harness } from "../test/framework/harness.js";
import { httpGet } from "../test/framework/http.js";
import { waitForProc, type Proc } from "../test/framework/process.js";
import { GATEWAY_SERVICE_DNS } from "./aggregated-hub.js";
import { BENCH, TS_NODE, firstJsonLine } from "./lib.js";
import type { FloorConfig } from "./gateway-floor.js";

/** Hosts every serving certificate of the bench is valid for. */
const LOOPBACK_HOSTS = { dnsNames: ["localhost"], ipAddresses: ["127.0.0.1"] };
/** The name the managed apiserver's certificate carries besides loopback (what a pod dials). */
export const KUBE_APISERVER_NAME = "kubernetes.default.svc";

/** Every certificate the bench uses. */
export interface GatewayBenchCerts {
  /** Serving, client and agent CAs, the hub's serving and client certificates, the agent's (re-issued: serverAuth + clientAuth). */
  standalone: StandaloneCertPaths;
  /** The gateway CA (the fourth CA) and the gateway identity it signs (clientAuth). */
  gatewayCa: CertKeyPaths;
  gatewayIdentity: CertKeyPaths;
  /** The gateway's serving certificate, from the serving CA (loopback and the aggregated path's Service name). */
  gatewayServing: CertKeyPaths;
  /** The managed cluster's own CA and its apiserver's serving certificate. */
  clusterCa: CertKeyPaths;
  kubeApiserver: CertKeyPaths;
  /** The hub apiserver's CA and serving certificate. */
  hubCa: CertKeyPaths;
  hubApiserver: CertKeyPaths;
}

async function writePair(dir: string, base: string, pem: CertificateAndKey): Promise<CertKeyPaths> {
  const paths = { cert: join(dir, `${base}.crt`), key: join(dir, `${base}.key`) };
  await writeFile(paths.key, pem.keyPem, { mode: 0o600 });
  await writeFile(paths.cert, pem.certPem);
  return paths;
}

async function readPair(paths: CertKeyPaths): Promise<CertificateAndKey> {
  return { certPem: await readFile(paths.cert, "utf8"), keyPem: await readFile(paths.key, "utf8") };
}

/** Write every certificate into `dir` (created), with agent certificates for `clusters`. */
export async function writeGatewayBenchCerts(dir: string, clusters: readonly string[]): Promise<GatewayBenchCerts> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const standalone = await writeStandaloneCerts(dir, { clusters, hubHosts: ["localhost", "127.0.0.1"] });
  // Agent certificates serve the gateway endpoint too: serverAuth + clientAuth, the cluster's URI SAN.
  const agentCa = await readPair(standalone.agentCa);
  for (const cluster of clusters)
    await writePair(
      dir,
      `agent-${cluster}`,
      await issueCertificate(agentCa, {
        commonName: `cluster-proxy-agent:${cluster}`,
        organization: "cluster-proxy-agents",
        uris: [agentClusterUri(cluster)],
        usage: "both",
      }),
    );
  const serving = await readPair(standalone.ca);
  const gatewayCa = await createCertificateAuthority({ commonName: "cluster-proxy-gateway-ca" });
  const clusterCa = await createCertificateAuthority({ commonName: "bench-cluster-ca" });
  const hubCa = await createCertificateAuthority({ commonName: "bench-hub-ca" });
  return {
    standalone,
    gatewayCa: await writePair(dir, "gateway-ca", gatewayCa),
    gatewayIdentity: await writePair(
      dir,
      "gateway-identity",
      await issueCertificate(gatewayCa, { commonName: "cluster-proxy-gateway", usage: "client" }),
    ),
    gatewayServing: await writePair(
      dir,
      "gateway-serving",
      // Also the name the hub's aggregator verifies (the aggregated path).
      await issueCertificate(serving, {
        commonName: "cluster-proxy-gateway",
        dnsNames: [...LOOPBACK_HOSTS.dnsNames, GATEWAY_SERVICE_DNS],
        ipAddresses: LOOPBACK_HOSTS.ipAddresses,
        usage: "server",
      }),
    ),
    clusterCa: await writePair(dir, "cluster-ca", clusterCa),
    kubeApiserver: await writePair(
      dir,
      "kube-apiserver",
      await issueCertificate(clusterCa, {
        commonName: "kube-apiserver",
        dnsNames: [...LOOPBACK_HOSTS.dnsNames, KUBE_APISERVER_NAME],
        ipAddresses: LOOPBACK_HOSTS.ipAddresses,
        usage: "server",
      }),
    ),
    hubCa: await writePair(dir, "hub-ca", hubCa),
    hubApiserver: await writePair(
      dir,
      "hub-apiserver",
      await issueCertificate(hubCa, { commonName: "hub-kube-apiserver", ...LOOPBACK_HOSTS, usage: "server" }),
    ),
  };
}

/** A projected service account directory (`token`, `ca.crt`, `namespace`) in `dir`. */
export async function writeServiceAccountDir(dir: string, token: string, caFile: string): Promise<string> {
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "token"), token, { mode: 0o600 });
  await writeFile(join(dir, "ca.crt"), await readFile(caFile));
  await writeFile(join(dir, "namespace"), "open-cluster-management-agent-addon");
  return dir;
}

/** A kubeconfig at `path` for `server` (verified with `caFile`), authenticating with `token`. */
export async function writeKubeconfig(path: string, server: string, caFile: string, token: string): Promise<string> {
  await writeFile(
    path,
    [
      "apiVersion: v1",
      "kind: Config",
      "clusters:",
      "  - name: hub",
      "    cluster:",
      `      server: ${server}`,
      `      certificate-authority: ${caFile}`,
      "users:",
      "  - name: gateway",
      "    user:",
      `      token: ${token}`,
      "contexts:",
      "  - name: hub",
      "    context:",
      "      cluster: hub",
      "      user: gateway",
      "current-context: hub",
      "",
    ].join("\n"),
    { mode: 0o600 },
  );
  return path;
}

/** A stand-in apiserver process and its port. */
export interface StandIn {
  proc: Proc;
  port: number;
  /** GET `/_bench/stats` of the stand-in. */
  stats<T>(): Promise<T>;
  /** Write one command line to its stdin. */
  command(line: string): void;
}

/**
 * Start `script` (bench/kube-apiserver-stand-in.ts or bench/hub-apiserver-stand-in.ts) with
 * `config`; resolves once it listens. Its stdin is a pipe: it exits when the bench does.
 */
export async function startStandIn(
  h: Harness,
  name: string,
  script: string,
  config: Record<string, unknown>,
  caFile: string,
): Promise<StandIn> {
  const proc = h.spawnProc(name, process.execPath, [...TS_NODE, join(BENCH, script), JSON.stringify(config)], {
    stdin: true,
  });
  const { port } = await firstJsonLine<{ port: number }>(proc, `${name} port`);
  const ca = await readFile(caFile);
  return {
    proc,
    port,
    stats: async <T>() => (await fetchJson(`https://127.0.0.1:${port}/_bench/stats`, ca)) as T,
    command: (line) => void proc.child.stdin?.write(`${line}\n`),
  };
}

/** GET a JSON document over https, verified with `ca`, within 10 s. */
function fetchJson(url: string, ca: Buffer): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const req = https.get(url, { ca, timeout: 10_000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => {
        try {
          resolve(JSON.parse(body));
        } catch (e) {
          reject(e as Error);
        }
      });
    });
    req.on("timeout", () => req.destroy(new Error(`GET ${url}: timed out`)));
    req.on("error", reject);
  });
}

/** The flags of `cluster-proxy gateway` the bench sets besides the ports (docs/design/gateway.md). */
export interface GatewayConfig {
  certs: GatewayBenchCerts;
  proxyServerPort: number;
  hubKubeconfig: string;
  auditLog: string;
  maxConnectionsPerCluster: number;
  /** Extra node flags of the gateway process (e.g. --cpu-prof). */
  nodeArgs?: string[];
}

/** The gateway process and its ports. */
export interface Gateway {
  proc: Proc;
  port: number;
  healthPort: number;
}

/** Start `cluster-proxy gateway` (the built CLI, with its V8 flags); resolves once /readyz answers 200. */
export async function startGateway(h: Harness, c: GatewayConfig): Promise<Gateway> {
  const [port, healthPort] = [await freePort(), await freePort()];
  const s = c.certs.standalone;
  const proc = h.spawnProc("gateway", process.execPath, [
    ...NODE_FLAGS,
    ...(c.nodeArgs ?? []),
    CLI,
    "gateway",
    `--port=${port}`,
    `--health-port=${healthPort}`,
    `--serving-cert=${c.certs.gatewayServing.cert}`,
    `--serving-key=${c.certs.gatewayServing.key}`,
    "--proxy-server-host=127.0.0.1",
    `--proxy-server-port=${c.proxyServerPort}`,
    `--proxy-ca=${s.ca.cert}`,
    `--proxy-cert=${s.client.cert}`,
    `--proxy-key=${s.client.key}`,
    `--identity-cert=${c.certs.gatewayIdentity.cert}`,
    `--identity-key=${c.certs.gatewayIdentity.key}`,
    `--agent-ca=${s.agentCa.cert}`,
    `--hub-kubeconfig=${c.hubKubeconfig}`,
    "--namespace=open-cluster-management-cluster-proxy",
    `--audit-log=${c.auditLog}`,
    "--audit-log-max-size=64",
    "--audit-log-max-files=1",
    `--max-connections-per-cluster=${c.maxConnectionsPerCluster}`,
    // As the bench's server and agent run (the gateway's default is info).
    "--log-level=warn",
  ]);
  await waitForProc(
    proc,
    `gateway ready (health port ${healthPort})`,
    async () => (await httpGet(`http://127.0.0.1:${healthPort}/readyz`)).status === 200,
  );
  return { proc, port, healthPort };
}

/**
 * Start bench/gateway-floor.ts (a plain Node.js gateway of our design, on the gateway's node flags
 * without the bench's extra ones) in front of `cluster`'s endpoint; resolves with its HTTPS port
 * once its endpoint session is up.
 */
export async function startGatewayFloor(
  h: Harness,
  c: GatewayConfig,
  cluster: string,
  impersonation: { user: string; groups: string[] },
): Promise<{ proc: Proc; port: number }> {
  const s = c.certs.standalone;
  const config: FloorConfig = {
    proxyServer: { host: "127.0.0.1", port: c.proxyServerPort, ca: s.ca.cert, cert: s.client.cert, key: s.client.key },
    endpoint: {
      address: gatewayEndpointAddress(cluster),
      servername: GATEWAY_ENDPOINT_HOST,
      ca: s.agentCa.cert,
      cert: c.certs.gatewayIdentity.cert,
      key: c.certs.gatewayIdentity.key,
    },
    serving: c.certs.gatewayServing,
    cluster,
    impersonateUser: impersonation.user,
    impersonateGroups: impersonation.groups,
  };
  const file = join(h.dir, "gateway-floor.json");
  await writeFile(file, JSON.stringify(config));
  const proc = h.spawnProc("gateway-floor", process.execPath, [
    ...NODE_FLAGS,
    ...TS_NODE,
    join(BENCH, "gateway-floor.ts"),
    file,
  ]);
  const { port } = await firstJsonLine<{ port: number }>(proc, "gateway floor port");
  return { proc, port };
}
