/**
 * ClusterProfiles end to end (issue 32, docs/guides/cluster-profile.md) on the test environment
 * with OCM's ClusterProfile feature gate on: the chart installed with `clusterProfile.enabled`, so
 * the addon manager runs with the chart's least-privilege RBAC; OCM v1.2.1 keeps a ClusterProfile
 * for mc1 and mc2 in the consumer's namespace; the manager adds the access provider `cluster-proxy`
 * (gateway path, the gateway's serving CA bundle, the exec extension naming the cluster) and keeps
 * another provider's entry. From inside the hub (a hub pod's network namespace, where the gateway's
 * Service name resolves), the Go consumer on the real `sigs.k8s.io/cluster-inventory-api/pkg/credentials`
 * (the version OCM v1.2.1 requires) and real kubectl with a kubeconfig assembled from the profile,
 * both with `cluster-proxy credential` as the exec plugin, list mc1's namespaces through the gateway
 * with TLS verified, as a hub ServiceAccount that hub RBAC allows mc1 only (mc2 refused). A new
 * serving CA reaches every profile and the consumer keeps working; taking mc2 out of the addon
 * removes its entry.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { KubeApi, Resources, type KubeObject } from "@cluster-proxy/addon-manager";
import { NETNS_ANNOTATION, paths } from "../env/config.js";
import { type RunResult, waitFor } from "../env/exec.js";
import { buildClusterProfileConsumer } from "../env/environment.js";
import { type TestEnv, startTestEnv } from "../env/fixture.js";
import { operatorPath } from "../addon-manager/readme-install.js";
import { CHART, helmBinary } from "../chart/helm.js";

const NS = "open-cluster-management-addon";
const RELEASE = "cluster-proxy";
const AGENT_NS = "open-cluster-management-cluster-proxy";
/** Where the consumer lives; OCM makes ClusterProfiles here once the namespace is bound to ManagedClusterSet global. */
const FLEET = "fleet";
const CONSUMER_SA = "profile-reader";
/** What the gateway impersonates the ServiceAccount as in the managed clusters (its default prefix). */
const IMPERSONATED = `cluster:hub:system:serviceaccount:${FLEET}:${CONSUMER_SA}`;
const GATEWAY = `https://cluster-proxy-addon-user.${NS}.svc:9092`;
const CLUSTERS = ["mc1", "mc2"] as const;
const FOREIGN = { name: "someone-else", cluster: { server: "https://someone-else.example:6443" } };
const PROFILE = {
  apiVersion: "multicluster.x-k8s.io/v1alpha1",
  kind: "ClusterProfile",
  plural: "clusterprofiles",
  namespaced: true,
};
const SET_BINDING = {
  apiVersion: "cluster.open-cluster-management.io/v1beta2",
  kind: "ManagedClusterSetBinding",
  plural: "managedclustersetbindings",
  namespaced: true,
};

interface Provider {
  name: string;
  cluster: {
    server: string;
    "certificate-authority-data"?: string;
    extensions?: { name: string; extension: unknown }[];
  };
}
interface Profile extends KubeObject {
  status?: { accessProviders?: Provider[]; credentialProviders?: Provider[] };
}
interface Secret extends KubeObject {
  data?: Record<string, string>;
}
interface Pod extends KubeObject {
  status?: { podIP?: string; phase?: string };
}

/** The PEM certificates of a bundle. */
const certificates = (pem: string): X509Certificate[] =>
  (pem.match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g) ?? []).map((c) => new X509Certificate(c));

