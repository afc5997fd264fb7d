/**
 * KubeVela's cluster-gateway on our proxy-servers (issue 40, Tests): after the README's bare chart
 * install, the hub operations guide's blocks, run as written by an operator in the test
 * environment's lab network with nothing but the hub kubeconfig, deploy the real cluster-gateway
 * v1.9.1 (scripts/cluster-gateway-binary.mjs; the process kubelet runs it for the image
 * oamdev/cluster-gateway) in the proxy-servers' namespace with the Secrets `proxy-client` and
 * `proxy-server-ca` mounted, register it as the aggregated API v1alpha1.cluster.core.oam.dev and
 * create mc1's cluster Secret (`cluster-endpoint-type=ClusterProxy`). Then
 * `kubectl get --raw /apis/cluster.core.oam.dev/v1alpha1/clustergateways/mc1/proxy/api/v1/namespaces`
 * from the lab lists exactly mc1's namespaces: the hub kube-apiserver's aggregation to
 * cluster-gateway, and cluster-gateway's konnectivity client (v0.0.36) through our proxy-servers'
 * gRPC door and mc1's agent to mc1's kube-apiserver.
 */
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { KubeApi } from "@cluster-proxy/kube";
import { paths } from "../infra/env/config.js";
import { type RunResult, waitFor } from "../infra/env/exec.js";
import { type TestEnv, startTestEnv } from "../infra/env/fixture.js";
import {
  DOC_BLOCKS,
  assertShownOutput,
  docBlock,
  operatorPath,
  runAsOperator,
  transcriptSteps,
} from "../infra/addon/readme-install.js";
import {
  RELEASE,
  RELEASE_NAMESPACE as NS,
  helmBinary,
  readmeInstallAvailable,
  removeLeftRelease,
} from "../infra/chart.js";

const CLUSTERS = ["mc1", "mc2"] as const;
/** What the guide's deploy block creates outside the release, removed after the test. */
const CLUSTER_SCOPED = [
  "apiservice/v1alpha1.cluster.core.oam.dev",
  "clusterrolebinding/cluster-gateway-auth-delegator",
  "clusterrolebinding/cluster-gateway-apiserver",
  "clusterrole/cluster-gateway-apiserver",
];

