/**
 * Reinstalls and the agents' certificates (issue "Nothing lost when the hub changes", points 2 and
 * the tests "ten uninstall/install cycles" and "a CSR that cannot be created"), on the test
 * environment with the chart installed and uninstalled as the docs say (the README's
 * `install-chart` block, the chart README's `uninstall-chart` block, both run as written):
 *
 * 1. ten uninstall/install cycles on one hub, every install Available on every cluster; meanwhile
 *    the addon's CSRs per cluster (sampled every second) stay far below OCM's limit of 10, the
 *    registration agent's halt (csr-reconciler.ts: an issued request goes once a newer one of its
 *    cluster and signer exists); each install Available within 60 s, the ten within fifteen minutes;
 * 2. OCM's limit forced on mc1 (ten pending CSRs with mc1's cluster-name and the addon-name label,
 *    of a signer nobody serves, made before the install): within 30 s of the install mc1's
 *    `Available` is False with reason `AgentCertificateNotIssued`, its message and
 *    `cluster-proxy health` name OCM's "too many csr", the count, the limit and the Secret the
 *    agent pods wait for; mc2 is Available meanwhile. Once the CSRs are deleted mc1 recovers
 *    (at OCM's next resync: its registration agent does not look again when CSRs go away).
 *
 * The measured numbers are printed (test diagnostics) for docs/guides/install-hub.md.
 */
