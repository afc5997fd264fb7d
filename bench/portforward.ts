/**
 * The cost of entrypoint PortForward (docs/design/portforward.md) against a direct entrypoint
 * (LoadBalancerService), in the multi-cluster test environment (test/infra/env; run as root, with the
 * same CPENV_* variables as its tests):
 *
 *   node --conditions=source --import tsx bench/portforward.ts
 *
 * For each entrypoint and each fleet (1 and 25 agents per cluster: 2 and 50 agents, 2 proxy-servers)
 * it waits until every agent holds a tunnel to every proxy-server, then measures the hub
 * kube-apiserver (RSS, CPU while idle, open file descriptors), tunnel throughput (echo traffic to
 * mc1 as fast as it goes, through one proxy-server's gRPC door) with the apiserver's CPU meanwhile,
 * and time to first byte (fresh tunnel, one byte and its echo). Writes
 * bench/results/portforward.json and prints a table.
 */
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseTunnelHealth, type Condition } from "@cluster-proxy/api";
import { KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "@cluster-proxy/addon-manager";
import { HOST_ADDR, nsOf, repoRoot } from "../test/infra/env/config.js";
import { waitFor } from "../test/infra/env/exec.js";
import { startTestEnv } from "../test/infra/env/fixture.js";
import { installCrd, mpcBody as sharedMpcBody } from "../test/infra/addon/hub-setup.js";
import { ManagerProcess } from "../test/infra/addon/manager-process.js";

const MANAGER_NS = "open-cluster-management-addon";
const SERVER_NS = "open-cluster-management-cluster-proxy";
const NAME = "cluster-proxy";
const CLUSTERS = ["mc1", "mc2"] as const;
const SERVERS = 2;
const ECHO_PORT = 17_778;
const ENTRYPOINTS = ["PortForward", "LoadBalancerService"] as const;
const AGENTS_PER_CLUSTER = [1, 25];

interface Sample {
  entrypoint: (typeof ENTRYPOINTS)[number];
  agents: number;
  apiserverRssMiB: number;
  apiserverFds: number;
  apiserverIdleCpuPercent: number;
  throughputMiBs: number;
  apiserverCpuPercentDuringBulk: number;
  firstByteMsMedian: number;
  firstByteMsP90: number;
}

const mpcBody = (entrypoint: (typeof ENTRYPOINTS)[number], agents: number): KubeObject =>
  sharedMpcBody({
    name: NAME,
    entrypoint: entrypoint === "PortForward" ? { type: "PortForward" } : { type: entrypoint, loadBalancerService: {} },
    serverReplicas: SERVERS,
    agentReplicas: agents,
  });

const ticks = (pid: number): number => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return Number(fields[11]) + Number(fields[12]);
};
const rssMiB = (pid: number): number =>
  Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) / 1024;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const percentile = (xs: number[], p: number): number =>
  [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) * p)] ?? NaN;

