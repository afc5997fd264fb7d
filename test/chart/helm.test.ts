/**
 * The Helm chart on the test environment's hub (real OCM hub and klusterlets, the process kubelet
 * running the chart's pods: the addon manager with its in-cluster service account, the
 * proxy-servers, and the agents in mc1 and mc2), with the README's install commands:
 * install -> cluster-proxy Available on mc1 and mc2 and a hub client reaches both apiservers (TLS
 * verified) -> upgrade to 3 proxy-servers, every agent connected to each -> uninstall removes the
 * agents from both clusters and keeps the CA Secrets.
 *
 * The entrypoint is `--set proxyServer.entrypointAddress=<address>` (type Hostname): routing that
 * address to the proxy-servers is the operator's part; here a LoadBalancer Service with a fixed
 * address of the hub's pool plays it.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { parseTunnelHealth, type Condition } from "@cluster-proxy/api";
import { KubeApi, Resources, type KubeObject } from "@cluster-proxy/addon-manager";
import { paths } from "../env/config.js";
import { type RunResult, waitFor } from "../env/exec.js";
import { type TestEnv, startTestEnv } from "../env/fixture.js";
import { probeClusterFromLab, type ClusterProbeResult } from "../addon-manager/hub-setup.js";
import { CHART, helmBinary } from "./helm.js";

const NS = "open-cluster-management-addon";
const RELEASE = "cluster-proxy";
const AGENT_NS = "open-cluster-management-cluster-proxy";
const CLUSTERS = ["mc1", "mc2"] as const;
/** A free address of the hub's LoadBalancer pool (docs/test-environment.md): the "hub address". */
const ENTRYPOINT = "10.200.30.50";

interface Pod extends KubeObject {
  status?: { podIP?: string; phase?: string };
}
interface Secret extends KubeObject {
  data?: Record<string, string>;
}