describe("ClusterProfile access provider cluster-proxy", { timeout: 40 * 60_000 }, () => {
  let env: TestEnv;
  let hub: KubeApi;
  let dir = "";
  let consumer = "";
  let providerFile = "";

  const helm = (args: string[], allowFail = false): RunResult =>
    env.exec("lab", paths.helm, [...args, "--kubeconfig", env.kubeconfigPath("hub")], {
      timeoutMs: 180_000,
      allowFail,
    });
  const profile = (cluster: string): Promise<Profile | undefined> => hub.tryGet<Profile>(PROFILE, cluster, FLEET);
  const ours = (p: Profile | undefined, field: "accessProviders" | "credentialProviders" = "accessProviders") =>
    p?.status?.[field]?.find((x) => x.name === "cluster-proxy");
  const servingCa = async (): Promise<string> => {
    const s = await hub.get<Secret>(Resources.secret, "cluster-proxy-gateway-serving", NS);
    return Buffer.from(s.data?.["ca.crt"] ?? "", "base64").toString();
  };
  /** `argv` in the network namespace of a running hub pod of the release (cluster DNS: the gateway's Service name resolves). */
  const inHubPod = async (argv: string[], timeoutMs = 90_000): Promise<RunResult> => {
    const pods = (await hub.list(Resources.pod, { namespace: NS })).items as Pod[];
    const pod = pods.find(
      (p) => p.status?.phase === "Running" && p.status.podIP && p.metadata.annotations?.[NETNS_ANNOTATION],
    );
    assert.ok(pod, `a running pod in ${NS}`);
    const netns = pod.metadata.annotations![NETNS_ANNOTATION]!;
    return new Promise((resolve) =>
      execFile("ip", ["netns", "exec", netns, ...argv], { timeout: timeoutMs }, (err, stdout, stderr) =>
        resolve({ status: err ? (typeof err.code === "number" ? err.code : 1) : 0, stdout, stderr }),
      ),
    );
  };
  const runConsumer = (cluster: string): Promise<RunResult> =>
    inHubPod([
      consumer,
      `--clusterprofile-provider-file=${providerFile}`,
      `--hub-kubeconfig=${env.kubeconfigPath("hub")}`,
      `--namespace=${FLEET}`,
      `--profile=${cluster}`,
    ]);
  /** Retries the consumer until it lists `cluster`'s namespaces (the gateway and the tunnel may still be settling). */
  const consumerLists = async (
    cluster: string,
    timeoutMs: number,
  ): Promise<{ server: string; namespaces: string[] }> => {
    let last: RunResult | undefined;
    return waitFor(
      `the consumer to list ${cluster}'s namespaces through the gateway`,
      timeoutMs,
      async () => {
        last = await runConsumer(cluster);
        return last.status === 0 ? (JSON.parse(last.stdout) as { server: string; namespaces: string[] }) : undefined;
      },
      2_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\nlast: ${JSON.stringify(last)}`, { cause: err });
    });
  };

  before(
    async () => {
      env = await startTestEnv({ clusterProfile: true });
      hub = new KubeApi(env.kubeConfig("hub"));
      dir = mkdtempSync(join(tmpdir(), "cp-profile-e2e-"));
      // `<dir>/bin/cluster-proxy`: the CLI as installed, the command of the provider file.
      operatorPath(env, dir);
      helmBinary();
      // Built by `test/env/cli.ts prepare` (scripts/test.sh), before the namespace without a route out.
      consumer = buildClusterProfileConsumer();
      // An earlier run's release and CSRs (OCM's registration agent stops requesting at 10 per cluster).
      helm(["uninstall", "-n", NS, RELEASE, "--wait", "--timeout", "60s"], true);
      for (const c of (
        await hub.list(Resources.certificateSigningRequest, {
          labelSelector: "open-cluster-management.io/addon-name=cluster-proxy",
        })
      ).items)
        await hub.delete(Resources.certificateSigningRequest, c.metadata.name);
      env.kubectl("hub", ["label", "managedcluster", "mc2", "proxy.open-cluster-management.io/install-"], {
        allowFail: true,
      });
      // The consumer's namespace, bound to ManagedClusterSet global (mc1 and mc2), its ServiceAccount
      // and its hub rights: managedclusters/proxy for mc1 only. In both managed clusters the
      // impersonated ServiceAccount may list namespaces, so mc2 can only be refused by the hub.
      env.kubectl("hub", ["apply", "-f", "-"], {
        input: `apiVersion: v1
kind: Namespace
metadata: {name: ${FLEET}}
---
apiVersion: cluster.open-cluster-management.io/v1beta2
kind: ManagedClusterSetBinding
metadata: {name: global, namespace: ${FLEET}}
spec: {clusterSet: global}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: ${CONSUMER_SA}, namespace: ${FLEET}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ${CONSUMER_SA}-mc1}
rules:
- apiGroups: [cluster.open-cluster-management.io]
  resources: [managedclusters/proxy]
  resourceNames: [mc1]
  verbs: [get, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: ${CONSUMER_SA}-mc1}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ${CONSUMER_SA}-mc1}
subjects:
- {kind: ServiceAccount, name: ${CONSUMER_SA}, namespace: ${FLEET}}
`,
      });
      for (const c of CLUSTERS)
        env.kubectl(c, ["apply", "-f", "-"], {
          input: `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: namespace-reader}
rules:
- {apiGroups: [""], resources: [namespaces], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: hub-profile-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: namespace-reader}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "${IMPERSONATED}"}
`,
        });
      // The consumer's provider file: the plugin requests short-lived tokens of its ServiceAccount.
      providerFile = join(dir, "provider.json");
      writeFileSync(
        providerFile,
        JSON.stringify({
          providers: [
            {
              name: "cluster-proxy",
              execConfig: {
                apiVersion: "client.authentication.k8s.io/v1",
                command: join(dir, "bin", "cluster-proxy"),
                args: [
                  "credential",
                  `--kubeconfig=${env.kubeconfigPath("hub")}`,
                  `--service-account=${FLEET}/${CONSUMER_SA}`,
                  "--expiration=15m",
                ],
                provideClusterInfo: true,
              },
            },
          ],
        }),
      );
    },
    { timeout: 90 * 60_000 },
  );

  after(async () => {
    if (env) {
      helm(["uninstall", "-n", NS, RELEASE], true);
      env.kubectl("hub", ["label", "managedcluster", "mc2", "proxy.open-cluster-management.io/install-"], {
        allowFail: true,
      });
      for (const c of CLUSTERS)
        env.kubectl(c, ["delete", "clusterrolebinding/hub-profile-reader", "clusterrole/namespace-reader"], {
          allowFail: true,
        });
      env.kubectl("hub", ["delete", `clusterrolebinding/${CONSUMER_SA}-mc1`, `clusterrole/${CONSUMER_SA}-mc1`], {
        allowFail: true,
      });
    }
    await hub?.delete(SET_BINDING, "global", FLEET).catch(() => undefined);
    await hub?.delete(Resources.namespace, FLEET).catch(() => undefined);
    if (dir) rmSync(dir, { recursive: true, force: true });
    await env?.close();
  });

  test("with clusterProfile.enabled the ClusterProfiles of mc1 and mc2 carry provider cluster-proxy (gateway path, serving CA bundle, the cluster for the plugin); another provider's entry is kept", async () => {
    // OCM's profiles first, and another provider's entry on mc1's.
    await waitFor("OCM's ClusterProfiles for mc1 and mc2", 60_000, async () =>
      (await Promise.all(CLUSTERS.map(profile))).every((p) => p !== undefined) ? true : undefined,
    );
    await hub.mergePatch(PROFILE, "mc1", FLEET, { status: { accessProviders: [FOREIGN] } }, "status");

    const install = helm([
      "install",
      "-n",
      NS,
      "--create-namespace",
      RELEASE,
      CHART,
      "--set",
      "clusterProfile.enabled=true",
    ]);
    assert.equal(install.status, 0, install.stderr);

    for (const c of CLUSTERS) {
      const p = await waitFor(
        `provider cluster-proxy on ClusterProfile ${FLEET}/${c}`,
        240_000,
        async () => {
          const got = await profile(c);
          return ours(got) && ours(got, "credentialProviders") ? got : undefined;
        },
        1_000,
      );
      const ca = await servingCa();
      const entry = ours(p)!;
      assert.deepEqual(entry, {
        name: "cluster-proxy",
        cluster: {
          server: `${GATEWAY}/${c}`,
          "certificate-authority-data": Buffer.from(ca).toString("base64"),
          extensions: [{ name: "client.authentication.k8s.io/exec", extension: { cluster: c } }],
        },
      });
      assert.deepEqual(ours(p, "credentialProviders"), entry, "the deprecated list says the same");
      // A CA bundle, not the gateway's leaf: every certificate in it is a CA.
      const certs = certificates(ca);
      assert.ok(certs.length >= 1 && certs.every((x) => x.ca), "certificate-authority-data holds CA certificates only");
      if (c === "mc1")
        assert.deepEqual(
          p.status?.accessProviders?.map((x) => x.name),
          ["someone-else", "cluster-proxy"],
        );
    }
  });

  test("the Go consumer (cluster-inventory-api pkg/credentials, BuildConfigFromCP) lists mc1's namespaces through the gateway as a ServiceAccount hub RBAC allows mc1 only; mc2 is refused", async () => {
    const mc1 = await consumerLists("mc1", 180_000);
    assert.equal(mc1.server, `${GATEWAY}/mc1`);
    assert.ok(mc1.namespaces.includes(AGENT_NS), mc1.namespaces.join(", "));
    const mc2 = await runConsumer("mc2");
    assert.notEqual(mc2.status, 0, mc2.stdout);
    assert.match(mc2.stderr, /listing namespaces of mc2 through .*: Forbidden: /);
  });

  test("real kubectl with a kubeconfig assembled from the ClusterProfile and the plugin does the same", async () => {
    const kubeconfigOf = async (c: string): Promise<string> => {
      const entry = ours(await profile(c));
      assert.ok(entry, `provider on ${c}`);
      const file = join(dir, `${c}.kubeconfig`);
      // The profile's cluster as it stands (server, CA data, the exec extension), and the plugin as user.
      writeFileSync(
        file,
        JSON.stringify({
          apiVersion: "v1",
          kind: "Config",
          clusters: [{ name: c, cluster: entry.cluster }],
          users: [
            {
              name: CONSUMER_SA,
              user: {
                exec: {
                  apiVersion: "client.authentication.k8s.io/v1",
                  command: join(dir, "bin", "cluster-proxy"),
                  args: [
                    "credential",
                    `--kubeconfig=${env.kubeconfigPath("hub")}`,
                    `--service-account=${FLEET}/${CONSUMER_SA}`,
                  ],
                  provideClusterInfo: true,
                  interactiveMode: "Never",
                },
              },
            },
          ],
          contexts: [{ name: c, context: { cluster: c, user: CONSUMER_SA } }],
          "current-context": c,
        }),
        { mode: 0o600 },
      );
      return file;
    };
    const kubectl = join(env.state.binDir, "kubectl");
    const mc1 = await inHubPod([kubectl, "--kubeconfig", await kubeconfigOf("mc1"), "get", "ns", "-o", "name"]);
    assert.equal(mc1.status, 0, mc1.stderr);
    assert.match(mc1.stdout, new RegExp(`^namespace/${AGENT_NS}$`, "m"));
    const mc2 = await inHubPod([kubectl, "--kubeconfig", await kubeconfigOf("mc2"), "get", "ns", "-o", "name"]);
    assert.notEqual(mc2.status, 0, mc2.stdout);
    assert.match(mc2.stderr, /forbidden/i);
  });

  test("a new serving CA reaches every ClusterProfile and the consumer keeps working", async () => {
    const before = await servingCa();
    // The serving CA is lost (as after a restore without it): the manager makes a new one,
    // re-issues the gateway's certificate, and publishes the new bundle.
    await hub.delete(Resources.secret, "cluster-proxy-signer", NS);
    const after = await waitFor(
      "a new serving CA bundle in cluster-proxy-gateway-serving",
      120_000,
      async () => {
        const ca = await servingCa();
        return ca && ca !== before ? ca : undefined;
      },
      1_000,
    );
    const old = new Set(certificates(before).map((x) => x.fingerprint256));
    assert.ok(
      certificates(after).every((x) => !old.has(x.fingerprint256)),
      "the new bundle does not hold the lost CA",
    );
    for (const c of CLUSTERS)
      await waitFor(
        `ClusterProfile ${FLEET}/${c} to carry the new CA bundle`,
        60_000,
        async () => {
          const p = await profile(c);
          const want = Buffer.from(after).toString("base64");
          return ours(p)?.cluster["certificate-authority-data"] === want &&
            ours(p, "credentialProviders")?.cluster["certificate-authority-data"] === want
            ? true
            : undefined;
        },
        1_000,
      );
    // Re-reading the profile, the consumer verifies the gateway's new certificate.
    const mc1 = await consumerLists("mc1", 240_000);
    assert.ok(mc1.namespaces.includes(AGENT_NS));
  });

  test("taking mc2 out of the addon removes its entry; mc1's stays", async () => {
    env.kubectl("hub", ["label", "managedcluster", "mc2", "proxy.open-cluster-management.io/install=false"]);
    await waitFor(
      "the addon to leave mc2 and its ClusterProfile entry to go",
      180_000,
      async () => {
        const p = await profile("mc2");
        return p && !ours(p) && !ours(p, "credentialProviders") ? true : undefined;
      },
      1_000,
    );
    assert.ok(ours(await profile("mc1")), "mc1 keeps its entry");
  });
});
