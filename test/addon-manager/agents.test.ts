// The addon manager as an OCM addon, end to end in the multi-cluster test environment: the real
// OCM v1.2.1 hub (addon manager, registration, conversion webhook) and klusterlets (registration
// and work agents) in mc1 and mc2, the manager as a process of the built CLI, proxy-agents run by
// the process kubelet in each managed cluster's own network, with certificates requested by
// OCM's registration agent and approved and signed by our manager.
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { managedProxyConfigurationCrd, MPC_API_VERSION, MPC_KIND, type Condition } from "@cluster-proxy/api";
import { KubeApi, Resources, type KubeObject } from "@cluster-proxy/addon-manager";
import { clusterNamesFromCertificate } from "@cluster-proxy/pki";
import { repoRoot, stateDir } from "../env/config.js";
import { waitFor } from "../env/exec.js";
import { type TestEnv, startTestEnv } from "../env/fixture.js";
import { ManagerProcess } from "./manager-process.js";

const MANAGER_NS = "cluster-proxy-addon-e2e";
const SERVER_NS = "cluster-proxy-e2e";
const NAME = "cluster-proxy";
const AGENT_NS = "open-cluster-management-cluster-proxy";
const SIGNER = "open-cluster-management.io/proxy-agent-signer";
const CRD = {
  apiVersion: "apiextensions.k8s.io/v1",
  kind: "CustomResourceDefinition",
  plural: "customresourcedefinitions",
  namespaced: false,
};
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

const mpcBody = (): KubeObject => ({
  apiVersion: MPC_API_VERSION,
  kind: MPC_KIND,
  metadata: { name: NAME },
  spec: {
    proxyServer: {
      image: "quay.io/open-cluster-management/cluster-proxy:dev",
      replicas: 1,
      namespace: SERVER_NS,
      entrypoint: { type: "LoadBalancerService", loadBalancerService: {} },
    },
    proxyAgent: { image: "quay.io/open-cluster-management/cluster-proxy:dev", replicas: 1 },
    authentication: {},
  },
});
const mcaBody = (cluster: string): KubeObject => ({
  apiVersion: Resources.managedClusterAddOn.apiVersion,
  kind: Resources.managedClusterAddOn.kind,
  metadata: { name: NAME, namespace: cluster },
  spec: {},
});
const cond = (o: { status?: { conditions?: Condition[] } } | undefined, type: string): Condition | undefined =>
  o?.status?.conditions?.find((c) => c.type === type);
const pem = (s: Secret | undefined, key: string): string => Buffer.from(s?.data?.[key] ?? "", "base64").toString();