describe("helm install / upgrade / uninstall on the hub", { timeout: 30 * 60_000 }, () => {
  let env: TestEnv;
  let hub: KubeApi;
  let dir = "";

  const helm = (args: string[], allowFail = false): RunResult =>
    env.exec("lab", paths.helm, [...args, "--kubeconfig", env.kubeconfigPath("hub")], {
      timeoutMs: 120_000,
      allowFail,
    });
  const kubectl = (args: string[]): string => env.kubectl("hub", args).stdout;
  const pem = (s: Secret, key: string): string => Buffer.from(s.data?.[key] ?? "", "base64").toString();
  const serverPods = async (): Promise<Pod[]> =>
    (
      (
        await hub.list(Resources.pod, {
          namespace: NS,
          labelSelector: "proxy.open-cluster-management.io/component-name=proxy-server",
        })
      ).items as Pod[]
    ).filter((p) => p.status?.podIP && p.status.phase === "Running" && !p.metadata.deletionTimestamp);
  const availability = (): Record<string, Condition | undefined> => {
    const list = JSON.parse(kubectl(["get", "managedclusteraddon", "-A", "-o", "json"])) as {
      items: (KubeObject & { status?: { conditions?: Condition[] } })[];
    };
    return Object.fromEntries(
      list.items
        .filter((m) => m.metadata.name === RELEASE)
        .map((m) => [m.metadata.namespace!, m.status?.conditions?.find((c) => c.type === "Available")]),
    );
  };
  /** A proxy-server's Prometheus metrics, read from the lab (where hub pod addresses route). */
  const metrics = (podIp: string): string =>
    env.exec("lab", "curl", ["-sf", "--max-time", "5", `http://${podIp}:8092/metrics`], { allowFail: true }).stdout;
  const gauge = (text: string, name: string): number =>
    Number(new RegExp(`^${name.replace(/[{}"=]/g, "\\$&")} (\\S+)$`, "m").exec(text)?.[1] ?? NaN);

  before(
    async () => {
      env = await startTestEnv();
      hub = new KubeApi(env.kubeConfig("hub"));
      dir = mkdtempSync(join(tmpdir(), "cp-helm-e2e-"));
      helmBinary(); // built (or found) before the environment's wrapper uses it
      // A release left by an interrupted run, and the addon's CSRs of earlier runs (OCM's
      // registration agent stops requesting at 10 per cluster).
      helm(["uninstall", "-n", NS, RELEASE, "--wait", "--timeout", "60s"], true);
      const csrs = await hub.list(Resources.certificateSigningRequest, {
        labelSelector: "open-cluster-management.io/addon-name=cluster-proxy",
      });
      for (const c of csrs.items) await hub.delete(Resources.certificateSigningRequest, c.metadata.name);
    },
    { timeout: 90 * 60_000 },
  );
  after(async () => {
    if (env) helm(["uninstall", "-n", NS, RELEASE], true);
    if (dir) rmSync(dir, { recursive: true, force: true });
    await env?.close();
  });

  test("helm install with a mistyped value fails naming it, and installs nothing", () => {
    const r = helm(
      [
        "install",
        "-n",
        NS,
        "--create-namespace",
        RELEASE,
        CHART,
        "--set",
        `proxyServer.entrypointAdress=${ENTRYPOINT}`,
      ],
      true,
    );
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /at '\/proxyServer': additional properties 'entrypointAdress' not allowed/);
    assert.equal(helm(["list", "-n", NS, "-q"]).stdout.trim(), "");
  });

  test("helm install (the README's command line): Available on mc1 and mc2 within two minutes", async () => {
    const t0 = Date.now();
    const r = helm([
      "install",
      "-n",
      NS,
      "--create-namespace",
      RELEASE,
      CHART,
      "--set",
      `proxyServer.entrypointAddress=${ENTRYPOINT}`,
      // One server and one agent per cluster first (a light start on a busy machine); the upgrade below scales.
      "--set",
      "proxyServer.replicas=1",
      "--set",
      "proxyAgent.replicas=1",
    ]);
    assert.match(r.stdout, /STATUS: deployed/);
    assert.match(r.stdout, /kubectl get managedclusteraddon -A/, "NOTES.txt says what to run next");
    // The operator's route from the entrypoint address to the proxy-servers' agent port.
    env.kubectl("hub", ["apply", "-f", "-"], {
      input: JSON.stringify({
        apiVersion: "v1",
        kind: "Service",
        metadata: { name: "agent-entrypoint", namespace: NS },
        spec: {
          type: "LoadBalancer",
          loadBalancerIP: ENTRYPOINT,
          selector: {
            "proxy.open-cluster-management.io/component-name": "proxy-server",
            "proxy.open-cluster-management.io/configuration": "cluster-proxy",
          },
          ports: [{ name: "agent-server", port: 8091, targetPort: 8091 }],
        },
      }),
    });
    let last: Record<string, Condition | undefined> = {};
    await waitFor(
      "cluster-proxy Available on mc1 and mc2",
      120_000 - (Date.now() - t0),
      () => {
        last = availability();
        return CLUSTERS.every((c) => last[c]?.status === "True") || undefined;
      },
      1000,
    ).catch((err: Error) => {
      throw new Error(
        `${err.message}\nlast: ${JSON.stringify(last)}\n${kubectl(["-n", NS, "get", "deploy,pods", "-o", "wide"])}`,
        {
          cause: err,
        },
      );
    });
    const deploys = kubectl(["-n", NS, "get", "deploy", "-o", "jsonpath={.items[*].metadata.name}"]).split(" ");
    assert.deepEqual(deploys.sort(), ["cluster-proxy", "cluster-proxy-addon-manager"]);
    const mpc = JSON.parse(kubectl(["get", "managedproxyconfiguration", "cluster-proxy", "-o", "json"])) as {
      status?: { entrypoint?: string };
    };
    assert.equal(mpc.status?.entrypoint, `${ENTRYPOINT}:8091`);
  });

  test("a hub client reaches both clusters' apiservers through the tunnel (TLS verified)", async () => {
    const certs = join(dir, "client");
    const client = await hub.get<Secret>(Resources.secret, "proxy-client", NS);
    const servingCa = await hub.get<Secret>(Resources.secret, "proxy-server-ca", NS);
    mkdirSync(certs, { recursive: true });
    writeFileSync(join(certs, "ca.crt"), pem(servingCa, "ca.crt"));
    writeFileSync(join(certs, "tls.crt"), pem(client, "tls.crt"));
    writeFileSync(join(certs, "tls.key"), pem(client, "tls.key"), { mode: 0o600 });
    const podIp = (await serverPods())[0]?.status?.podIP;
    assert.ok(podIp, "a running proxy-server pod");
    for (const c of CLUSTERS) {
      const mc = await hub.get<KubeObject & { spec: { managedClusterClientConfigs: { caBundle: string }[] } }>(
        Resources.managedCluster,
        c,
      );
      const caFile = join(dir, `${c}-ca.crt`);
      writeFileSync(caFile, Buffer.from(mc.spec.managedClusterClientConfigs[0]!.caBundle, "base64"));
      const probe = (): ClusterProbeResult =>
        probeClusterFromLab(env, {
          door: `${podIp}:8090`,
          servername: `proxy-entrypoint.${NS}.svc`,
          certDir: certs,
          cluster: c,
          clusterCaFile: caFile,
        });
      let res: ReturnType<typeof probe> = {};
      await waitFor(
        `a hub client to list ${c}'s namespaces`,
        60_000,
        () => ((res = probe()).ok ? true : undefined),
        2000,
      ).catch((err: Error) => {
        throw new Error(`${err.message}\nlast probe: ${JSON.stringify(res)}`, { cause: err });
      });
      assert.ok(res.namespaces?.includes(AGENT_NS), `${c}: ${res.namespaces?.join(", ")}`);
    }
  });

  test("helm upgrade to 3 proxy-servers (and 2 managers): every agent connected to each server", async () => {
    const r = helm([
      "upgrade",
      "-n",
      NS,
      RELEASE,
      CHART,
      "--reuse-values",
      "--set",
      "proxyServer.replicas=3",
      "--set",
      "replicas=2",
    ]);
    assert.match(r.stdout, /has been upgraded/);
    let seen = "";
    await waitFor(
      "3 proxy-servers, each with the agents of mc1 and mc2 (and no others)",
      180_000,
      async () => {
        const pods = await serverPods();
        if (pods.length !== 3) return ((seen = `${pods.length} running proxy-server pods`), undefined);
        // The agents now running in the clusters (one per cluster after the rollout).
        let agents = 0;
        for (const c of CLUSTERS) {
          const list = (await new KubeApi(env.kubeConfig(c)).list(Resources.pod, { namespace: AGENT_NS }))
            .items as Pod[];
          agents += list.filter((p) => p.status?.phase === "Running" && !p.metadata.deletionTimestamp).length;
        }
        const per = pods.map((p) => {
          const m = metrics(p.status!.podIP!);
          return {
            ip: p.status!.podIP!,
            connections: gauge(m, "konnectivity_network_proxy_server_ready_backend_connections"),
            mc1: gauge(m, 'cluster_proxy_server_backends{identifier="mc1"}'),
            mc2: gauge(m, 'cluster_proxy_server_backends{identifier="mc2"}'),
          };
        });
        seen = JSON.stringify({ agents, per });
        return agents === 2 && per.every((s) => s.connections === agents && s.mc1 >= 1 && s.mc2 >= 1)
          ? true
          : undefined;
      },
      2000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\nlast: ${seen}`, { cause: err });
    });
    // And the manager's probes through each replica say so (within a probe round or two).
    let avail: Record<string, Condition | undefined> = {};
    await waitFor(
      "Available through 3 of 3 proxy-servers on mc1 and mc2",
      60_000,
      () => {
        avail = availability();
        return CLUSTERS.every(
          (c) =>
            avail[c]?.status === "True" &&
            parseTunnelHealth(avail[c]?.message)?.reachable === 3 &&
            parseTunnelHealth(avail[c]?.message)?.servers === 3,
        );
      },
      1000,
    ).catch((err: Error) => {
      throw new Error(
        `${err.message}
last: ${JSON.stringify(avail)}`,
        { cause: err },
      );
    });
    // Two addon managers, both ready (the standby too), one of them holding the Lease.
    const managers = await waitFor(
      "2 ready addon managers",
      120_000,
      async () => {
        const d = await hub.get<KubeObject & { status?: { readyReplicas?: number } }>(
          Resources.deployment,
          "cluster-proxy-addon-manager",
          NS,
        );
        if (d.status?.readyReplicas !== 2) return undefined;
        const pods = (
          await hub.list(Resources.pod, { namespace: NS, labelSelector: "app.kubernetes.io/component=addon-manager" })
        ).items as Pod[];
        return pods.filter((p) => !p.metadata.deletionTimestamp).map((p) => p.metadata.name);
      },
      1000,
    );
    const lease = await hub.get<KubeObject & { spec?: { holderIdentity?: string } }>(
      Resources.lease,
      "cluster-proxy-addon-manager",
      NS,
    );
    assert.ok(
      managers.includes(lease.spec?.holderIdentity ?? ""),
      `${lease.spec?.holderIdentity} in ${managers.join(", ")}`,
    );
  });

  test("helm uninstall removes the agents from mc1 and mc2 and keeps the CA Secrets", async () => {
    const r = helm(["uninstall", "-n", NS, RELEASE]);
    assert.match(r.stdout, /uninstalled/);
    await waitFor(
      "no proxy-agent Deployment left in mc1 and mc2",
      180_000,
      async () => {
        for (const c of CLUSTERS) {
          const left = await new KubeApi(env.kubeConfig(c)).list(Resources.deployment, { namespace: AGENT_NS });
          if (left.items.length > 0) return undefined;
        }
        return true;
      },
      1000,
    );
    assert.equal(kubectl(["get", "managedclusteraddon", "-A", "-o", "name"]).trim(), "");
    for (const name of ["cluster-proxy-signer", "cluster-proxy-signer-client", "cluster-proxy-signer-agent"]) {
      assert.ok(await hub.tryGet(Resources.secret, name, NS), `CA Secret ${name} is kept`);
    }
  });
});
