/**
 * ClusterProfiles end to end (issue 32) on the test environment with OCM's ClusterProfile feature
 * gate on, driven by what docs/guides/cluster-profile.md and the README's ClusterProfile section
 * print, run as written (test/infra/addon/readme-install.ts): the guide's consumer namespace
 * `fleet` (bound to ManagedClusterSet global), its ServiceAccount `fleet-reader` allowed mc1 only by
 * hub RBAC, each managed cluster's grant to the impersonated ServiceAccount, and the guide's
 * `helm upgrade --install ... --set clusterProfile.enabled=true` (the chart's least-privilege
 * RBAC). OCM v1.2.1 keeps a ClusterProfile for mc1 and mc2 in `fleet`; the manager adds the access
 * provider `cluster-proxy` (gateway path, the gateway's serving CA bundle, the exec extension
 * naming the cluster) and keeps another provider's entry. From inside the hub (a hub pod's network
 * namespace, where the gateway's Service name resolves; kubectl and `cluster-proxy` on PATH,
 * KUBECONFIG the hub's), the Go consumer on the real `sigs.k8s.io/cluster-inventory-api/pkg/credentials`
 * (the version OCM v1.2.1 requires, whose source holds the README's three lines of Go) with the
 * README's provider file, and the README's kubectl block, list mc1's namespaces through the gateway
 * with TLS verified; mc2 is refused by the hub. A new serving CA reaches every profile and the
 * consumer keeps working; taking mc2 out of the addon removes its entry.
 */
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "@cluster-proxy/addon-manager";
import { GATEWAY_TOKEN_AUDIENCE } from "@cluster-proxy/api";
import { MANAGED, NETNS_ANNOTATION, repoRoot } from "../infra/env/config.js";
import { type RunResult, waitFor } from "../infra/env/exec.js";
import { buildClusterProfileConsumer } from "../infra/env/environment.js";
import { type TestEnv, startTestEnv } from "../infra/env/fixture.js";
import { docBlock, operatorPath, runAsOperator } from "../infra/addon/readme-install.js";
import { SET_BINDING } from "../infra/addon/ocm-resources.js";
import {
  AGENT_NAMESPACE,
  RELEASE,
  RELEASE_NAMESPACE as NS,
  helmBinary,
  hubHelm,
  removeLeftRelease,
} from "../infra/chart.js";
import { GATEWAY as GATEWAY_SERVICE } from "../infra/gateway/gateway-setup.js";