describe("KubeVela's cluster-gateway on our proxy-servers, from a workstation", { timeout: 30 * 60_000 }, () => {
  let env: TestEnv;
  let hub: KubeApi;
  let dir = "";
  let path = "";
  let mc1Token = "";

  const kubectl = (args: string[]): string => env.kubectl("hub", args).stdout;
  const cleanUp = (): void => {
    env.kubectl("hub", ["delete", "--ignore-not-found", "--wait=false", ...CLUSTER_SCOPED], { allowFail: true });
    env.kubectl(
      "hub",
      [
        "-n",
        NS,
        "delete",
        "--ignore-not-found",
        "deployment/cluster-gateway",
        "service/cluster-gateway",
        "sa/cluster-gateway",
      ],
      { allowFail: true },
    );
    env.kubectl(
      "hub",
      ["-n", "kube-system", "delete", "--ignore-not-found", "rolebinding/cluster-gateway-authentication-reader"],
      {
        allowFail: true,
      },
    );
    env.kubectl("hub", ["delete", "--ignore-not-found", "--wait=false", "namespace/vela-system"], { allowFail: true });
  };

  before(
    async () => {
      env = await startTestEnv();
      hub = new KubeApi(env.kubeConfig("hub"));
      dir = mkdtempSync(join(tmpdir(), "cp-kubevela-"));
      path = operatorPath(env, dir);
      copyFileSync(env.kubeconfigPath("hub"), join(dir, "hub.kubeconfig"));
      helmBinary();
      await removeLeftRelease(env, hub);
      cleanUp();
      await waitFor(
        "a namespace vela-system left by an earlier run to go",
        120_000,
        () => env.kubectl("hub", ["get", "namespace", "vela-system"], { allowFail: true }).status !== 0,
        1000,
      );
      // A user of mc1 (what MC1_TOKEN stands for in the guide).
      env.kubectl("mc1", ["create", "serviceaccount", "vela-user", "-n", "default"], { allowFail: true });
      env.kubectl(
        "mc1",
        [
          "create",
          "clusterrolebinding",
          "vela-user",
          "--clusterrole=cluster-admin",
          "--serviceaccount=default:vela-user",
        ],
        { allowFail: true },
      );
      mc1Token = env.kubectl("mc1", ["create", "token", "vela-user", "-n", "default", "--duration=2h"]).stdout.trim();
    },
    { timeout: 90 * 60_000 },
  );

  after(async () => {
    if (env) {
      cleanUp();
      env.exec("lab", paths.helm, ["uninstall", "-n", NS, RELEASE, "--kubeconfig", env.kubeconfigPath("hub")], {
        allowFail: true,
        timeoutMs: 120_000,
      });
    }
    env?.kubectl("mc1", ["delete", "clusterrolebinding", "vela-user"], { allowFail: true });
    env?.kubectl("mc1", ["delete", "serviceaccount", "vela-user", "-n", "default"], { allowFail: true });
    if (dir) rmSync(dir, { recursive: true, force: true });
    await env?.close();
  });

  test("the README's bare chart install: cluster-proxy Available on mc1 and mc2", async () => {
    await readmeInstallAvailable(env, path, CLUSTERS);
  });

  test("the guide's cluster-gateway lists mc1's namespaces through the hub kube-apiserver and our proxy-servers", async (t) => {
    const deploy = await runAsOperator(env, path, docBlock("kubevela-cluster-gateway-deploy"), 420_000, { cwd: dir });
    t.diagnostic(deploy.stderr.slice(-4000));
    assert.equal(
      deploy.status,
      0,
      `${deploy.stdout}\n${deploy.stderr}\n` +
        kubectl(["get", "apiservice", "v1alpha1.cluster.core.oam.dev", "-o", "yaml"]) +
        env.kubectl("hub", ["-n", NS, "get", "deployment", "cluster-gateway", "-o", "yaml"], { allowFail: true })
          .stdout,
    );
    const secret = await runAsOperator(env, path, docBlock("kubevela-cluster-gateway-cluster"), 120_000, {
      cwd: dir,
      env: { MC1_TOKEN: mc1Token },
    });
    assert.equal(secret.status, 0, `${secret.stdout}\n${secret.stderr}`);

    const steps = transcriptSteps(docBlock("kubevela-cluster-gateway-get"));
    assert.equal(steps.length, 1, `the ${DOC_BLOCKS["kubevela-cluster-gateway-get"].file} transcript has one command`);
    const get = steps[0]!;
    const mc1Namespaces = env
      .kubectl("mc1", ["get", "namespaces", "-o", "name"])
      .stdout.split("\n")
      .filter(Boolean)
      .map((l) => l.replace(/^namespace\//, ""))
      .sort();
    let last: RunResult | undefined;
    // cluster-gateway's secret informer sees the new Secret within moments.
    await waitFor(
      "kubectl get --raw through cluster-gateway to list mc1's namespaces",
      120_000,
      async () => {
        last = await runAsOperator(env, path, get.command, 120_000, { cwd: dir, typed: true });
        return (last.status === 0 && last.stdout.trim() !== "") || undefined;
      },
      2000,
    ).catch((err: Error) => {
      const logs = env.kubectl("hub", ["-n", NS, "logs", "deployment/cluster-gateway", "--tail=60"], {
        allowFail: true,
      });
      throw new Error(
        `${err.message}\n$ ${get.command}\n${last?.stdout}\n${last?.stderr}\ncluster-gateway:\n${logs.stdout}${logs.stderr}`,
        {
          cause: err,
        },
      );
    });
    t.diagnostic(`$ ${get.command}\n${last!.stdout}${last!.stderr}`);
    assert.deepEqual(last!.stdout.split("\n").filter(Boolean).sort(), mc1Namespaces);
    assertShownOutput(get, last!.stdout);
    // mc1's, not the hub's: the hub has namespaces mc1 has not (its ManagedCluster namespaces).
    const hubNamespaces = kubectl(["get", "namespaces", "-o", "name"]);
    assert.match(hubNamespaces, /^namespace\/mc2$/m);
    assert.ok(!mc1Namespaces.includes("mc2"), `mc1 has no namespace mc2: ${mc1Namespaces.join(" ")}`);
  });
});
