// Entrypoint PortForward end to end (issue 28, docs/design/portforward.md): the managed clusters reach the
// hub only at its kube-apiserver port (the environment's firewall drops everything else from mc1
// and mc2 to the hub), and the agents still connect, through `pods/<pod>:8096/proxy` upgraded to
// the proxy-servers' agent upgrade door, with the hub identity OCM's registration gives them
// (signer kubernetes.io/kube-apiserver-client, approved by our manager, signed by the hub's
// kube-controller-manager). That identity is refused everything outside its grant.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import * as k8s from "@kubernetes/client-node";
import type { Condition } from "@cluster-proxy/api";
import { KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "@cluster-proxy/addon-manager";
import { nsOf, stateDir } from "../infra/env/config.js";
import { waitFor } from "../infra/env/exec.js";
import { type TestEnv, startTestEnv } from "../infra/env/fixture.js";
import {
  agentLogs as sharedAgentLogs,
  availableThroughAll,
  cond,
  deleteAddonCsrs,
  installCrd,
  mpcBody as sharedMpcBody,
  probeClusterFromLab,
  waitForAddon,
  waitForNamespacesGone,
} from "../infra/addon/hub-setup.js";
import { ManagerProcess } from "../infra/addon/manager-process.js";

const MANAGER_NS = "open-cluster-management-addon";
const SERVER_NS = "open-cluster-management-cluster-proxy";
const AGENT_NS = "open-cluster-management-cluster-proxy";
const NAME = "cluster-proxy";
const CLUSTERS = ["mc1", "mc2"] as const;
const HUB_SIGNER = "kubernetes.io/kube-apiserver-client";
const TUNNEL_ROLE = "open-cluster-management:cluster-proxy:agent-tunnel";

interface Mca extends KubeObject {
  status?: {
    conditions?: Condition[];
    registrations?: { signerName: string; subject: { user: string; groups: string[] } }[];
  };
}
interface Secret extends KubeObject {
  data?: Record<string, string>;
}
interface Pod extends KubeObject {
  status?: { podIP?: string; conditions?: { type: string; status: string }[] };
}

const pem = (s: Secret | undefined, key: string): string => Buffer.from(s?.data?.[key] ?? "", "base64").toString();

/** Agent replicas per cluster: "every agent" reaches every proxy-server, not just one of them. */
const AGENTS = 2;

const mpcBody = (replicas: number): KubeObject =>
  sharedMpcBody({ name: NAME, entrypoint: { type: "PortForward" }, serverReplicas: replicas, agentReplicas: AGENTS });

interface LogEvent {
  time: number;
  msg: string;
  serverID?: string;
  pod?: string;
}

describe(
  "entrypoint PortForward: agents reach the proxy-servers through the hub kube-apiserver only",
  { timeout: 30 * 60_000 },
  () => {
    let env: TestEnv;
    let hub: KubeApi;
    const spoke: Partial<Record<(typeof CLUSTERS)[number], KubeApi>> = {};
    let dir: string;
    let manager: ManagerProcess | undefined;
    let replicas = 1;

    const agentLogs = (cluster: string): string => sharedAgentLogs(cluster, AGENT_NS, 12);
    const waitMca = (cluster: string, what: string, ok: (m: Mca) => boolean, timeoutMs = 240_000): Promise<Mca> =>
      waitForAddon<Mca>(hub, NAME, cluster, what, ok, {
        timeoutMs,
        everyMs: 500,
        diagnose: () => `--- manager\n${manager?.tail(20) ?? ""}\n${agentLogs(cluster)}`,
      });
    const serverPods = async (): Promise<Pod[]> =>
      ((await hub.list(Resources.pod, { namespace: SERVER_NS })).items as Pod[]).filter(
        (p) =>
          !p.metadata.deletionTimestamp && p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"),
      );
    /** The agents' own account of their tunnels: each running agent pod's log, in order. */
    const agentEvents = async (cluster: (typeof CLUSTERS)[number]): Promise<Map<string, LogEvent[]>> => {
      const pods = (await spoke[cluster]!.list(Resources.pod, { namespace: AGENT_NS })).items as Pod[];
      const out = new Map<string, LogEvent[]>();
      for (const p of pods.filter((p) => !p.metadata.deletionTimestamp)) {
        let text: string;
        try {
          text = readFileSync(
            join(stateDir, "data", cluster, "kubelet", `${AGENT_NS}_${p.metadata.name}`, "proxy-agent.log"),
            "utf8",
          );
        } catch {
          continue;
        }
        const events: LogEvent[] = [];
        for (const line of text.split("\n")) {
          try {
            events.push(JSON.parse(line) as LogEvent);
          } catch {
            /* not a log record */
          }
        }
        out.set(p.metadata.name, events);
      }
      return out;
    };
    /** The proxy-server pods each agent of `cluster` holds a tunnel to now (from its log). */
    const heldByAgent = async (cluster: (typeof CLUSTERS)[number]): Promise<Map<string, string[]>> => {
      const out = new Map<string, string[]>();
      for (const [agent, events] of await agentEvents(cluster)) {
        const held = new Map<string, string>();
        for (const e of events) {
          if (e.msg === "connected to proxy server" && e.serverID && e.pod) held.set(e.serverID, e.pod);
          else if (e.msg === "disconnected from proxy server" && e.serverID) held.delete(e.serverID);
        }
        out.set(agent, [...held.values()].sort());
      }
      return out;
    };
    /** Waits until the Deployment runs `n` ready replicas of its current template and every agent of both clusters holds a tunnel to each. */
    const waitEveryAgentOnEveryReplica = async (n: number): Promise<string[]> => {
      let last = "";
      return waitFor(
        `${n} ready proxy-servers, every agent of mc1 and mc2 connected to each`,
        300_000,
        async () => {
          const dep = await hub.get<KubeObject & { spec: { replicas: number }; status?: Record<string, number> }>(
            Resources.deployment,
            NAME,
            SERVER_NS,
          );
          const s = dep.status ?? {};
          const ready = (await serverPods()).map((p) => p.metadata.name).sort();
          last = `deployment ${JSON.stringify(s)}; ready ${ready.join(",")}`;
          if (
            s.observedGeneration !== dep.metadata.generation ||
            s.updatedReplicas !== n ||
            s.readyReplicas !== n ||
            s.replicas !== n ||
            ready.length !== n
          )
            return undefined;
          for (const c of CLUSTERS) {
            const held = await heldByAgent(c);
            last += `; ${c} ${JSON.stringify(Object.fromEntries(held))}`;
            if (held.size !== AGENTS || [...held.values()].some((pods) => pods.join(",") !== ready.join(",")))
              return undefined;
          }
          return ready;
        },
        1000,
      ).catch((err: Error) => {
        throw new Error(`${err.message}\nlast: ${last}\n${agentLogs("mc1")}`, { cause: err });
      });
    };

    before(
      async () => {
        env = await startTestEnv();
        hub = new KubeApi(env.kubeConfig("hub"));
        for (const c of CLUSTERS) spoke[c] = new KubeApi(env.kubeConfig(c));
        dir = mkdtempSync(join(tmpdir(), "cp-portforward-e2e-"));
        // Left by an earlier suite (helm uninstall keeps the release namespace): gone before we start.
        for (const ns of [MANAGER_NS, SERVER_NS]) await hub.delete(Resources.namespace, ns);
        await waitForNamespacesGone(hub, [MANAGER_NS, SERVER_NS]);
        await deleteAddonCsrs(hub);
        // The managed clusters reach the hub only at its kube-apiserver from now on.
        for (const c of CLUSTERS) env.hubApiserverOnly(c, true);
        await installCrd(hub);
        await hub.apply(Resources.namespace, { metadata: { name: MANAGER_NS } });
        await hub.apply(Resources.managedProxyConfiguration, mpcBody(replicas));
        // In the hub's network namespace, as a manager pod would be (it probes the replicas' doors).
        manager = new ManagerProcess(
          "manager-portforward",
          env.kubeconfigPath("hub"),
          MANAGER_NS,
          ["--leader-elect=false"],
          nsOf("hub"),
        );
        await manager.waitForLog("controllers started", 60_000);
        for (const c of CLUSTERS)
          await hub.apply(Resources.managedClusterAddOn, {
            metadata: { name: NAME, namespace: c },
            spec: {},
          });
      },
      { timeout: 90 * 60_000 },
    );

    after(async () => {
      await manager?.stop();
      for (const c of CLUSTERS) await hub?.delete(Resources.managedClusterAddOn, NAME, c).catch(() => undefined);
      await hub?.delete(Resources.clusterManagementAddOn, NAME).catch(() => undefined);
      if (hub) await deleteAddonCsrs(hub).catch(() => undefined);
      await hub?.delete(Resources.managedProxyConfiguration, NAME).catch(() => undefined);
      await hub?.delete(Resources.clusterRole, TUNNEL_ROLE).catch(() => undefined);
      for (const ns of [MANAGER_NS, SERVER_NS]) await hub?.delete(Resources.namespace, ns).catch(() => undefined);
      for (const c of CLUSTERS) env?.hubApiserverOnly(c, false);
      if (dir) rmSync(dir, { recursive: true, force: true });
      await env?.close();
    });

    test("the firewall: mc1 and mc2 reach the hub's kube-apiserver, not the proxy-servers", async () => {
      const pods = await waitFor("a ready proxy-server pod", 180_000, async () => (await serverPods())[0], 1000);
      const reach = (c: string, host: string, port: number): string =>
        env
          .exec(
            c as "mc1",
            "bash",
            ["-c", `timeout 3 bash -c '</dev/tcp/${host}/${port}' && echo open || echo closed`],
            {
              allowFail: true,
            },
          )
          .stdout.trim();
      for (const c of CLUSTERS) {
        assert.equal(reach(c, "10.200.0.1", 6443), "open", `${c} -> hub kube-apiserver`);
        assert.equal(reach(c, pods.status!.podIP!, 8091), "closed", `${c} -> a proxy-server's agent port`);
        assert.equal(reach(c, pods.status!.podIP!, 8096), "closed", `${c} -> a proxy-server's upgrade door`);
      }
    });

    test("each addon registers a hub identity for its agent; the proxy-servers' namespace binds it to the tunnel role only", async () => {
      for (const c of CLUSTERS) {
        const mca = await waitMca(c, "two registrations", (m) => (m.status?.registrations?.length ?? 0) === 2);
        const hubReg = mca.status!.registrations!.find((r) => r.signerName === HUB_SIGNER);
        assert.deepEqual(hubReg?.subject, {
          user: `system:open-cluster-management:cluster:${c}:addon:cluster-proxy:agent:proxy-agent`,
          groups: [
            `system:open-cluster-management:cluster:${c}:addon:cluster-proxy`,
            "system:open-cluster-management:addon:cluster-proxy",
          ],
        });
        assert.match(cond(mca, "RegistrationApplied")?.message ?? "", /get pods\/proxy, list\/watch endpointslices/);
      }
      const binding = await hub.get<
        KubeObject & { roleRef: { kind: string; name: string }; subjects: { kind: string; name: string }[] }
      >(Resources.roleBinding, "cluster-proxy-agent-tunnel", SERVER_NS);
      assert.deepEqual(binding.roleRef, {
        apiGroup: "rbac.authorization.k8s.io",
        kind: "ClusterRole",
        name: TUNNEL_ROLE,
      });
      assert.deepEqual(
        binding.subjects.map((s) => `${s.kind}/${s.name}`),
        ["Group/system:open-cluster-management:addon:cluster-proxy"],
      );
      const role = await hub.get<KubeObject & { rules: unknown[] }>(Resources.clusterRole, TUNNEL_ROLE);
      assert.deepEqual(role.rules, [
        { apiGroups: [""], resources: ["pods/proxy"], verbs: ["get"] },
        { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"] },
      ]);
    });

    test("agents in mc1 and mc2 tunnel through the hub kube-apiserver and become Available through every replica; a hub client reaches both kube-apiservers with TLS verified", async () => {
      for (const c of CLUSTERS) {
        const mca = await waitMca(c, `Available through all ${replicas} proxy-servers`, (m) =>
          availableThroughAll(m, replicas),
        );
        assert.equal(cond(mca, "ManifestApplied")?.status, "True");
        const dep = await spoke[c]!.get<
          KubeObject & { spec: { template: { spec: { containers: { args: string[] }[] } } } }
        >(Resources.deployment, "cluster-proxy-proxy-agent", AGENT_NS);
        const args = dep.spec.template.spec.containers[0]!.args;
        for (const want of [
          "--hub-kubeconfig=/etc/hub/kubeconfig",
          `--proxy-server-namespace=${SERVER_NS}`,
          "--proxy-server-service=proxy-entrypoint",
          `--proxy-server-host=proxy-entrypoint.${SERVER_NS}.svc`,
          "--proxy-server-port=8096",
        ])
          assert.ok(args.includes(want), `${want} in ${args.join(" ")}`);
      }
      const mpc = await hub.get<KubeObject & { status?: { entrypoint?: string; conditions?: Condition[] } }>(
        Resources.managedProxyConfiguration,
        NAME,
      );
      assert.equal(cond(mpc, "EntrypointReady")?.reason, "PortForward");
      assert.match(cond(mpc, "EntrypointReady")?.message ?? "", /through the hub kube-apiserver/);
      // A hub client through one replica's client door, TLS to each cluster's apiserver verified.
      const files = join(dir, "client");
      mkdirSync(files, { recursive: true });
      const client = await hub.get<Secret>(Resources.secret, "proxy-client", SERVER_NS);
      writeFileSync(
        join(files, "ca.crt"),
        pem(await hub.get<Secret>(Resources.secret, "proxy-server-ca", SERVER_NS), "ca.crt"),
      );
      writeFileSync(join(files, "tls.crt"), pem(client, "tls.crt"));
      writeFileSync(join(files, "tls.key"), pem(client, "tls.key"), { mode: 0o600 });
      const podIp = (await serverPods())[0]?.status?.podIP ?? "";
      assert.ok(podIp, "a ready proxy-server pod");
      for (const c of CLUSTERS) {
        const mc = await hub.get<KubeObject & { spec: { managedClusterClientConfigs: { caBundle: string }[] } }>(
          Resources.managedCluster,
          c,
        );
        const caFile = join(files, `${c}-ca.crt`);
        writeFileSync(caFile, Buffer.from(mc.spec.managedClusterClientConfigs[0]!.caBundle, "base64"));
        const probe = () =>
          probeClusterFromLab(env, {
            door: `${podIp}:8090`,
            servername: `proxy-entrypoint.${SERVER_NS}.svc`,
            certDir: files,
            cluster: c,
            clusterCaFile: caFile,
          });
        const result = await waitFor(
          `a hub client to list ${c}'s namespaces`,
          90_000,
          () => {
            const r = probe();
            return r.ok ? r : undefined;
          },
          2000,
        ).catch((err: Error) => {
          throw new Error(`${err.message}\nlast probe: ${JSON.stringify(probe())}`, { cause: err });
        });
        assert.ok(result.namespaces?.includes(AGENT_NS), `${c}'s namespaces: ${result.namespaces?.join(", ")}`);
      }
    });

    test("an agent's hub credentials are refused for anything outside its grant", async () => {
      const secret = await spoke.mc1!.get<Secret>(Resources.secret, "cluster-proxy-hub-kubeconfig", AGENT_NS);
      const hubCluster = env.kubeConfig("hub").getCurrentCluster()!;
      const kc = new k8s.KubeConfig();
      kc.loadFromOptions({
        clusters: [
          {
            name: "hub",
            server: hubCluster.server,
            ...(hubCluster.caData ? { caData: hubCluster.caData } : {}),
            ...(hubCluster.caFile ? { caFile: hubCluster.caFile } : {}),
          },
        ],
        users: [{ name: "agent", certData: secret.data!["tls.crt"]!, keyData: secret.data!["tls.key"]! }],
        contexts: [{ name: "agent", cluster: "hub", user: "agent" }],
        currentContext: "agent",
      });
      const options: https.RequestOptions = {};
      await kc.applyToHTTPSOptions(options);
      const server = new URL(hubCluster.server);
      const status = (method: string, path: string, body?: unknown): Promise<number> =>
        new Promise((resolve, reject) => {
          const req = https.request(
            {
              ...options,
              host: server.hostname,
              port: server.port,
              method,
              path,
              headers: { "content-type": "application/json" },
            },
            (res) => {
              res.resume();
              resolve(res.statusCode ?? 0);
            },
          );
          req.once("error", reject);
          req.end(body === undefined ? undefined : JSON.stringify(body));
        });
      const pod = (await serverPods())[0]!.metadata.name;
      // The grant works (the test's credentials are the agent's).
      assert.equal(
        await status(
          "GET",
          `/apis/discovery.k8s.io/v1/namespaces/${SERVER_NS}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dproxy-entrypoint`,
        ),
        200,
      );
      const refused: [string, string, unknown?][] = [
        ["GET", `/api/v1/namespaces/${SERVER_NS}/secrets`],
        ["GET", `/api/v1/namespaces/${SERVER_NS}/secrets/proxy-client`],
        ["GET", `/api/v1/namespaces/${MANAGER_NS}/secrets`],
        ["GET", `/api/v1/namespaces/${SERVER_NS}/pods`],
        ["GET", `/api/v1/namespaces/${SERVER_NS}/pods/${pod}`],
        [
          "POST",
          `/api/v1/namespaces/${SERVER_NS}/pods`,
          { apiVersion: "v1", kind: "Pod", metadata: { name: "x" }, spec: { containers: [{ name: "x", image: "x" }] } },
        ],
        ["POST", `/api/v1/namespaces/${SERVER_NS}/pods/${pod}/exec?command=true&stdout=true`],
        ["GET", `/api/v1/namespaces/${SERVER_NS}/pods/${pod}/exec?command=true&stdout=true`],
        ["POST", `/api/v1/namespaces/${SERVER_NS}/pods/${pod}/portforward?ports=8091`],
        ["GET", `/api/v1/namespaces/${SERVER_NS}/pods/${pod}/log`],
        ["POST", `/api/v1/namespaces/${SERVER_NS}/pods/${pod}:8096/proxy/`],
        ["GET", `/api/v1/namespaces/default/pods/any:80/proxy/`],
        ["GET", `/api/v1/namespaces/${MANAGER_NS}/pods/any:80/proxy/`],
        ["GET", `/api/v1/namespaces/${SERVER_NS}/services/proxy-entrypoint:8090/proxy/`],
        ["GET", `/apis/discovery.k8s.io/v1/namespaces/default/endpointslices`],
        ["GET", `/apis/discovery.k8s.io/v1/endpointslices`],
        ["GET", `/apis/apps/v1/namespaces/${SERVER_NS}/deployments`],
        ["GET", `/api/v1/namespaces/mc1/secrets`],
        ["GET", `/apis/cluster.open-cluster-management.io/v1/managedclusters`],
      ];
      for (const [method, path, body] of refused)
        assert.equal(await status(method, path, body), 403, `${method} ${path}`);
    });

    test("HA: proxy-servers scaled 1 -> 3 -> 2: every agent ends with one tunnel to every ready replica", async () => {
      await waitEveryAgentOnEveryReplica(replicas);
      for (const n of [3, 2]) {
        replicas = n;
        await hub.apply(Resources.managedProxyConfiguration, mpcBody(n));
        const ready = await waitEveryAgentOnEveryReplica(n);
        for (const c of CLUSTERS)
          await waitMca(c, `Available through all ${n} proxy-servers`, (m) => availableThroughAll(m, n));
        console.log(`# ${n} replicas: ${ready.join(", ")}`);
      }
    });

    test("killing one proxy-server pod drops no other tunnel; the agents reach its replacement", async () => {
      const before = await waitEveryAgentOnEveryReplica(replicas);
      const victim = before[0]!;
      const killedAt = Date.now();
      await hub.request("DELETE", `/api/v1/namespaces/${SERVER_NS}/pods/${victim}`, { gracePeriodSeconds: 0 });
      const after = await waitEveryAgentOnEveryReplica(replicas);
      assert.ok(!after.includes(victim), `${victim} is gone: ${after.join(", ")}`);
      for (const c of CLUSTERS) {
        for (const [agent, events] of await agentEvents(c)) {
          // serverID -> pod, from every connection the agent made.
          const podOf = new Map(events.filter((e) => e.serverID && e.pod).map((e) => [e.serverID!, e.pod!]));
          const dropped = events
            .filter((e) => e.msg === "disconnected from proxy server" && e.time >= killedAt)
            .map((e) => podOf.get(e.serverID!) ?? e.serverID);
          assert.deepEqual(dropped, [victim], `${c} ${agent}: tunnels dropped after the kill`);
        }
      }
    });
  },
);
