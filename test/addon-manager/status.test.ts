// The hub status of the addon end to end in the multi-cluster test environment (OCM installed as
// agents.test.ts and operations.test.ts do it, the manager in the hub's network namespace):
// - agents pointed at an entrypoint that does not resolve: within 30 s the ManagedClusterAddOn's
//   Available message on the hub carries the agent's own error (`getaddrinfo ENOTFOUND ...`), which
//   the agent wrote into its Deployment's status with its one right, and OCM's work agent fed back;
// - scaling the proxy-servers 1 -> 3 -> 1 through the ManagedProxyConfiguration, as an operator
//   would, while the ManagedClusterAddOn is sampled: Available never leaves True, the message
//   never claims more proxy-servers reached than there are, and it ends with all three, then one
//   again. Partial coverage ("1 of 3") shows only when the manager probes between a new replica's
//   readiness and the agents' tunnels to it: recorded when seen, not required (a quick rollout
//   goes from "1 of 1" to "3 of 3" between two probes).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { TunnelHealthReason, parseTunnelHealth, type Condition } from "@cluster-proxy/api";
import { KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "@cluster-proxy/addon-manager";
import { nsOf } from "../infra/env/config.js";
import { waitFor } from "../infra/env/exec.js";
import { type TestEnv, startTestEnv } from "../infra/env/fixture.js";
import { deleteAddonCsrs, installCrd, mpcBody } from "../infra/addon/hub-setup.js";
import { ManagerProcess } from "../infra/addon/manager-process.js";

const MANAGER_NS = "cluster-proxy-addon-status";
const SERVER_NS = "cluster-proxy-status";
const AGENT_NS = "open-cluster-management-cluster-proxy";
const AGENT_DEPLOYMENT = "cluster-proxy-proxy-agent";
const AGENT_CERT_SECRET = "cluster-proxy-open-cluster-management.io-proxy-agent-signer-client-cert";
const NAME = "cluster-proxy";
const UNRESOLVABLE = "proxy-entrypoint.unresolvable.invalid";

type Mca = KubeObject & { status?: { conditions?: Condition[] } };
interface Sample {
  at: number;
  status?: string;
  reason?: string;
  message?: string;
}

describe(
  "hub status: stable while the proxy-servers scale, and says why agents cannot connect",
  { timeout: 30 * 60_000 },
  () => {
    let env: TestEnv;
    let hub: KubeApi;
    let mc1: KubeApi;
    let manager: ManagerProcess | undefined;

    const available = async (): Promise<Condition | undefined> =>
      (await hub.tryGet<Mca>(Resources.managedClusterAddOn, NAME, "mc1"))?.status?.conditions?.find(
        (c) => c.type === "Available",
      );
    const withManagerLog = (err: Error): never => {
      throw new Error(`${err.message}\n--- manager\n${manager?.tail(20) ?? ""}`, { cause: err });
    };

    before(
      async () => {
        env = await startTestEnv();
        hub = new KubeApi(env.kubeConfig("hub"));
        mc1 = new KubeApi(env.kubeConfig("mc1"));
        await installCrd(hub);
        await hub.apply(Resources.namespace, { metadata: { name: MANAGER_NS } });
        await deleteAddonCsrs(hub);
        manager = new ManagerProcess(
          "manager-status",
          env.kubeconfigPath("hub"),
          MANAGER_NS,
          ["--leader-elect=false"],
          nsOf("hub"),
        );
        await manager.waitForLog("controllers started", 60_000);
      },
      { timeout: 10 * 60_000 },
    );

    after(async () => {
      await hub?.delete(Resources.managedClusterAddOn, NAME, "mc1").catch(() => undefined);
      await hub?.delete(Resources.managedProxyConfiguration, NAME).catch(() => undefined);
      await manager?.stop();
      await hub?.delete(Resources.clusterManagementAddOn, NAME).catch(() => undefined);
      if (hub) await deleteAddonCsrs(hub).catch(() => undefined);
      await hub?.delete(Resources.namespace, MANAGER_NS).catch(() => undefined);
      await env?.close();
    });

    test("agents that cannot resolve the entrypoint: the hub says so in the agent's own words within 30 s", async (t) => {
      // An operator's typo in the entrypoint: the agents dial a name that does not exist.
      await hub.apply(
        Resources.managedProxyConfiguration,
        mpcBody({
          name: NAME,
          namespace: SERVER_NS,
          entrypoint: { type: "Hostname", hostname: { value: UNRESOLVABLE } },
          agentReplicas: 1,
          authentication: { signer: { type: "SelfSigned" } },
        }),
      );
      await hub.apply(Resources.managedClusterAddOn, {
        apiVersion: Resources.managedClusterAddOn.apiVersion,
        kind: Resources.managedClusterAddOn.kind,
        metadata: { name: NAME, namespace: "mc1" },
        spec: {},
      });
      // The clock starts when the agent can run in mc1: OCM's work agent applied its Deployment and
      // OCM's registration agent wrote the certificate our manager signed.
      await waitFor(
        "the agent Deployment and its certificate in mc1",
        300_000,
        async () =>
          (await mc1.tryGet(Resources.deployment, AGENT_DEPLOYMENT, AGENT_NS)) &&
          (await mc1.tryGet(Resources.secret, AGENT_CERT_SECRET, AGENT_NS)),
        250,
      ).catch(withManagerLog);
      const since = Date.now();
      const told = await waitFor(
        "the agent's own error in mc1's Available message",
        90_000,
        async () => {
          const c = await available();
          return c?.message?.includes("ENOTFOUND") ? c : undefined;
        },
        250,
      ).catch(withManagerLog);
      const elapsed = Date.now() - since;
      t.diagnostic(`Available after ${elapsed} ms: ${told.status} ${told.reason}: ${told.message}`);
      assert.ok(elapsed <= 30_000, `the hub said why ${elapsed} ms after the agent could start (limit 30 s)`);
      assert.equal(told.status, "False");
      // The proxy-server may still be starting (NoProxyServer) or have no agent (ProxyAgentUnavailable).
      const falseReasons: string[] = [TunnelHealthReason.unavailable, TunnelHealthReason.noServer];
      assert.ok(falseReasons.includes(told.reason ?? ""), String(told.reason));
      assert.match(
        told.message ?? "",
        new RegExp(
          `agents report: ${AGENT_DEPLOYMENT}-[a-z0-9]+-[a-z0-9]+: connected to 0 of 1 proxy-server; last error: cannot connect to ${UNRESOLVABLE.replace(/\./g, "\\.")}:8091: getaddrinfo ENOTFOUND ${UNRESOLVABLE.replace(/\./g, "\\.")}`,
        ),
      );
      // The agent's one right in its cluster: patch its own Deployment's status, nothing more.
      const sa = `system:serviceaccount:${AGENT_NS}:cluster-proxy`;
      const can = (...args: string[]): string =>
        env.kubectl("mc1", ["auth", "can-i", ...args, "-n", AGENT_NS, `--as=${sa}`], { allowFail: true }).stdout.trim();
      assert.equal(can("patch", `deployments/${AGENT_DEPLOYMENT}`, "--subresource=status"), "yes");
      assert.equal(can("patch", "deployments/other", "--subresource=status"), "no");
      assert.equal(can("update", `deployments/${AGENT_DEPLOYMENT}`), "no");
      assert.equal(can("get", "secrets"), "no");

      // The operator fixes the entrypoint: the agents connect and Available turns True.
      await hub.mergePatch(Resources.managedProxyConfiguration, NAME, undefined, {
        spec: { proxyServer: { entrypoint: { type: "LoadBalancerService", hostname: null, loadBalancerService: {} } } },
      });
      const up = await waitFor(
        "mc1 Available once the entrypoint is fixed",
        300_000,
        async () => {
          const c = await available();
          return c?.status === "True" && parseTunnelHealth(c.message)?.reachable === 1 ? c : undefined;
        },
        500,
      ).catch(withManagerLog);
      assert.doesNotMatch(up.message ?? "", /agents report/);
    });

    test("scaling the proxy-servers 1 -> 3 -> 1: Available never leaves True, through all three, then one", async (t) => {
      const first = await waitFor(
        "mc1 Available through its one proxy-server",
        300_000,
        async () => {
          const c = await available();
          const h = parseTunnelHealth(c?.message);
          return c?.status === "True" && h?.reachable === 1 && h.servers === 1 ? c : undefined;
        },
        500,
      ).catch(withManagerLog);
      t.diagnostic(`before: ${first.message}`);
      const samples: Sample[] = [];
      let sampling = true;
      const started = Date.now();
      // Bounded: stops when the test does, or after 15 minutes.
      const sampler = (async () => {
        while (sampling && Date.now() - started < 15 * 60_000) {
          const c = await available().catch(() => undefined);
          if (c) samples.push({ at: Date.now() - started, status: c.status, reason: c.reason, message: c.message });
          await new Promise((r) => setTimeout(r, 250));
        }
      })();
      const scaleTo = (replicas: number): Promise<KubeObject> =>
        hub.mergePatch(Resources.managedProxyConfiguration, NAME, undefined, { spec: { proxyServer: { replicas } } });
      const reached = (servers: number): Promise<unknown> =>
        waitFor(
          `Available through ${servers} of ${servers} proxy-servers`,
          300_000,
          () => {
            const last = samples.at(-1);
            const h = parseTunnelHealth(last?.message);
            return last?.status === "True" && h?.reachable === servers && h.servers === servers;
          },
          250,
        ).catch(withManagerLog);
      try {
        await scaleTo(3);
        await reached(3);
        const atThree = samples.length;
        await scaleTo(1);
        await reached(1);
        // Distinct states, in order, for the record.
        const states = samples
          .map((s) => `${s.status} ${s.reason}: ${s.message}`)
          .filter((s, i, all) => i === 0 || s !== all[i - 1]);
        t.diagnostic(`Available while scaling (${samples.length} samples):\n${states.join("\n")}`);
        const notTrue = samples.filter((s) => s.status !== "True");
        assert.deepEqual(notTrue, [], "Available never leaves True while a proxy-server still has a tunnel");
        const health = samples.map((s) => parseTunnelHealth(s.message));
        for (const h of health) assert.ok(h && h.reachable <= h.servers, JSON.stringify(h));
        const partial = health.slice(0, atThree).filter((h) => h && h.servers > 1 && h.reachable < h.servers);
        t.diagnostic(`samples showing partial coverage on the way to 3: ${partial.length}`);
        assert.ok(health.some((h) => h?.reachable === 3 && h.servers === 3));
        const last = health.at(-1);
        assert.deepEqual(last, { reachable: 1, servers: 1 });
      } finally {
        sampling = false;
        await sampler;
      }
    });
  },
);
