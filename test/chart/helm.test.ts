/**
 * The Helm chart on the test environment's hub (real OCM hub and klusterlets, the process kubelet
 * running the chart's pods: the addon manager with its in-cluster service account, the
 * proxy-servers, and the agents in mc1 and mc2), driven by the commands the documentation gives
 * an operator, run as written (test/infra/addon/readme-install.ts): the README's chart install
 * -> cluster-proxy Available on mc1 and mc2, every command the chart's notes print, a hub client
 * reaching both apiservers (TLS verified) -> the install guide's client doors and `cluster-proxy
 * health` from outside the hub -> the chart README's "take one cluster out" -> upgrade to 2 managers, every
 * agent connected to each of the 3 proxy-servers -> the chart README's own Placement (no cluster
 * loses its agent) -> uninstall removes the agents from both clusters and keeps the CA Secrets.
 * The test creates nothing an operator is not told to create.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { parseTunnelHealth, type Condition } from "@cluster-proxy/api";
import { KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "@cluster-proxy/addon-manager";
import { paths } from "../infra/env/config.js";
import { type RunResult, waitFor } from "../infra/env/exec.js";
import { type TestEnv, startTestEnv } from "../infra/env/fixture.js";
import { probeClusterFromLab, type ClusterProbeResult } from "../infra/addon/hub-setup.js";
import { docBlock, notesCommands, operatorPath, runAsOperator } from "../infra/addon/readme-install.js";
import { PLACEMENT } from "../infra/addon/ocm-resources.js";
import {
  AGENT_NAMESPACE as AGENT_NS,
  CHART,
  RELEASE,
  RELEASE_NAMESPACE as NS,
  addonAvailability,
  helmBinary,
  removeLeftRelease,
} from "../infra/chart.js";

const CLUSTERS = ["mc1", "mc2"] as const;
/** An address the entrypoint of a mistyped install would have named (nothing is installed). */
const ENTRYPOINT = "10.200.30.50";
/** What the README's client doors block and the chart README's own Placement create. */
const OPERATOR_OBJECTS = { service: "cluster-proxy-client-doors", placement: "cluster-proxy-fleet" };

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
  let path = "";

  /** An operator's commands (from the docs, as written) in the lab; fails the test with their trace. */
  const operator = async (what: string, script: string, timeoutMs = 600_000, cwd?: string): Promise<string> => {
    const r = await runAsOperator(env, path, script, timeoutMs, cwd ? { cwd } : {});
    assert.equal(r.status, 0, `${what} failed:\n${script}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
    console.log(`# ${what}\n# ${r.stdout.trim().split("\n").join("\n# ")}`);
    return r.stdout;
  };
  /** The commands the release's notes print, as helm renders them now, from a scratch directory (they may write files). */
  const runNotes = async (): Promise<void> => {
    const notes = helm(["get", "notes", "-n", NS, RELEASE]).stdout;
    const commands = notesCommands(notes);
    assert.ok(commands.length >= 3, notes);
    for (const c of commands) await operator(`NOTES.txt: ${c}`, c, 120_000, dir);
  };

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
  const availability = (): Record<string, Condition | undefined> => addonAvailability(env);
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
      path = operatorPath(env, dir);
      helmBinary(); // built (or found) before the environment's wrapper uses it
      await removeLeftRelease(env, hub);
      // As the issue's operator has it: the managed clusters reach the hub only at its kube-apiserver.
      for (const c of CLUSTERS) env.hubApiserverOnly(c, true);
    },
    { timeout: 90 * 60_000 },
  );
  after(async () => {
    if (env) helm(["uninstall", "-n", NS, RELEASE], true);
    await hub?.delete(Resources.service, OPERATOR_OBJECTS.service, NS).catch(() => undefined);
    await hub?.delete(PLACEMENT, OPERATOR_OBJECTS.placement, NS).catch(() => undefined);
    if (env)
      env.kubectl("hub", ["label", "managedcluster", "mc2", "proxy.open-cluster-management.io/install-"], {
        allowFail: true,
      });
    for (const c of CLUSTERS) env?.hubApiserverOnly(c, false);
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

  test("the README's bare chart install, as written, with mc1 and mc2 reaching the hub only at its kube-apiserver: entrypoint PortForward, Available on both", async () => {
    assert.match(
      docBlock("install-chart"),
      /^helm install -n open-cluster-management-addon --create-namespace cluster-proxy charts\/cluster-proxy\n/,
      "the README leads with the bare install (no entrypoint value)",
    );
    const out = await operator("README install-chart", docBlock("install-chart"));
    assert.match(out, /STATUS: deployed/);
    assert.match(out, /kubectl get managedclusteraddon -A/, "NOTES.txt says what to run next");
    // The CA EXPIRY column shows the date, not the age of a time in the future ("<invalid>").
    const columns = out.split("\n").find((l) => /^cluster-proxy\s/.test(l) && /\.svc:8096/.test(l)) ?? "";
    assert.match(columns, /\s\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s/, out);
    assert.doesNotMatch(columns, /<invalid>/);
    const t0 = Date.now();
    let last: Record<string, Condition | undefined> = {};
    await waitFor(
      "cluster-proxy Available on mc1 and mc2",
      300_000 - (Date.now() - t0),
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
    assert.deepEqual(deploys.sort(), ["cluster-proxy", "cluster-proxy-addon-manager", "cluster-proxy-addon-user"]);
    const mpc = JSON.parse(kubectl(["get", "managedproxyconfiguration", "cluster-proxy", "-o", "json"])) as {
      status?: { entrypoint?: string };
    };
    assert.equal(
      mpc.status?.entrypoint,
      `proxy-entrypoint.${NS}.svc:8096`,
      "entrypoint PortForward: the agent upgrade door",
    );
    assert.match(
      out,
      /Entrypoint PortForward .* through this hub's kube-apiserver/s,
      "NOTES.txt says which entrypoint and its cost",
    );
    assert.match(
      out,
      /one\s+long-lived kube-apiserver connection per agent and proxy-server/,
      "NOTES.txt says its cost",
    );
  });

  test("every command the chart's notes print runs as printed; with other values they print none with a <placeholder>", async () => {
    await runNotes();
    for (const set of [
      ["--set", "proxyServer.entrypointLoadBalancer=false"],
      ["--set", "proxyServer.entrypointAddress=proxy.example.com"],
      ["--set", "installByPlacement.placementName=prod", "--set", "installByPlacement.placementNamespace=fleet"],
      ["--set", "gateway.service.type=LoadBalancer"],
      ["--set", "gateway.service.type=NodePort", "--set", "gateway.aggregatedApi.enabled=false"],
    ]) {
      // helm renders notes only against a cluster (a dry run of this release), never in `helm template`.
      const r = helm(["upgrade", "--dry-run=client", "-n", NS, RELEASE, CHART, "--reuse-values", ...set]);
      const notes = r.stdout.slice(r.stdout.indexOf("NOTES:"));
      assert.ok(notesCommands(notes).length >= 2, `${set.join(" ")}:\n${notes}`);
    }
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

  test("the README's client doors: cluster-proxy health from outside the hub, every cluster healthy", async () => {
    const out = await operator("install guide operations-chart", docBlock("operations-chart"), 900_000);
    for (const c of CLUSTERS) assert.match(out, new RegExp(`^${c}\\s+True\\s+True\\s+True\\s`, "m"), out);
  });

  test("the chart README's take-one-cluster-out: mc2 loses its agent, health lists it not installed and passes", async () => {
    const mca = await hub.get(Resources.managedClusterAddOn, RELEASE, "mc2");
    const out = await operator("chart README take-one-out", docBlock("take-one-out"));
    assert.match(out, /^mc2\s+False\s/m, out);
    assert.match(out, /^mc1\s+True\s+True\s+True\s/m, out);
    // And back in: a new ManagedClusterAddOn, Available again.
    const back = await hub.get(Resources.managedClusterAddOn, RELEASE, "mc2");
    assert.notEqual(back.metadata.uid, mca.metadata.uid);
    await waitFor("mc2 Available again", 300_000, () => availability().mc2?.status === "True" || undefined, 1000);
  });

  test("helm upgrade to 2 managers: every agent connected to each of the 3 proxy-servers", async () => {
    const r = helm(["upgrade", "-n", NS, RELEASE, CHART, "--reuse-values", "--set", "replicas=2"]);
    assert.match(r.stdout, /has been upgraded/);
    let seen = "";
    await waitFor(
      "3 proxy-servers, each with the agents of mc1 and mc2 (and no others)",
      180_000,
      async () => {
        const pods = await serverPods();
        if (pods.length !== 3) return ((seen = `${pods.length} running proxy-server pods`), undefined);
        // The agents now running in the clusters (the chart's default, 3 per cluster).
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
        return agents === 3 * CLUSTERS.length && per.every((s) => s.connections === agents && s.mc1 >= 1 && s.mc2 >= 1)
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

  test("the chart README's own Placement: no cluster loses its agent, and the notes' commands run", async () => {
    const before = Object.fromEntries(
      await Promise.all(
        CLUSTERS.map(async (c) => [c, (await hub.get(Resources.managedClusterAddOn, RELEASE, c)).metadata.uid]),
      ),
    ) as Record<string, string | undefined>;
    await operator("chart README own-placement", docBlock("own-placement"));
    const cma = await hub.get<KubeObject & { spec: { installStrategy: { placements: { name: string }[] } } }>(
      Resources.clusterManagementAddOn,
      RELEASE,
    );
    assert.deepEqual(
      cma.spec.installStrategy.placements.map((p) => p.name),
      [OPERATOR_OBJECTS.placement],
    );
    // The new Placement decides for both clusters (it selects from the global set the chart keeps
    // bound), and then for a while neither ManagedClusterAddOn is removed or replaced.
    await waitFor(
      "the Placement's decisions name mc1 and mc2",
      120_000,
      () => {
        const decisions = kubectl([
          "-n",
          NS,
          "get",
          "placementdecisions",
          "-l",
          `cluster.open-cluster-management.io/placement=${OPERATOR_OBJECTS.placement}`,
          "-o",
          "jsonpath={.items[*].status.decisions[*].clusterName}",
        ]);
        return CLUSTERS.every((c) => decisions.split(" ").includes(c)) || undefined;
      },
      1000,
    );
    const deadline = Date.now() + 30_000;
    const lost: string[] = [];
    await waitFor(
      "30 s of watching the ManagedClusterAddOns",
      60_000,
      async () => {
        for (const c of CLUSTERS) {
          const mca = await hub.tryGet(Resources.managedClusterAddOn, RELEASE, c);
          if (mca?.metadata.uid !== before[c] || mca?.metadata.deletionTimestamp) lost.push(c);
        }
        return lost.length > 0 || Date.now() >= deadline;
      },
      1000,
    );
    assert.deepEqual(lost, [], "a ManagedClusterAddOn was removed or replaced after the switch to the own Placement");
    await runNotes();
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
    for (const name of [
      "cluster-proxy-signer",
      "cluster-proxy-signer-client",
      "cluster-proxy-signer-agent",
      "cluster-proxy-signer-gateway",
    ]) {
      assert.ok(await hub.tryGet(Resources.secret, name, NS), `CA Secret ${name} is kept`);
    }
  });
});