async function main(): Promise<void> {
  const env = await startTestEnv();
  const hub = new KubeApi(env.kubeConfig("hub"));
  const apiserver = env.state.procs.find((p) => p.name === "hub-kube-apiserver")!.pid;
  const dir = mkdtempSync(join(tmpdir(), "cp-bench-portforward-"));
  let manager: ManagerProcess | undefined;
  const echo = spawn(
    "ip",
    [
      "netns",
      "exec",
      nsOf("mc1"),
      process.execPath,
      "-e",
      `require("net").createServer((s) => { s.on("error", () => {}); s.pipe(s); }).listen(${ECHO_PORT}, "${HOST_ADDR.mc1}")`,
    ],
    { stdio: "ignore" },
  );
  const samples: Sample[] = [];
  try {
    for (const ns of [MANAGER_NS, SERVER_NS]) await hub.delete(Resources.namespace, ns);
    for (const ns of [MANAGER_NS, SERVER_NS])
      await waitFor(`namespace ${ns} gone`, 180_000, async () => !(await hub.tryGet(Resources.namespace, ns)), 1000);
    for (const c of (
      await hub.list(Resources.certificateSigningRequest, {
        labelSelector: "open-cluster-management.io/addon-name=cluster-proxy",
      })
    ).items)
      await hub.delete(Resources.certificateSigningRequest, c.metadata.name);
    await installCrd(hub);
    await hub.apply(Resources.namespace, { metadata: { name: MANAGER_NS } });
    await hub.apply(Resources.managedProxyConfiguration, mpcBody("PortForward", 1));
    manager = new ManagerProcess(
      "manager-bench",
      env.kubeconfigPath("hub"),
      MANAGER_NS,
      ["--leader-elect=false"],
      nsOf("hub"),
    );
    await manager.waitForLog("controllers started", 60_000);
    for (const c of CLUSTERS)
      await hub.apply(Resources.managedClusterAddOn, { metadata: { name: NAME, namespace: c }, spec: {} });
    const certs = join(dir, "client");
    mkdirSync(certs, { recursive: true });

    for (const entrypoint of ENTRYPOINTS) {
      for (const perCluster of AGENTS_PER_CLUSTER) {
        await hub.apply(Resources.managedProxyConfiguration, mpcBody(entrypoint, perCluster));
        let podIp = "";
        await waitFor(
          `${entrypoint}, ${perCluster} agents per cluster, each on both proxy-servers`,
          900_000,
          async () => {
            for (const c of CLUSTERS) {
              const mca = await hub.tryGet<KubeObject & { status?: { conditions?: Condition[] } }>(
                Resources.managedClusterAddOn,
                NAME,
                c,
              );
              const available = mca?.status?.conditions?.find((k) => k.type === "Available");
              if (parseTunnelHealth(available?.message)?.reachable !== SERVERS) return undefined;
            }
            const pods = (await hub.list(Resources.pod, { namespace: SERVER_NS })).items as (KubeObject & {
              status?: { podIP?: string };
            })[];
            const ready = pods.filter((p) => !p.metadata.deletionTimestamp && p.status?.podIP);
            if (ready.length !== SERVERS) return undefined;
            for (const p of ready) {
              const text = env.exec(
                "lab",
                "curl",
                ["-sf", "--max-time", "5", `http://${p.status!.podIP!}:8092/metrics`],
                {
                  allowFail: true,
                },
              ).stdout;
              for (const c of CLUSTERS) {
                const n = Number(
                  new RegExp(`^cluster_proxy_server_backends\\{identifier="${c}"\\} (\\S+)$`, "m").exec(text)?.[1],
                );
                if (n !== perCluster) return undefined;
              }
            }
            podIp = ready[0]!.status!.podIP!;
            return true;
          },
          2000,
        );
        const client = await hub.get<KubeObject & { data: Record<string, string> }>(
          Resources.secret,
          "proxy-client",
          SERVER_NS,
        );
        const ca = await hub.get<KubeObject & { data: Record<string, string> }>(
          Resources.secret,
          "proxy-server-ca",
          SERVER_NS,
        );
        writeFileSync(join(certs, "ca.crt"), Buffer.from(ca.data["ca.crt"]!, "base64"));
        writeFileSync(join(certs, "tls.crt"), Buffer.from(client.data["tls.crt"]!, "base64"));
        writeFileSync(join(certs, "tls.key"), Buffer.from(client.data["tls.key"]!, "base64"), { mode: 0o600 });
        await sleep(10_000); // let connection set-up settle before the idle window
        const hz = 100;
        const idle0 = ticks(apiserver);
        await sleep(30_000);
        const idleCpu = ((ticks(apiserver) - idle0) / hz / 30) * 100;
        const rss = rssMiB(apiserver);
        const fds = readdirSync(`/proc/${apiserver}/fd`).length;
        const run = (
          mode: string,
          arg: string,
        ): { ok?: boolean; bytesPerSecond?: number; ms?: number[]; error?: string } =>
          JSON.parse(
            env
              .exec(
                "lab",
                process.execPath,
                [
                  "--conditions=source",
                  "--import",
                  "tsx",
                  join(repoRoot, "bench", "portforward-client.ts"),
                  `${podIp}:8090`,
                  `proxy-entrypoint.${SERVER_NS}.svc`,
                  certs,
                  `${HOST_ADDR.mc1}.mc1:${ECHO_PORT}`,
                  mode,
                  arg,
                ],
                { timeoutMs: 180_000, allowFail: true },
              )
              .stdout.trim()
              .split("\n")
              .at(-1) || "{}",
          ) as { ok?: boolean; bytesPerSecond?: number; ms?: number[]; error?: string };
        const bulk0 = ticks(apiserver);
        const t0 = Date.now();
        const bulk = run("bulk", "10");
        const bulkCpu = ((ticks(apiserver) - bulk0) / hz / ((Date.now() - t0) / 1000)) * 100;
        const fb = run("firstbyte", "30");
        if (!bulk.ok || !fb.ok) throw new Error(`measurement failed: ${JSON.stringify({ bulk, fb })}`);
        const sample: Sample = {
          entrypoint,
          agents: perCluster * CLUSTERS.length,
          apiserverRssMiB: Math.round(rss),
          apiserverFds: fds,
          apiserverIdleCpuPercent: Math.round(idleCpu * 10) / 10,
          throughputMiBs: Math.round(((bulk.bytesPerSecond ?? 0) / 1024 / 1024) * 10) / 10,
          apiserverCpuPercentDuringBulk: Math.round(bulkCpu),
          firstByteMsMedian: Math.round(percentile(fb.ms!, 0.5) * 10) / 10,
          firstByteMsP90: Math.round(percentile(fb.ms!, 0.9) * 10) / 10,
        };
        samples.push(sample);
        console.log(JSON.stringify(sample));
      }
    }
  } finally {
    echo.kill("SIGKILL");
    await manager?.stop();
    for (const c of CLUSTERS) await hub.delete(Resources.managedClusterAddOn, NAME, c).catch(() => undefined);
    await hub.delete(Resources.clusterManagementAddOn, NAME).catch(() => undefined);
    await hub.delete(Resources.managedProxyConfiguration, NAME).catch(() => undefined);
    for (const ns of [MANAGER_NS, SERVER_NS]) await hub.delete(Resources.namespace, ns).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
    await env.close();
  }
  mkdirSync(join(repoRoot, "bench", "results"), { recursive: true });
  writeFileSync(join(repoRoot, "bench", "results", "portforward.json"), `${JSON.stringify(samples, null, 2)}\n`);
  console.log(
    "| entrypoint | agents | apiserver RSS MiB | fds | idle CPU % | MiB/s | apiserver CPU % in bulk | first byte ms p50 / p90 |",
  );
  console.log("| --- | --- | --- | --- | --- | --- | --- | --- |");
  for (const s of samples)
    console.log(
      `| ${s.entrypoint} | ${s.agents} | ${s.apiserverRssMiB} | ${s.apiserverFds} | ${s.apiserverIdleCpuPercent} | ${s.throughputMiBs} | ${s.apiserverCpuPercentDuringBulk} | ${s.firstByteMsMedian} / ${s.firstByteMsP90} |`,
    );
}

await main();