describe("the addon manager installs proxy-agents through OCM", { timeout: 30 * 60_000 }, () => {
  let env: TestEnv;
  let hub: KubeApi;
  const spoke: Partial<Record<(typeof CLUSTERS)[number], KubeApi>> = {};
  let dir: string;
  let manager: ManagerProcess | undefined;
  const managers: ManagerProcess[] = [];

  const startManager = (name: string): ManagerProcess => {
    const m = new ManagerProcess(name, join(dir, "hub.kubeconfig"), MANAGER_NS, ["--leader-elect=false"]);
    managers.push(m);
    return m;
  };
  /** The last lines of the agent containers' logs in `cluster` (for failure messages). */
  const agentLogs = (cluster: string): string => {
    const base = join(stateDir, "data", cluster, "kubelet");
    try {
      return readdirSync(base)
        .filter((d) => d.startsWith(`${AGENT_NS}_cluster-proxy-proxy-agent-`))
        .map((d) => {
          let text: string;
          try {
            text = readFileSync(join(base, d, "proxy-agent.log"), "utf8")
              .split("\n")
              .slice(-15)
              .join("\n");
          } catch {
            text = "(no log)";
          }
          return `--- ${cluster} ${d}\n${text}`;
        })
        .join("\n");
    } catch {
      return `(no pods in ${base})`;
    }
  };
  const getMca = (cluster: string): Promise<Mca | undefined> =>
    hub.tryGet<Mca>(Resources.managedClusterAddOn, NAME, cluster);
  const waitMca = async (cluster: string, what: string, ok: (m: Mca) => boolean, timeoutMs = 180_000): Promise<Mca> => {
    let last: Mca | undefined;
    try {
      return await waitFor(
        `${cluster}: ${what}`,
        timeoutMs,
        async () => {
          last = await getMca(cluster);
          return last && ok(last) ? last : undefined;
        },
        250,
      );
    } catch (err) {
      throw new Error(
        `${(err as Error).message}\nlast status: ${JSON.stringify(last?.status)}\n--- manager\n${manager?.tail(20) ?? ""}\n${agentLogs(cluster)}`,
        { cause: err },
      );
    }
  };

  before(
    async () => {
      env = await startTestEnv();
      hub = new KubeApi(env.kubeConfig("hub"));
      for (const c of CLUSTERS) spoke[c] = new KubeApi(env.kubeConfig(c));
      dir = mkdtempSync(join(tmpdir(), "cp-addon-e2e-"));
      writeFileSync(join(dir, "hub.kubeconfig"), env.kubeConfig("hub").exportConfig(), { mode: 0o600 });
      await hub.apply(CRD, managedProxyConfigurationCrd() as unknown as KubeObject);
      await waitFor("the CRD to be Established", 60_000, async () => {
        const crd = (await hub.get(CRD, managedProxyConfigurationCrd().metadata.name)) as {
          status?: { conditions?: Condition[] };
        };
        return crd.status?.conditions?.some((c) => c.type === "Established" && c.status === "True");
      });
      await hub.apply(Resources.namespace, { metadata: { name: MANAGER_NS } });
    },
    { timeout: 90 * 60_000 },
  );

  after(async () => {
    await Promise.all(managers.map((m) => m.stop()));
    for (const c of CLUSTERS) await hub?.delete(Resources.managedClusterAddOn, NAME, c).catch(() => undefined);
    await hub?.delete(Resources.clusterManagementAddOn, NAME).catch(() => undefined);
    await hub?.delete(Resources.managedProxyConfiguration, NAME).catch(() => undefined);
    await hub?.delete(Resources.namespace, MANAGER_NS).catch(() => undefined);
    if (dir) rmSync(dir, { recursive: true, force: true });
    await env?.close();
  });

  test("the manager creates the ClusterManagementAddOn; each ManagedClusterAddOn gets its registration, OCM's conditions kept", async () => {
    manager = startManager("manager-e2e");
    await manager.waitForLog("controllers started", 60_000);
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
    await hub.create(Resources.managedProxyConfiguration, mpcBody());
    for (const c of CLUSTERS) await hub.create(Resources.managedClusterAddOn, mcaBody(c));
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
      assert.deepEqual(eku, ["1.3.6.1.5.5.7.3.2"], "clientAuth only");
    }
    const csrs = (
      await hub.list(Resources.certificateSigningRequest, {
        labelSelector: "open-cluster-management.io/addon-name=cluster-proxy",
      })
    ).items as Csr[];
    for (const c of CLUSTERS) {
      const mine = csrs.filter((x) => x.spec.username.startsWith(`system:open-cluster-management:${c}:`));
      assert.ok(mine.some((x) => x.status?.conditions?.some((k) => k.type === "Approved") && x.status.certificate));
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
        "ManifestApplied and Available",
        (m) => cond(m, "ManifestApplied")?.status === "True" && cond(m, "Available")?.status === "True",
        240_000,
      );
      assert.equal(cond(mca, "Available")?.reason, "ProxyAgentConnected");
      const dep = await spoke[c]!.get<Deployment>(Resources.deployment, "cluster-proxy-proxy-agent", AGENT_NS);
      const args = dep.spec.template.spec.containers[0]!.args;
      assert.ok(args.includes(`--cluster-name=${c}`), args.join(" "));
      assert.ok(
        args.some((a) => /^--proxy-server-host=10\.200\.30\.\d+$/.test(a)),
        args.join(" "),
      );
    }
    // The client side: the proxy-client certificate, the serving CA, the proxy-server pod's client door.
    const files = join(dir, "client");
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
    const podIp = pods.find((p) => p.status?.podIP && !p.metadata.deletionTimestamp)?.status?.podIP;
    assert.ok(podIp, "a proxy-server pod with an address");
    for (const c of CLUSTERS) {
      const mc = await hub.get<KubeObject & { spec: { managedClusterClientConfigs: { caBundle: string }[] } }>(
        Resources.managedCluster,
        c,
      );
      const caFile = join(files, `${c}-ca.crt`);
      writeFileSync(caFile, Buffer.from(mc.spec.managedClusterClientConfigs[0]!.caBundle, "base64"));
      let last: unknown;
      const result = await waitFor(
        `a hub client to list ${c}'s namespaces through the tunnel`,
        90_000,
        () => {
          const out = env.exec(
            "lab",
            process.execPath,
            [
              "--conditions=source",
              "--import",
              "tsx",
              join(repoRoot, "test", "addon-manager", "cluster-probe.ts"),
              `${podIp}:8090`,
              `proxy-entrypoint.${SERVER_NS}.svc`,
              files,
              c,
              caFile,
              env.kubeconfigPath(c),
            ],
            { timeoutMs: 60_000, allowFail: true },
          ).stdout;
          last = out;
          const r = JSON.parse(out.trim().split("\n").at(-1) || "{}") as { ok?: boolean; namespaces?: string[] };
          return r.ok ? r : undefined;
        },
        2000,
      ).catch((err: Error) => {
        throw new Error(`${err.message}\nlast probe: ${String(last)}`, { cause: err });
      });
      assert.ok(result.namespaces?.includes(AGENT_NS), `${c}'s own namespaces: ${result.namespaces?.join(", ")}`);
    }
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
});