/** The guide's consumer: namespace `fleet` (OCM makes the ClusterProfiles there) and its ServiceAccount. */
const FLEET = "fleet";
const TOKEN_REVIEW = {
  apiVersion: "authentication.k8s.io/v1",
  kind: "TokenReview",
  plural: "tokenreviews",
  namespaced: false,
} as const;
/** What the test reads of a TokenReview's answer. */
interface TokenReview extends KubeObject {
  status?: { authenticated?: boolean; user?: { username?: string }; error?: string };
}
const CONSUMER_SA = "fleet-reader";
const GATEWAY = `https://${GATEWAY_SERVICE}.${NS}.svc:9092`;
const FOREIGN = { name: "someone-else", cluster: { server: "https://someone-else.example:6443" } };
const PROFILE = {
  apiVersion: "multicluster.x-k8s.io/v1alpha1",
  kind: "ClusterProfile",
  plural: "clusterprofiles",
  namespaced: true,
};
/** The Go consumer's source: it holds the README's three lines of Go. */
const CONSUMER_SOURCE = join(repoRoot, "test", "cluster-profile", "consumer", "main.go");

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
  let path = "";
  let consumer = "";

  const profile = (cluster: string): Promise<Profile | undefined> => hub.tryGet<Profile>(PROFILE, cluster, FLEET);
  const ours = (p: Profile | undefined, field: "accessProviders" | "credentialProviders" = "accessProviders") =>
    p?.status?.[field]?.find((x) => x.name === "cluster-proxy");
  const servingCa = async (): Promise<string> => {
    const s = await hub.get<Secret>(Resources.secret, "cluster-proxy-gateway-serving", NS);
    return Buffer.from(s.data?.["ca.crt"] ?? "", "base64").toString();
  };
  /** The network namespace of a running hub pod of the release (cluster DNS: the gateway's Service name resolves). */
  const hubPodNetns = async (): Promise<string> => {
    const pods = (await hub.list(Resources.pod, { namespace: NS })).items as Pod[];
    const pod = pods.find(
      (p) => p.status?.phase === "Running" && p.status.podIP && p.metadata.annotations?.[NETNS_ANNOTATION],
    );
    assert.ok(pod, `a running pod in ${NS}`);
    return pod.metadata.annotations![NETNS_ANNOTATION]!;
  };
  /**
   * `script` as the guide's user runs it, in `dir`: kubectl and `cluster-proxy` on PATH, KUBECONFIG
   * the hub's (or `opts.env`'s), in the lab or, with `opts.inHub`, inside the hub network.
   */
  const user = async (
    script: string,
    opts: { env?: Record<string, string>; inHub?: boolean; timeoutMs?: number } = {},
  ): Promise<RunResult> =>
    runAsOperator(env, path, script, opts.timeoutMs ?? 600_000, {
      cwd: dir,
      env: opts.env,
      netns: opts.inHub ? await hubPodNetns() : undefined,
    });
  /** The same, failing the test with the trace unless it succeeds. */
  const operator = async (
    what: string,
    script: string,
    opts: { env?: Record<string, string>; inHub?: boolean } = {},
  ): Promise<string> => {
    const r = await user(script, opts);
    assert.equal(r.status, 0, `${what} failed:\n${script}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
    console.log(`# ${what}\n# ${r.stdout.trim().split("\n").join("\n# ")}`);
    return r.stdout;
  };
  /** The Go consumer inside the hub with the README's provider file (provider.json in `dir`). */
  const runConsumer = (cluster: string): Promise<RunResult> =>
    user(
      [
        consumer,
        "--clusterprofile-provider-file=provider.json",
        `--hub-kubeconfig=${env.kubeconfigPath("hub")}`,
        `--namespace=${FLEET}`,
        `--profile=${cluster}`,
      ].join(" "),
      { inHub: true, timeoutMs: 90_000 },
    );
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
      path = operatorPath(env, dir);
      // The user works in a directory of their own with the chart at hand (the README's files,
      // provider.json, mc1.kubeconfig and the like, land there, not in the checkout).
      symlinkSync(join(repoRoot, "charts"), join(dir, "charts"));
      helmBinary();
      // Built by `test/infra/env/cli.ts prepare` (scripts/test.sh), before the namespace without a route out.
      consumer = buildClusterProfileConsumer();
      await removeLeftRelease(env, hub);
      env.kubectl("hub", ["label", "managedcluster", "mc2", "proxy.open-cluster-management.io/install-"], {
        allowFail: true,
      });
    },
    { timeout: 90 * 60_000 },
  );

  after(async () => {
    if (env) {
      hubHelm(env, ["uninstall", "-n", NS, RELEASE], { allowFail: true });
      env.kubectl("hub", ["label", "managedcluster", "mc2", "proxy.open-cluster-management.io/install-"], {
        allowFail: true,
      });
      // What the guide's blocks created.
      for (const c of MANAGED)
        env.kubectl(c, ["delete", "clusterrolebinding/hub-fleet-reader", "clusterrole/namespace-reader"], {
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

  test("the guide: the consumer's namespace and rights, each cluster's grant, and clusterProfile.enabled put provider cluster-proxy on the ClusterProfiles of mc1 and mc2 (gateway path, serving CA bundle, the cluster for the plugin); another provider's entry is kept", async () => {
    await operator("guide cluster-profile-consumer", docBlock("cluster-profile-consumer"));
    // In both managed clusters the impersonated ServiceAccount may list namespaces, so mc2 can only
    // be refused by the hub.
    for (const c of MANAGED)
      await operator(`guide cluster-profile-grant-managed (${c}'s admin)`, docBlock("cluster-profile-grant-managed"), {
        env: { KUBECONFIG: env.kubeconfigPath(c) },
      });
    // OCM's profiles first, and another provider's entry on mc1's.
    await waitFor("OCM's ClusterProfiles for mc1 and mc2", 60_000, async () =>
      (await Promise.all(MANAGED.map(profile))).every((p) => p !== undefined) ? true : undefined,
    );
    await hub.mergePatch(PROFILE, "mc1", FLEET, { status: { accessProviders: [FOREIGN] } }, "status");

    await operator("guide cluster-profile-enable", docBlock("cluster-profile-enable"));

    for (const c of MANAGED) {
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

  test("the README's provider file and three lines of Go (the Go consumer's own, on cluster-inventory-api pkg/credentials) list mc1's namespaces through the gateway as a ServiceAccount hub RBAC allows mc1 only; mc2 is refused", async () => {
    // The Go lines the README shows are the consumer's, as written (but the comments).
    const source = readFileSync(CONSUMER_SOURCE, "utf8");
    const goLines = docBlock("cluster-profile-go")
      .split("\n")
      .map((l) => l.replace(/\s*\/\/.*$/, "").trim())
      .filter((l) => l !== "");
    assert.equal(goLines.length, 3, "three lines of Go");
    for (const line of goLines)
      assert.ok(source.includes(line), `the consumer's source holds the README's line: ${line}`);
    // The provider file, saved as the README shows it.
    writeFileSync(join(dir, "provider.json"), docBlock("cluster-profile-provider"));

    const mc1 = await consumerLists("mc1", 180_000);
    assert.equal(mc1.server, `${GATEWAY}/mc1`);
    assert.ok(mc1.namespaces.includes(AGENT_NAMESPACE), mc1.namespaces.join(", "));
    const mc2 = await runConsumer("mc2");
    assert.notEqual(mc2.status, 0, mc2.stdout);
    assert.match(mc2.stderr, /listing namespaces of mc2 through .*: Forbidden: /);
  });

  test("the README's kubectl block (a kubeconfig assembled from the ClusterProfile and the plugin) does the same", async () => {
    const block = docBlock("cluster-profile-kubectl");
    const mc1 = await operator("README cluster-profile-kubectl", block, { inHub: true });
    assert.match(mc1, new RegExp(`^${AGENT_NAMESPACE}\\s+Active\\s`, "m"));
    // The same block for another cluster, as a reader changes its first line.
    assert.ok(block.startsWith("C=mc1\n"), "the block names its cluster on its first line");
    const mc2 = await user(block.replace(/^C=mc1\n/, "C=mc2\n"), { inHub: true, timeoutMs: 120_000 });
    assert.notEqual(mc2.status, 0, mc2.stdout);
    assert.match(mc2.stderr, /forbidden/i);
  });

  test("the plugin's token is a gateway credential only: the hub apiserver refuses it for its own audience, and accepts it for the gateway's", async () => {
    // The plugin as the README's provider file names it, run the way kubectl runs it for mc1.
    const provider = (
      JSON.parse(docBlock("cluster-profile-provider")) as {
        providers: { execConfig: { command: string; args: string[] } }[];
      }
    ).providers[0]!.execConfig;
    const execInfo = {
      apiVersion: "client.authentication.k8s.io/v1",
      kind: "ExecCredential",
      spec: { interactive: false, cluster: { server: `${GATEWAY}/mc1`, config: { cluster: "mc1" } } },
    };
    const minted = await operator(
      "the README's credential plugin",
      [provider.command, ...provider.args].map((w) => `'${w}'`).join(" "),
      { env: { KUBERNETES_EXEC_INFO: JSON.stringify(execInfo) } },
    );
    const token = (JSON.parse(minted) as { status: { token: string } }).status.token;
    const review = async (audiences?: string[]): Promise<NonNullable<TokenReview["status"]>> =>
      (
        await hub.create<TokenReview>(TOKEN_REVIEW, {
          apiVersion: "authentication.k8s.io/v1",
          kind: "TokenReview",
          metadata: { name: "plugin-token" },
          spec: { token, ...(audiences ? { audiences } : {}) },
        })
      ).status ?? {};
    const asHubApi = await review();
    assert.notEqual(
      asHubApi.authenticated,
      true,
      `the hub apiserver accepted the plugin's token: ${JSON.stringify(asHubApi)}`,
    );
    const asGateway = await review([GATEWAY_TOKEN_AUDIENCE]);
    assert.equal(asGateway.authenticated, true, JSON.stringify(asGateway));
    assert.equal(asGateway.user?.username, `system:serviceaccount:${FLEET}:${CONSUMER_SA}`);
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
    for (const c of MANAGED)
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
    assert.ok(mc1.namespaces.includes(AGENT_NAMESPACE));
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
