// The addon manager as an OCM addon, end to end in the multi-cluster test environment: the real
// OCM v1.2.1 hub (addon manager, registration, conversion webhook) and klusterlets (registration
// and work agents) in mc1 and mc2, the manager as a process of the built CLI, proxy-agents run by
// the process kubelet in each managed cluster's own network, with certificates requested by
// OCM's registration agent and approved and signed by our manager.
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { TunnelHealthReason, parseTunnelHealth, type Condition } from "@cluster-proxy/api";
import { KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "@cluster-proxy/addon-manager";
import { clusterNamesFromCertificate } from "@cluster-proxy/pki";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { NODE_FLAGS } from "@cluster-proxy/cli";
import { nsOf, repoRoot } from "../infra/env/config.js";
import { goBin } from "../framework/go-harness.js";
import { waitFor } from "../infra/env/exec.js";
import { type TestEnv, startTestEnv } from "../infra/env/fixture.js";
import {
  agentLogs as sharedAgentLogs,
  availableThroughAll as availableThroughReplicas,
  type ClusterProbeResult,
  cond,
  deleteAddonCsrs,
  probeClusterFromLab,
  waitForAddon,
  waitForNamespacesGone,
} from "../infra/addon/hub-setup.js";
import { managerFlags, operatorPath, readmeInstallSteps } from "../infra/addon/readme-install.js";
import { CLUSTER_SET, PLACEMENT, PLACEMENT_DECISION, SET_BINDING } from "../infra/addon/ocm-resources.js";
import { ManagerProcess } from "../infra/addon/manager-process.js";
import { errorMessage } from "@cluster-proxy/errors";

// The install guide's namespaces (its commands by hand, docs/guides/install-hub.md, are what this suite runs).
const MANAGER_NS = "open-cluster-management-addon";
const SERVER_NS = "open-cluster-management-cluster-proxy";
const SERVER_REPLICAS = 2;
const NAME = "cluster-proxy";
const AGENT_NS = "open-cluster-management-cluster-proxy";
const SIGNER = "open-cluster-management.io/proxy-agent-signer";
const CLUSTERS = ["mc1", "mc2"] as const;

interface Mca extends KubeObject {
  status?: {
    conditions?: Condition[];
    namespace?: string;
    registrations?: { signerName: string; subject: { user: string; groups: string[]; organizationUnit?: string[] } }[];
    healthCheck?: { mode?: string };
    supportedConfigs?: { group: string; resource: string }[];
  };
}
interface Csr extends KubeObject {
  spec: { signerName: string; username: string };
  status?: { certificate?: string; conditions?: { type: string; reason?: string; message?: string }[] };
}
interface Secret extends KubeObject {
  data?: Record<string, string>;
}
interface Deployment extends KubeObject {
  spec: {
    replicas: number;
    template: {
      spec: { containers: { args: string[]; resources?: unknown }[]; nodeSelector?: Record<string, string> };
    };
  };
  status?: { readyReplicas?: number };
}

const mcaBody = (cluster: string): KubeObject => ({
  apiVersion: Resources.managedClusterAddOn.apiVersion,
  kind: Resources.managedClusterAddOn.kind,
  metadata: { name: NAME, namespace: cluster },
  spec: {},
});
const pem = (s: Secret | undefined, key: string): string => Buffer.from(s?.data?.[key] ?? "", "base64").toString();

describe("the addon manager installs proxy-agents through OCM", { timeout: 30 * 60_000 }, () => {
  let env: TestEnv;
  let hub: KubeApi;
  const spoke: Partial<Record<(typeof CLUSTERS)[number], KubeApi>> = {};
  let dir: string;
  let manager: ManagerProcess | undefined;
  /** The manager's flags from the install guide (kept for restarts). */
  let managerArgs: string[] = [];
  const managers: ManagerProcess[] = [];

  const startManager = (name: string, readmeArgs = managerArgs): ManagerProcess => {
    managerArgs = readmeArgs;
    // In the hub's network namespace, as a manager pod would be: it probes each cluster's tunnel
    // through every proxy-server pod's address.
    const m = new ManagerProcess(name, env.kubeconfigPath("hub"), MANAGER_NS, ["--leader-elect=false"], nsOf("hub"));
    managers.push(m);
    return m;
  };
  /** The last lines of the agent containers' logs in `cluster` (for failure messages). */
  const agentLogs = (cluster: string): string => sharedAgentLogs(cluster, AGENT_NS, 15);
  let podIp = "";
  const clientFiles = (): string => join(dir, "client");
  /** Lists namespaces of `cluster` from the lab through the proxy-server pod's client door (cluster-probe.ts). */
  const probeCluster = (cluster: string, certDir: string, target?: string, goClient?: string): ClusterProbeResult =>
    probeClusterFromLab(env, {
      door: `${podIp}:8090`,
      servername: `proxy-entrypoint.${SERVER_NS}.svc`,
      certDir,
      cluster: cluster as "mc1" | "mc2",
      clusterCaFile: join(clientFiles(), `${cluster}-ca.crt`),
      ...(target ? { target } : {}),
      ...(goClient ? { goClient } : {}),
    });
  const children: ChildProcess[] = [];
  /** Runs a command in the lab namespace without blocking the event loop. */
  const runInLab = (argv: string[], timeoutMs: number): Promise<{ status: number; stdout: string; stderr: string }> =>
    new Promise((resolve) => {
      execFile("ip", ["netns", "exec", nsOf("lab"), ...argv], { timeout: timeoutMs }, (err, stdout, stderr) =>
        resolve({ status: err ? (typeof err.code === "number" ? err.code : 1) : 0, stdout, stderr }),
      );
    });
  const getMca = (cluster: string): Promise<Mca | undefined> =>
    hub.tryGet<Mca>(Resources.managedClusterAddOn, NAME, cluster);
  const availableThroughAll = (m: Mca): boolean => availableThroughReplicas(m, SERVER_REPLICAS);
  const waitMca = (cluster: string, what: string, ok: (m: Mca) => boolean, timeoutMs = 180_000): Promise<Mca> =>
    waitForAddon<Mca>(hub, NAME, cluster, what, ok, {
      timeoutMs,
      everyMs: 250,
      diagnose: () => `--- manager\n${manager?.tail(20) ?? ""}\n${agentLogs(cluster)}`,
    });

  before(
    async () => {
      env = await startTestEnv();
      hub = new KubeApi(env.kubeConfig("hub"));
      for (const c of CLUSTERS) spoke[c] = new KubeApi(env.kubeConfig(c));
      dir = mkdtempSync(join(tmpdir(), "cp-addon-e2e-"));
      writeFileSync(join(dir, "hub.kubeconfig"), env.kubeConfig("hub").exportConfig(), { mode: 0o600 });
      // The install guide creates these: an earlier run's may still be terminating.
      await waitForNamespacesGone(hub, [MANAGER_NS, SERVER_NS]);
      await deleteAddonCsrs(hub);
    },
    { timeout: 90 * 60_000 },
  );

  after(async () => {
    for (const c of children) c.kill("SIGKILL");
    await Promise.all(managers.map((m) => m.stop()));
    for (const c of CLUSTERS) await hub?.delete(Resources.managedClusterAddOn, NAME, c).catch(() => undefined);
    await hub?.delete(Resources.clusterManagementAddOn, NAME).catch(() => undefined);
    await hub?.delete(Resources.managedCluster, "mc3").catch(() => undefined);
    await hub?.delete(PLACEMENT, NAME, MANAGER_NS).catch(() => undefined);
    await hub?.delete(SET_BINDING, "global", MANAGER_NS).catch(() => undefined);
    await hub?.delete(Resources.addOnDeploymentConfig, "cluster-proxy-mc1", "mc1").catch(() => undefined);
    if (hub) await deleteAddonCsrs(hub).catch(() => undefined);
    await hub?.delete(Resources.managedProxyConfiguration, NAME).catch(() => undefined);
    for (const ns of [MANAGER_NS, SERVER_NS]) await hub?.delete(Resources.namespace, ns).catch(() => undefined);
    if (dir) rmSync(dir, { recursive: true, force: true });
    await env?.close();
  });

  test("the install guide's commands by hand: the manager creates the ClusterManagementAddOn; each ManagedClusterAddOn gets its registration, OCM's conditions kept", async () => {
    const steps = readmeInstallSteps();
    // `cluster-proxy` on PATH, as an installed CLI (or the image) has it.
    const path = operatorPath(env, dir);
    for (const step of steps) {
      if (step.kind === "manager") {
        const { args, namespace } = managerFlags(step.args);
        assert.equal(namespace, MANAGER_NS);
        manager = startManager("manager-e2e", args);
        await manager.waitForLog("controllers started", 60_000);
        continue;
      }
      // Asynchronously: the manager's log pipe must keep draining while `kubectl wait` waits.
      const r = await runInLab(
        [
          "env",
          `PATH=${path}`,
          `KUBECONFIG=${env.kubeconfigPath("hub")}`,
          "bash",
          "-euo",
          "pipefail",
          "-c",
          step.script,
        ],
        360_000,
      );
      assert.equal(
        r.status,
        0,
        `install guide step failed:\n${step.script}\n${r.stdout}${r.stderr}\n--- manager\n${manager?.tail(20) ?? ""}`,
      );
      if (/get managedclusteraddon -A/.test(step.script)) console.log(`# ${r.stdout.trim().split("\n").join("\n# ")}`);
    }
    assert.ok(manager, "the install guide starts the manager");
    const cma = await waitFor(
      "the ClusterManagementAddOn",
      60_000,
      () =>
        hub.tryGet<
          KubeObject & { spec: { supportedConfigs: { resource: string; defaultConfig?: { name: string } }[] } }
        >(Resources.clusterManagementAddOn, NAME),
      250,
    );
    assert.deepEqual(
      cma.spec.supportedConfigs.map((s) => [s.resource, s.defaultConfig?.name]),
      [
        ["managedproxyconfigurations", NAME],
        ["addondeploymentconfigs", undefined],
      ],
    );
    for (const c of CLUSTERS) {
      const mca = await waitMca(c, "registration applied", (m) => cond(m, "RegistrationApplied")?.status === "True");
      assert.equal(mca.status?.namespace, AGENT_NS);
      assert.equal(mca.status?.healthCheck?.mode, "Customized");
      assert.deepEqual(
        mca.status?.registrations?.map((r) => [r.signerName, r.subject.user]),
        [[SIGNER, "open-cluster-management:cluster-proxy:proxy-agent"]],
      );
      assert.deepEqual(mca.status?.supportedConfigs?.map((s) => s.resource).sort(), [
        "addondeploymentconfigs",
        "managedproxyconfigurations",
      ]);
      assert.equal(cond(mca, "Configured")?.status, "True", "OCM's Configured condition is not erased");
    }
  });

  test("the agents' certificates come through OCM: approved and signed by the manager, naming only their own cluster", async () => {
    const agentCa = new X509Certificate(
      pem(await hub.get<Secret>(Resources.secret, "cluster-proxy-signer-agent", MANAGER_NS), "ca.crt"),
    );
    for (const c of CLUSTERS) {
      const secret = await waitFor(
        `${c}: the certificate Secret written by OCM's registration agent`,
        180_000,
        async () => {
          const s = await spoke[c]!.tryGet<Secret>(
            Resources.secret,
            "cluster-proxy-open-cluster-management.io-proxy-agent-signer-client-cert",
            AGENT_NS,
          );
          return s?.data?.["tls.crt"] ? s : undefined;
        },
        500,
      );
      const cert = new X509Certificate(pem(secret, "tls.crt"));
      assert.ok(cert.checkIssued(agentCa) && cert.verify(agentCa.publicKey), "signed by the agent CA");
      assert.deepEqual(clusterNamesFromCertificate(pem(secret, "tls.crt")), [c]);
      assert.equal(cert.subjectAltName, `URI:cluster-proxy://cluster/${c}`, "no requested SAN is copied");
      assert.match(cert.subject, /CN=open-cluster-management:cluster-proxy:proxy-agent/, "the subject as requested");
      const eku = cert.keyUsage ?? [];
      assert.deepEqual(eku.slice().sort(), ["1.3.6.1.5.5.7.3.1", "1.3.6.1.5.5.7.3.2"], "serverAuth and clientAuth");
    }
    const csrs = (
      await hub.list(Resources.certificateSigningRequest, {
        labelSelector: "open-cluster-management.io/addon-name=cluster-proxy",
      })
    ).items as Csr[];
    for (const c of CLUSTERS) {
      const mine = csrs.filter((x) => x.spec.username.startsWith(`system:open-cluster-management:${c}:`));
      // The manager deletes the CSRs it approved --csr-cleanup-after (2 minutes) after issue: one
      // already gone is seen in its log.
      assert.ok(
        mine.some((x) => x.status?.conditions?.some((k) => k.type === "Approved") && x.status.certificate) ||
          manager!.logs.some((l) => l.msg === "signed the agent certificate" && l.cluster === c),
        manager!.tail(30),
      );
    }
  });

  test("a certificate request that names mc1 but comes from someone else is denied, never signed", async () => {
    const { execFileSync } = await import("node:child_process");
    const key = join(dir, "hostile.key");
    execFileSync("openssl", ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key]);
    const request = execFileSync(
      "openssl",
      [
        "req",
        "-new",
        "-key",
        key,
        "-subj",
        "/O=open-cluster-management:cluster-proxy/CN=open-cluster-management:cluster-proxy:proxy-agent",
      ],
      { encoding: "utf8" },
    );
    await hub.create(Resources.certificateSigningRequest, {
      metadata: {
        name: "addon-mc1-cluster-proxy-hostile",
        labels: {
          "open-cluster-management.io/addon-name": "cluster-proxy",
          "open-cluster-management.io/cluster-name": "mc1",
        },
      },
      spec: { request: Buffer.from(request).toString("base64"), signerName: SIGNER, usages: ["client auth"] },
    });
    try {
      const denied = await waitFor(
        "the hostile request to be denied",
        60_000,
        async () => {
          const csr = await hub.get<Csr>(Resources.certificateSigningRequest, "addon-mc1-cluster-proxy-hostile");
          return csr.status?.conditions?.find((k) => k.type === "Denied");
        },
        250,
      );
      assert.match(denied.message ?? "", /is not a cluster's registration agent/);
      const csr = await hub.get<Csr>(Resources.certificateSigningRequest, "addon-mc1-cluster-proxy-hostile");
      assert.equal(csr.status?.certificate, undefined);
      assert.ok(!csr.status?.conditions?.some((k) => k.type === "Approved"));
    } finally {
      await hub.delete(Resources.certificateSigningRequest, "addon-mc1-cluster-proxy-hostile");
    }
  });

  test("agents run in mc1 and mc2 and become Available; a hub client reaches both kube-apiservers with TLS verified", async () => {
    for (const c of CLUSTERS) {
      const mca = await waitMca(
        c,
        `ManifestApplied, and Available through all ${SERVER_REPLICAS} proxy-servers`,
        (m) => cond(m, "ManifestApplied")?.status === "True" && availableThroughAll(m),
        240_000,
      );
      assert.equal(cond(mca, "Available")?.reason, TunnelHealthReason.available);
      assert.deepEqual(parseTunnelHealth(cond(mca, "Available")?.message), {
        reachable: SERVER_REPLICAS,
        servers: SERVER_REPLICAS,
      });
      const dep = await spoke[c]!.get<Deployment>(Resources.deployment, "cluster-proxy-proxy-agent", AGENT_NS);
      const args = dep.spec.template.spec.containers[0]!.args;
      assert.ok(args.includes(`--cluster-name=${c}`), args.join(" "));
      assert.ok(
        args.some((a) => /^--proxy-server-host=10\.200\.30\.\d+$/.test(a)),
        args.join(" "),
      );
    }
    // The client side: the proxy-client certificate, the serving CA, the proxy-server pod's client door.
    const files = clientFiles();
    mkdirSync(files, { recursive: true });
    const client = await hub.get<Secret>(Resources.secret, "proxy-client", SERVER_NS);
    writeFileSync(
      join(files, "ca.crt"),
      pem(await hub.get<Secret>(Resources.secret, "proxy-server-ca", SERVER_NS), "ca.crt"),
    );
    writeFileSync(join(files, "tls.crt"), pem(client, "tls.crt"));
    writeFileSync(join(files, "tls.key"), pem(client, "tls.key"), { mode: 0o600 });
    const pods = (await hub.list(Resources.pod, { namespace: SERVER_NS })).items as (KubeObject & {
      status?: { podIP?: string };
    })[];
    podIp = pods.find((p) => p.status?.podIP && !p.metadata.deletionTimestamp)?.status?.podIP ?? "";
    assert.ok(podIp, "a proxy-server pod with an address");
    for (const c of CLUSTERS) {
      const mc = await hub.get<KubeObject & { spec: { managedClusterClientConfigs: { caBundle: string }[] } }>(
        Resources.managedCluster,
        c,
      );
      const caFile = join(files, `${c}-ca.crt`);
      writeFileSync(caFile, Buffer.from(mc.spec.managedClusterClientConfigs[0]!.caBundle, "base64"));
      const result = await waitFor(
        `a hub client to list ${c}'s namespaces through the tunnel`,
        90_000,
        () => {
          const r = probeCluster(c, files);
          return r.ok ? r : undefined;
        },
        2000,
      ).catch((err: Error) => {
        throw new Error(`${err.message}\nlast probe: ${JSON.stringify(probeCluster(c, files))}`, { cause: err });
      });
      assert.ok(result.namespaces?.includes(AGENT_NS), `${c}'s own namespaces: ${result.namespaces?.join(", ")}`);
      // The same through the Go konnectivity-client library (tunnel.DialContext), as Go clients use it.
      const viaGo = probeCluster(c, files, undefined, join(goBin(), "konnectivity-go-client"));
      assert.ok(viaGo.ok && viaGo.namespaces?.includes(AGENT_NS), `Go konnectivity-client: ${JSON.stringify(viaGo)}`);
      // And the seeds' Go snippet itself: client-go with cfg.Dial = tunnel.DialContext.
      const clientGo = env.exec(
        "lab",
        join(env.state.binDir, "clientgo-tunnel"),
        [`${podIp}:8090`, `proxy-entrypoint.${SERVER_NS}.svc`, files, c, caFile, env.kubeconfigPath(c)],
        { timeoutMs: 60_000, allowFail: true },
      );
      const viaClientGo = JSON.parse(clientGo.stdout.trim().split("\n").at(-1) || "{}") as {
        ok?: boolean;
        namespaces?: string[];
      };
      assert.ok(
        viaClientGo.ok && viaClientGo.namespaces?.includes(AGENT_NS),
        `client-go: ${clientGo.stdout}${clientGo.stderr}`,
      );
      // <host>.<cluster>:<port> reaches an address inside that cluster (here its kubernetes Service by DNS).
      const byName = probeCluster(c, files, `kubernetes.default.svc.${c}:443`);
      assert.ok(byName.ok && byName.namespaces?.includes(AGENT_NS), JSON.stringify(byName));
    }
  });

  test("Available is true and fast: mc1 cut off silently from the hub turns False within 15 s and True within 15 s after; mc2 stays Available", async () => {
    for (const c of CLUSTERS) await waitMca(c, "Available", (m) => cond(m, "Available")?.status === "True");
    // Watch mc2 all along: it must never leave True.
    const mc2States = new Set<string>();
    let watching = true;
    const watchMc2 = (async () => {
      while (watching) {
        const m = await getMca("mc2").catch(() => undefined);
        if (m) mc2States.add(`${cond(m, "Available")?.status}: ${cond(m, "Available")?.message}`);
        await new Promise((r) => setTimeout(r, 250));
      }
    })();
    try {
      const cut = Date.now();
      env.blackhole("mc1", true);
      const down = await waitMca(
        "mc1",
        "Available False after the blackhole",
        (m) => cond(m, "Available")?.status === "False",
        60_000,
      );
      const downAfter = Date.now() - cut;
      const available = cond(down, "Available")!;
      assert.equal(available.reason, TunnelHealthReason.unavailable);
      assert.deepEqual(
        parseTunnelHealth(available.message),
        { reachable: 0, servers: SERVER_REPLICAS },
        available.message,
      );
      assert.match(available.message ?? "", /cluster-proxy-[a-z0-9-]+ \(10\.200\.20\.\d+\): /, "names the replica");
      assert.ok(
        downAfter <= 15_000,
        `Available turned False ${downAfter} ms after the cut (limit 15 s): ${available.message}`,
      );

      const lifted = Date.now();
      env.blackhole("mc1", false);
      const up = await waitMca(
        "mc1",
        "Available True after the blackhole is lifted",
        (m) => cond(m, "Available")?.status === "True",
        60_000,
      );
      const upAfter = Date.now() - lifted;
      assert.ok(
        upAfter <= 15_000,
        `Available turned True ${upAfter} ms after lifting (limit 15 s): ${cond(up, "Available")?.message}`,
      );
      console.log(`# mc1 unavailable ${downAfter} ms after the cut, available ${upAfter} ms after lifting it`);
    } finally {
      env.blackhole("mc1", false);
      watching = false;
      await watchMc2;
    }
    assert.deepEqual(
      [...mc2States].filter((s) => !s.startsWith("True")),
      [],
      `mc2 left Available: ${[...mc2States].join(" | ")}`,
    );
    // And the tunnel to mc1 works again for a client.
    const r = await waitFor(
      "mc1 reachable again",
      60_000,
      () => {
        const p = probeCluster("mc1", clientFiles());
        return p.ok ? p : undefined;
      },
      1000,
    );
    assert.ok(r.namespaces?.includes(AGENT_NS));
  });

  test("mc1's agent certificate cannot serve mc2, and is refused at the hub's client door", async () => {
    const secret = await spoke.mc1!.get<Secret>(
      Resources.secret,
      "cluster-proxy-open-cluster-management.io-proxy-agent-signer-client-cert",
      AGENT_NS,
    );
    const files = join(dir, "mc1-agent");
    mkdirSync(files, { recursive: true });
    writeFileSync(join(files, "tls.crt"), pem(secret, "tls.crt"));
    writeFileSync(join(files, "tls.key"), pem(secret, "tls.key"), { mode: 0o600 });
    writeFileSync(join(files, "ca.crt"), readFileSync(join(clientFiles(), "ca.crt")));
    const mpc = await hub.get<KubeObject & { status?: { entrypoint?: string } }>(
      Resources.managedProxyConfiguration,
      NAME,
    );
    const [host, port] = (mpc.status?.entrypoint ?? "").split(/:(?=\d+$)/) as [string, string];
    // An agent in mc1 holding mc1's OCM-issued certificate, claiming to serve mc2.
    const rogue = spawn(
      "ip",
      [
        "netns",
        "exec",
        nsOf("mc1"),
        process.execPath,
        ...NODE_FLAGS,
        join(repoRoot, "packages", "cli", "dist", "main.js"),
        "agent",
        `--proxy-server-host=${host}`,
        `--proxy-server-port=${port}`,
        `--ca-cert=${join(files, "ca.crt")}`,
        `--agent-cert=${join(files, "tls.crt")}`,
        `--agent-key=${join(files, "tls.key")}`,
        "--cluster-name=mc2",
        "--health-server-port=0",
        "--admin-server-port=0",
      ],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    children.push(rogue);
    let log = "";
    rogue.stderr.on("data", (d: Buffer) => (log = (log + d.toString()).slice(-20_000)));
    try {
      await waitFor("the proxy-server to refuse the rogue agent", 60_000, () => /not granted/.test(log), 250);
    } catch (err) {
      throw new Error(`${errorMessage(err)}\nagent log: ${log.slice(-3000)}`, { cause: err });
    } finally {
      rogue.kill("SIGKILL");
    }
    const refusal = log
      .split("\n")
      .map((l) => (l.startsWith("{") ? (JSON.parse(l) as { err?: string }) : {}))
      .find((l) => l.err?.includes("not granted"));
    assert.match(refusal?.err ?? "", /"host=mc2" is not granted by the agent's certificate \(it grants "mc1"\)/);
    // mc2 is still reached, and only mc2 (TLS is verified against mc2's own CA).
    const r = probeCluster("mc2", clientFiles());
    assert.ok(r.ok, JSON.stringify(r));
    // The agent certificate is not a client certificate of the hub.
    const asClient = probeCluster("mc1", files);
    assert.equal(asClient.ok, false, JSON.stringify(asClient));
    assert.doesNotMatch(asClient.error ?? "", /ENOENT|no such file/, "refused by the server, not by a missing file");
  });

  test("a per-cluster AddOnDeploymentConfig rolls out to mc1's agent, and OCM sees the configs applied", async () => {
    const adc = {
      apiVersion: Resources.addOnDeploymentConfig.apiVersion,
      kind: Resources.addOnDeploymentConfig.kind,
      metadata: { name: "cluster-proxy-mc1", namespace: "mc1" },
      spec: {
        agentInstallNamespace: AGENT_NS,
        nodePlacement: { nodeSelector: { "kubernetes.io/os": "linux" } },
        resourceRequirements: [
          { containerID: "deployments:*:proxy-agent", resources: { requests: { cpu: "20m", memory: "32Mi" } } },
        ],
      },
    };
    await hub.apply(Resources.addOnDeploymentConfig, adc);
    const mca = await getMca("mc1");
    await hub.mergePatch(Resources.managedClusterAddOn, NAME, "mc1", {
      metadata: { resourceVersion: mca!.metadata.resourceVersion },
      spec: {
        configs: [
          {
            group: "addon.open-cluster-management.io",
            resource: "addondeploymentconfigs",
            namespace: "mc1",
            name: "cluster-proxy-mc1",
          },
        ],
      },
    });
    const dep = await waitFor(
      "the agent Deployment in mc1 to carry the ADC's resources and node selector",
      120_000,
      async () => {
        const d = await spoke.mc1!.tryGet<Deployment>(Resources.deployment, "cluster-proxy-proxy-agent", AGENT_NS);
        return d && JSON.stringify(d.spec.template.spec.containers[0]!.resources ?? {}).includes('"memory":"32Mi"')
          ? d
          : undefined;
      },
      500,
    );
    assert.deepEqual(dep.spec.template.spec.nodeSelector, { "kubernetes.io/os": "linux" });
    const settled = await waitMca(
      "mc1",
      "Progressing Completed with the ADC applied, and Available",
      (m) => {
        const refs =
          (
            m.status as
              | {
                  configReferences?: {
                    resource: string;
                    desiredConfig?: { specHash?: string };
                    lastAppliedConfig?: { specHash?: string };
                  }[];
                }
              | undefined
          )?.configReferences ?? [];
        const adcRef = refs.find((r) => r.resource === "addondeploymentconfigs");
        return (
          cond(m, "Progressing")?.reason === "Completed" &&
          Boolean(adcRef?.desiredConfig?.specHash) &&
          adcRef?.lastAppliedConfig?.specHash === adcRef?.desiredConfig?.specHash &&
          cond(m, "Available")?.status === "True"
        );
      },
      180_000,
    );
    assert.ok(settled);
    const work = await hub.get(Resources.manifestWork, "addon-cluster-proxy-deploy-0", "mc1");
    const hashes = JSON.parse(
      work.metadata.annotations?.["open-cluster-management.io/config-spec-hash"] ?? "{}",
    ) as Record<string, string>;
    assert.ok(
      hashes["addondeploymentconfigs.addon.open-cluster-management.io/mc1/cluster-proxy-mc1"],
      JSON.stringify(hashes),
    );
    assert.ok(
      hashes["managedproxyconfigurations.proxy.open-cluster-management.io//cluster-proxy"],
      JSON.stringify(hashes),
    );
  });

  test("a restarted manager loses nothing and signs nothing again", async () => {
    const signed = async (): Promise<string[]> =>
      (
        (
          await hub.list(Resources.certificateSigningRequest, {
            labelSelector: "open-cluster-management.io/addon-name=cluster-proxy",
          })
        ).items as Csr[]
      )
        .filter((x) => x.status?.certificate)
        .map((x) => x.metadata.name)
        .sort();
    const before = await signed();
    const works = await Promise.all(
      CLUSTERS.map((c) => hub.get(Resources.manifestWork, "addon-cluster-proxy-deploy-0", c)),
    );
    await manager!.stop();
    manager = startManager("manager-e2e-2");
    await manager.waitForLog("controllers started", 60_000);
    await waitFor(
      "the new manager's watches to sync",
      60_000,
      async () => (await manager!.health("/readyz")) === 200,
      250,
    );
    // An absence cannot be awaited: watch for 10 s (the new manager reconciles every addon and
    // certificate request at once after its caches sync) that nothing is signed or rewritten. (Issued
    // requests may go meanwhile: the manager deletes them --csr-cleanup-after their approval.)
    const noneSignedAgain = async (): Promise<void> => {
      const now = await signed();
      assert.ok(
        now.every((n) => before.includes(n)),
        `no certificate signed again: ${now.join(", ")} vs ${before.join(", ")}`,
      );
    };
    const until = Date.now() + 10_000;
    while (Date.now() < until) {
      await noneSignedAgain();
      await new Promise((r) => setTimeout(r, 1000));
    }
    await noneSignedAgain();
    for (const [i, c] of CLUSTERS.entries()) {
      const w = await hub.get(Resources.manifestWork, "addon-cluster-proxy-deploy-0", c);
      // The work agent writes status (resourceVersion moves); the spec must not have been rewritten.
      assert.equal(w.metadata.generation, works[i]!.metadata.generation, `${c}'s work spec untouched`);
      assert.equal(cond(await getMca(c), "Available")?.status, "True");
    }
    assert.ok(
      !manager.logs.some((l) =>
        /signed the agent certificate|created the agent's ManifestWork|updated the agent's ManifestWork/.test(l.msg),
      ),
      manager.tail(30),
    );
  });

  test("a new agent CA reaches mc1's running agent through OCM without a restart", async () => {
    type Pod = KubeObject & { status?: { containerStatuses?: { restartCount?: number }[] } };
    const pods = async (): Promise<Pod[]> =>
      ((await spoke.mc1!.list(Resources.pod, { namespace: AGENT_NS })).items as Pod[])
        .filter((p) => !p.metadata.deletionTimestamp)
        .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
    const before = await pods();
    assert.ok(before.length >= 1, "mc1 runs agent pods");
    const certName = "cluster-proxy-open-cluster-management.io-proxy-agent-signer-client-cert";
    const oldCert = pem(await spoke.mc1!.get<Secret>(Resources.secret, certName, AGENT_NS), "tls.crt");
    // Losing the agent CA makes a new one: the registration's OU changes, so OCM's registration
    // agent requests a new certificate, which the manager signs with the new CA.
    await hub.delete(Resources.secret, "cluster-proxy-signer-agent", MANAGER_NS);
    const newCa = await waitFor(
      "a new agent CA",
      60_000,
      async () => {
        const s = await hub.tryGet<Secret>(Resources.secret, "cluster-proxy-signer-agent", MANAGER_NS);
        return s ? new X509Certificate(pem(s, "ca.crt")) : undefined;
      },
      250,
    );
    await waitFor(
      "mc1's agent certificate from the new CA",
      180_000,
      async () => {
        const s = await spoke.mc1!.tryGet<Secret>(Resources.secret, certName, AGENT_NS);
        const p = pem(s, "tls.crt");
        return p && p !== oldCert && new X509Certificate(p).checkIssued(newCa);
      },
      500,
    );
    // The running agent process has loaded it (its certificate expiry metric is the new one's).
    const newCert = new X509Certificate(
      pem(await spoke.mc1!.get<Secret>(Resources.secret, certName, AGENT_NS), "tls.crt"),
    );
    const expected = String(Math.floor(Date.parse(newCert.validTo) / 1000));
    for (const pod of before) {
      let metric = "";
      await waitFor(
        `agent ${pod.metadata.name} to report the new certificate's expiry`,
        60_000,
        async () => {
          const out = await env.podExec(
            "mc1",
            AGENT_NS,
            pod.metadata.name,
            process.execPath,
            ["-e", "fetch('http://127.0.0.1:8093/metrics').then((r) => r.text()).then((t) => console.log(t))"],
            { timeoutMs: 20_000, allowFail: true },
          );
          metric =
            out.stdout
              .split("\n")
              .find((l) =>
                l.startsWith('cluster_proxy_agent_certificate_expiry_timestamp_seconds{flag="--agent-cert"}'),
              ) ?? "";
          return metric.endsWith(` ${expected}`);
        },
        1000,
      ).catch((err: Error) => {
        throw new Error(`${err.message}\nmetric: ${metric}, expected ${expected}`, { cause: err });
      });
    }
    await waitMca("mc1", "Available through every proxy-server with the new certificate", availableThroughAll, 180_000);
    const after = await pods();
    assert.deepEqual(
      after.map((p) => [p.metadata.name, p.status?.containerStatuses?.[0]?.restartCount ?? 0]),
      before.map((p) => [p.metadata.name, 0]),
      "the same pod, never restarted",
    );
    // The tunnel works with the new certificate.
    const r = probeCluster("mc1", clientFiles());
    assert.ok(r.ok, JSON.stringify(r));
  });

  test("deleting mc1's ManagedClusterAddOn removes its agent; re-creating it brings the agent back", async () => {
    await hub.delete(Resources.managedClusterAddOn, NAME, "mc1");
    await waitFor(
      "the agent Deployment to leave mc1",
      180_000,
      async () => !(await spoke.mc1!.tryGet(Resources.deployment, "cluster-proxy-proxy-agent", AGENT_NS)),
      500,
    );
    assert.ok(
      await spoke.mc2!.tryGet(Resources.deployment, "cluster-proxy-proxy-agent", AGENT_NS),
      "mc2 keeps its agent",
    );
    await hub.create(Resources.managedClusterAddOn, mcaBody("mc1"));
    await waitMca("mc1", "Available again", (m) => cond(m, "Available")?.status === "True", 240_000);
  });

  test("install strategy Placements: OCM gives the addon to every selected cluster, one joining later too; deleting that cluster removes it", async () => {
    // What the chart (or --install-placement) sets up: a Placement over the global cluster set.
    if (!(await hub.tryGet(CLUSTER_SET, "global")))
      await hub.create(CLUSTER_SET, {
        metadata: { name: "global" },
        spec: { clusterSelector: { selectorType: "LabelSelector", labelSelector: {} } },
      });
    await hub.apply(SET_BINDING, {
      metadata: { name: "global", namespace: MANAGER_NS },
      spec: { clusterSet: "global" },
    });
    await hub.apply(PLACEMENT, {
      metadata: { name: NAME, namespace: MANAGER_NS },
      spec: {
        clusterSets: ["global"],
        // A cluster that is not reachable yet gets its agent queued all the same.
        tolerations: [
          { key: "cluster.open-cluster-management.io/unreachable", operator: "Exists" },
          { key: "cluster.open-cluster-management.io/unavailable", operator: "Exists" },
        ],
      },
    });
    // As an operator switching existing addons over: first the Placement selects the clusters. OCM
    // removes the addons of clusters a Placement does not select, and a switch made before its
    // decision exists would take mc1's and mc2's agents away for a moment.
    await waitFor(
      "the Placement's decision to select mc1 and mc2",
      120_000,
      async () => {
        const decisions = (
          await hub.list(PLACEMENT_DECISION, {
            namespace: MANAGER_NS,
            labelSelector: `cluster.open-cluster-management.io/placement=${NAME}`,
          })
        ).items as (KubeObject & { status?: { decisions?: { clusterName: string }[] } })[];
        const selected = new Set(decisions.flatMap((d) => d.status?.decisions ?? []).map((d) => d.clusterName));
        return CLUSTERS.every((c) => selected.has(c));
      },
      500,
    );
    await hub.mergePatch(Resources.clusterManagementAddOn, NAME, undefined, {
      spec: { installStrategy: { type: "Placements", placements: [{ name: NAME, namespace: MANAGER_NS }] } },
    });
    // A cluster joins: the hub accepts it, the Placement selects it, OCM creates its addon, our
    // manager its agent's ManifestWork (no klusterlet runs for it here, so the work stays queued).
    await hub.create(Resources.managedCluster, { metadata: { name: "mc3" }, spec: { hubAcceptsClient: true } });
    try {
      const work = await waitFor(
        "mc3's agent ManifestWork",
        180_000,
        () => hub.tryGet<KubeObject & { spec: unknown }>(Resources.manifestWork, "addon-cluster-proxy-deploy-0", "mc3"),
        1000,
      ).catch(async (err: Error) => {
        const mca = await getMca("mc3").catch(() => undefined);
        throw new Error(
          `${err.message}
mc3's addon: ${JSON.stringify(mca?.status ?? mca ?? null)}`,
          { cause: err },
        );
      });
      assert.match(JSON.stringify(work.spec), /--cluster-name=mc3/);
      for (const c of CLUSTERS) {
        const available = cond(await getMca(c), "Available");
        assert.equal(available?.status, "True", `${c} stays Available: ${available?.message}`);
      }
    } finally {
      await hub.delete(Resources.managedCluster, "mc3").catch(() => undefined);
    }
    await waitFor(
      "mc3's addon and work to go with the cluster",
      180_000,
      async () =>
        !(await getMca("mc3")) && !(await hub.tryGet(Resources.manifestWork, "addon-cluster-proxy-deploy-0", "mc3")),
      1000,
    );
  });

  test("deleting the ClusterManagementAddOn removes the agent from every cluster", async () => {
    await hub.delete(Resources.clusterManagementAddOn, NAME);
    for (const c of CLUSTERS)
      await waitFor(
        `the agent Deployment to leave ${c}`,
        240_000,
        async () => !(await spoke[c]!.tryGet(Resources.deployment, "cluster-proxy-proxy-agent", AGENT_NS)),
        1000,
      );
    for (const c of CLUSTERS) assert.equal(await getMca(c), undefined, `${c}'s ManagedClusterAddOn is gone`);
  });
});