import assert from "node:assert/strict";
import { after, before, describe, test, type TestContext } from "node:test";
import { ADDON_NAME, ADDON_NAME_LABEL, TunnelHealthReason, type Condition } from "@cluster-proxy/api";
import { KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "@cluster-proxy/addon-manager";
import { certificateRequest } from "@cluster-proxy/pki/testing";
import { MANAGED } from "../infra/env/config.js";
import { waitFor } from "../infra/env/exec.js";
import { type TestEnv, startTestEnv } from "../infra/env/fixture.js";
import { GuideOperator } from "../infra/addon/guide-operator.js";
import { docBlock, runAsOperator } from "../infra/addon/readme-install.js";
import {
  AGENT_NAMESPACE,
  RELEASE,
  addonAvailability,
  hubHelm,
  readmeInstallAvailable,
  removeLeftRelease,
} from "../infra/chart.js";

const CYCLES = 10;
const INSTALL_AVAILABLE_MS = 60_000;
const CYCLES_TOTAL_MS = 15 * 60_000;
/** OCM v1.2.1's registration agent halts at this many CSRs of a cluster and addon (csr-signer.ts). */
const OCM_LIMIT = 10;
/**
 * At most this many of the addon's CSRs per cluster at any time during the cycles: per signer (two
 * with entrypoint PortForward) the issued one in use, its predecessor until the newer one is issued,
 * and the request of an install in progress. Measured: 4 and 5.
 */
const CSRS_AT_MOST = 6;
const CLUSTER_LABEL = "open-cluster-management.io/cluster-name";
/** The placeholders' signer: nobody approves or signs it, so they stay pending. */
const PLACEHOLDER_SIGNER = "example.com/cluster-proxy-test-placeholder";
const PLACEHOLDER_LABEL = "cluster-proxy.test/placeholder";
const CAUSE_MS = 30_000;
/** OCM v1.2.1's registration agent resyncs each addon's certificate controllers this often. */
const OCM_RESYNC_MS = 5 * 60_000;

describe("reinstalls, and OCM's limit of certificate requests", { timeout: 60 * 60_000 }, () => {
  let env: TestEnv;
  let hub: KubeApi;
  let op: GuideOperator;
  const measured: string[] = [];

  /** The addon's CSRs on the hub, by cluster. */
  const csrsByCluster = async (): Promise<Record<string, KubeObject[]>> => {
    const list = await hub.list(Resources.certificateSigningRequest, {
      labelSelector: `${ADDON_NAME_LABEL}=${ADDON_NAME}`,
    });
    const by: Record<string, KubeObject[]> = {};
    for (const c of list.items) (by[c.metadata.labels?.[CLUSTER_LABEL] ?? "-"] ??= []).push(c);
    return by;
  };

  const deletePlaceholders = async (): Promise<void> => {
    const list = await hub.list(Resources.certificateSigningRequest, { labelSelector: PLACEHOLDER_LABEL });
    for (const c of list.items) await hub.delete(Resources.certificateSigningRequest, c.metadata.name);
  };

  /** The chart README's uninstall, then until no ManagedClusterAddOn of the addon is left. */
  const uninstall = async (): Promise<void> => {
    await op.run("the chart README's uninstall-chart", docBlock("uninstall-chart"));
    await waitFor(
      "no ManagedClusterAddOn cluster-proxy left",
      180_000,
      () => Object.keys(addonAvailability(env)).length === 0,
      500,
    );
  };

  before(
    async () => {
      env = await startTestEnv();
      hub = new KubeApi(env.kubeConfig("hub"));
      op = GuideOperator.create(env, "cp-reinstall-");
      await deletePlaceholders();
      await removeLeftRelease(env, hub);
    },
    { timeout: 30 * 60_000 },
  );

  after(async () => {
    if (env) {
      await deletePlaceholders().catch(() => undefined);
      hubHelm(env, ["uninstall", "-n", "open-cluster-management-addon", RELEASE], { allowFail: true });
    }
    op?.remove();
    await env?.close();
  });

  /** Each cycle's time from the install's start to Available on every cluster, and the total (ms). */
  const cycles: { install: number; uninstall: number; csrs: string }[] = [];
  let cyclesTotal = 0;

  test(`${CYCLES} uninstall/install cycles: every install Available, the addon's CSRs stay far below OCM's limit`, async (t: TestContext) => {
    // The addon's CSRs per cluster, sampled every second for the whole run.
    const most: Record<string, number> = {};
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        for (const [cluster, csrs] of Object.entries(await csrsByCluster()))
          most[cluster] = Math.max(most[cluster] ?? 0, csrs.length);
        await new Promise((r) => setTimeout(r, 1000));
      }
    })();
    const started = Date.now();
    try {
      for (let i = 0; i < CYCLES; i++) {
        const installStart = Date.now();
        await readmeInstallAvailable(env, op.path, MANAGED);
        const install = Date.now() - installStart;
        // When the new manager took the leader Lease (the Lease's acquireTime; same machine clock).
        const lease = await hub.tryGet<KubeObject & { spec?: { acquireTime?: string } }>(
          Resources.lease,
          "cluster-proxy-addon-manager",
          "open-cluster-management-addon",
        );
        const acquired = Date.parse(lease?.spec?.acquireTime ?? "");
        const leader = Number.isNaN(acquired) ? "?" : ((acquired - installStart) / 1000).toFixed(1);
        const csrs = Object.entries(await csrsByCluster())
          .map(([c, l]) => `${c} ${l.length}`)
          .join(", ");
        const uninstallStart = Date.now();
        await uninstall();
        cycles.push({ install, uninstall: Date.now() - uninstallStart, csrs });
        t.diagnostic(
          `cycle ${i + 1}: Available on ${MANAGED.join(" and ")} ${(install / 1000).toFixed(1)} s after the install began (leader Lease taken at ${leader} s); uninstalled in ${((Date.now() - uninstallStart) / 1000).toFixed(1)} s; CSRs when Available: ${csrs || "none"}`,
        );
      }
    } finally {
      sampling = false;
      await sampler;
    }
    const total = Date.now() - started;
    cyclesTotal = total;
    const installs = cycles.map((c) => c.install / 1000);
    const line = `${CYCLES} uninstall/install cycles in ${(total / 60_000).toFixed(1)} min: Available ${Math.min(...installs).toFixed(1)}-${Math.max(...installs).toFixed(1)} s after each install began (uninstall ${Math.min(...cycles.map((c) => c.uninstall / 1000)).toFixed(1)}-${Math.max(...cycles.map((c) => c.uninstall / 1000)).toFixed(1)} s); at most ${Object.entries(
      most,
    )
      .map(([c, n]) => `${n} (${c})`)
      .join(", ")} of the addon's CSRs per cluster at once (OCM halts at ${OCM_LIMIT})`;
    measured.push(line);
    t.diagnostic(line);
    for (const cluster of MANAGED) assert.ok((most[cluster] ?? 0) <= CSRS_AT_MOST, line);
  });

  // The issue's bounds. The new manager does not wait out the Lease its uninstalled predecessor
  // left held (runtime/leader-election.ts: it takes it once the apiserver says that pod is gone).
  test(`the ${CYCLES} cycles within fifteen minutes, every install Available within 60 s`, () => {
    assert.equal(cycles.length, CYCLES, "the cycles did not all run");
    for (const [i, c] of cycles.entries())
      assert.ok(c.install <= INSTALL_AVAILABLE_MS, `cycle ${i + 1}: Available after ${c.install} ms`);
    assert.ok(cyclesTotal <= CYCLES_TOTAL_MS, `${CYCLES} cycles in ${cyclesTotal} ms`);
  });

  test("OCM's CSR limit forced on mc1: Available and health name the cause within 30 s; mc1 recovers once the CSRs are gone", async (t: TestContext) => {
    // Whatever the cycles left (a failed cycle), gone.
    await removeLeftRelease(env, hub);
    await waitFor(
      "no ManagedClusterAddOn cluster-proxy left",
      180_000,
      () => Object.keys(addonAvailability(env)).length === 0,
      1000,
    );
    // Ten pending requests with mc1's and the addon's labels (OCM counts the label pair, whatever
    // the signer): the registration agent of mc1 creates no CSR for the addon.
    const pem = Buffer.from(await certificateRequest("placeholder", ["placeholder"])).toString("base64");
    for (let i = 0; i < OCM_LIMIT; i++)
      await hub.create(Resources.certificateSigningRequest, {
        apiVersion: "certificates.k8s.io/v1",
        kind: "CertificateSigningRequest",
        metadata: {
          name: `addon-mc1-${ADDON_NAME}-placeholder-${i}`,
          labels: { [CLUSTER_LABEL]: "mc1", [ADDON_NAME_LABEL]: ADDON_NAME, [PLACEHOLDER_LABEL]: "true" },
        },
        spec: { request: pem, signerName: PLACEHOLDER_SIGNER, usages: ["digital signature", "client auth"] },
      });
    const installStart = Date.now();
    await op.run("README install-chart", docBlock("install-chart"));
    const installed = Date.now();
    let last: Condition | undefined;
    const named = (c: Condition | undefined): boolean =>
      c?.status === "False" &&
      c.reason === TunnelHealthReason.certificateNotIssued &&
      /too many csr/i.test(c.message ?? "") &&
      Number(
        /(\d+) certificate requests of the addon for mc1 on the hub; OCM's registration agent stops requesting at 10\b/.exec(
          c.message ?? "",
        )?.[1] ?? 0,
      ) >= OCM_LIMIT &&
      /agent pods without Secret \S+ cannot start/.test(c.message ?? "");
    await waitFor(
      "mc1's Available to name OCM's CSR limit",
      CAUSE_MS + 30_000,
      () => {
        last = addonAvailability(env).mc1;
        return named(last);
      },
      500,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\nlast: ${JSON.stringify(last)}`, { cause: err });
    });
    const conditionAt = Date.now() - installed;
    t.diagnostic(`mc1 Available: ${last?.status} ${last?.reason}: ${last?.message}`);
    // From OCM's halt (its ClusterCertificateRotated=False) to Available naming it.
    const mca = JSON.parse(
      env.kubectl("hub", ["-n", "mc1", "get", "managedclusteraddon", RELEASE, "-o", "json"]).stdout,
    ) as {
      status?: { conditions?: Condition[] };
    };
    const since = (type: string): number =>
      Date.parse(mca.status?.conditions?.find((c) => c.type === type)?.lastTransitionTime ?? "");
    const afterHalt = since("Available") - since("ClusterCertificateRotated");
    t.diagnostic(
      `Available named OCM's halt ${afterHalt / 1000} s after OCM reported it (condition times, 1 s resolution)`,
    );
    assert.ok(afterHalt <= CAUSE_MS, `Available named the halt ${afterHalt} ms after OCM reported it`);
    // cluster-proxy health, as the operator runs it: mc1 unhealthy, and why in the same words.
    const health = await runAsOperator(env, op.path, "cluster-proxy health -o json --timeout=5s", 120_000, {
      cwd: op.dir,
    });
    const healthAt = Date.now() - installed;
    const rows = (JSON.parse(health.stdout) as { items: { cluster: string; healthy: boolean; reason: string }[] })
      .items;
    const mc1 = rows.find((r) => r.cluster === "mc1");
    t.diagnostic(`cluster-proxy health, mc1: ${JSON.stringify(mc1)}`);
    const line = `OCM's CSR limit forced on mc1 (10 pending CSRs): Available False ${TunnelHealthReason.certificateNotIssued} naming the limit ${(afterHalt / 1000).toFixed(0)} s after OCM's ClusterCertificateRotated=False and ${(conditionAt / 1000).toFixed(1)} s after the install block ended (${((Date.now() - installStart) / 1000).toFixed(0)} s after it began), cluster-proxy health ${(healthAt / 1000).toFixed(1)} s`;
    t.diagnostic(line);
    assert.ok(conditionAt <= CAUSE_MS, line);
    assert.ok(healthAt <= CAUSE_MS, line);
    assert.equal(mc1?.healthy, false);
    assert.match(mc1?.reason ?? "", new RegExp(`Available=False \\(${TunnelHealthReason.certificateNotIssued}\\)`));
    assert.match(mc1?.reason ?? "", /too many csr .*stops requesting at 10.*cannot start/i);
    // The agent pods of mc1 do wait (no certificate Secret), and mc2 is not held up by mc1.
    const mc1Pods = JSON.parse(env.kubectl("mc1", ["-n", AGENT_NAMESPACE, "get", "pods", "-o", "json"]).stdout) as {
      items: { status?: { phase?: string } }[];
    };
    assert.ok(
      mc1Pods.items.every((p) => p.status?.phase !== "Running"),
      `mc1's agent pods: ${mc1Pods.items.map((p) => p.status?.phase).join(", ")}`,
    );
    await waitFor("mc2 Available", 120_000, () => addonAvailability(env).mc2?.status === "True", 1000);
    // The requests removed: the registration agent asks again at its next resync (OCM v1.2.1 does
    // not look again when CSRs go away; its Secret controllers resync every 5 minutes), and mc1
    // becomes Available.
    const removed = Date.now();
    await deletePlaceholders();
    await waitFor(
      "mc1 Available once the CSRs are gone",
      OCM_RESYNC_MS + 120_000,
      () => {
        last = addonAvailability(env).mc1;
        return last?.status === "True";
      },
      1000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\nlast: ${JSON.stringify(last)}`, { cause: err });
    });
    const recovered = `${line}; Available again ${((Date.now() - removed) / 1000).toFixed(1)} s after the CSRs were deleted`;
    measured.push(recovered);
    t.diagnostic(recovered);
    await uninstall();
  });

  test("the measured numbers, for the install guide", (t: TestContext) => {
    for (const m of measured) t.diagnostic(m);
  });
});
