// The hub operations end to end in the multi-cluster test environment, with the addon installed
// through OCM as agents.test.ts does it: `cluster-proxy health` (and its answer while mc1 is cut
// off from the hub), `cluster-proxy kubeconfig` used by the real kubectl of the environment's
// build (get, and a watch that sees an object created during it), and `cluster-proxy
// port-forward` to a Service inside mc1. Every CLI runs in the lab namespace, where an operator
// outside the hub would be, and finds the proxy-servers by itself (a LoadBalancer Service that
// exposes their client doors, whose address is in the configuration's additionalSANs). Every `$`
// line of the transcripts of these commands in docs/guides/hub-operations.md runs as written
// (extracted, never re-typed), as a user types it outside the hub with KUBECONFIG the hub's, and
// the output the guide shows must be what it prints (latencies, ages, times, client ports, pod
// names and addresses aside).
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { Condition } from "@cluster-proxy/api";
import { KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "@cluster-proxy/addon-manager";
import { NODE_FLAGS } from "@cluster-proxy/cli";
import { nsOf, repoRoot } from "../infra/env/config.js";
import { waitFor, type RunResult } from "../infra/env/exec.js";
import { type TestEnv, nodeScriptDeployment, startTestEnv } from "../infra/env/fixture.js";
import { deleteAddonCsrs, installCrd, mpcBody } from "../infra/addon/hub-setup.js";
import { ManagerProcess } from "../infra/addon/manager-process.js";
import {
  DOC_BLOCKS,
  assertShownOutput,
  docBlock,
  operatorPath,
  runAsOperator,
  transcriptSteps,
  type DocBlockName,
  type TranscriptStep,
} from "../infra/addon/readme-install.js";
import { KUBECTL_STREAMING_MODES, execTolerantOfSpdyLoss } from "../infra/env/kubectl-streaming.js";

const MANAGER_NS = "cluster-proxy-addon-ops";
const SERVER_NS = "cluster-proxy-ops";
const NAME = "cluster-proxy";
const CLUSTERS = ["mc1", "mc2"] as const;
/** The hub LoadBalancer address of the proxy-servers' client doors (in the hub's pool). */
const DOOR_IP = "10.200.30.90";
const CLI = join(repoRoot, "packages", "cli", "dist", "main.js");

/** The `$` lines of the hub operations guide's transcript between `<name>:begin` and `<name>:end`. */
const transcript = (name: DocBlockName, count: number): TranscriptStep[] => {
  const steps = transcriptSteps(docBlock(name));
  assert.equal(steps.length, count, `the ${DOC_BLOCKS[name].file} ${name} transcript has ${count} commands`);
  return steps;
};

type Mca = KubeObject & { status?: { conditions?: Condition[] } };

interface HealthItem {
  cluster: string;
  installed: boolean;
  available: string;
  probedHealth: boolean;
  healthy: boolean;
  latencyMs: number | null;
  reason: string;
}

describe("hub operations: health, kubeconfig, port-forward", { timeout: 30 * 60_000 }, () => {
  let env: TestEnv;
  let hub: KubeApi;
  let dir: string;
  /** The user's PATH: cluster-proxy, kubectl, curl. */
  let userPath: string;
  let manager: ManagerProcess | undefined;
  const children: ChildProcess[] = [];
  const tokens: Partial<Record<(typeof CLUSTERS)[number], string>> = {};

  /** `cluster-proxy <args>` in the lab namespace against the hub. */
  const cli = (args: string[], timeoutMs = 60_000): RunResult =>
    env.exec("lab", process.execPath, [...NODE_FLAGS, CLI, ...args], { timeoutMs, allowFail: true });
  /** `kubectl --kubeconfig <file> <args>` in the lab namespace (a client outside the hub). */
  const labKubectl = (file: string, args: string[]): RunResult =>
    env.exec("lab", join(env.state.binDir, "kubectl"), ["--kubeconfig", file, ...args], {
      allowFail: true,
      timeoutMs: 60_000,
    });
  const hubFlag = (): string => `--kubeconfig=${env.kubeconfigPath("hub")}`;
  /**
   * A transcript's `$` line as the user types it: in the lab namespace (outside the hub), in the
   * directory `dir`, with KUBECONFIG the hub's and what the README asks of the reader (`env`).
   */
  const typed = (step: TranscriptStep, extraEnv: Record<string, string> = {}): Promise<RunResult> =>
    runAsOperator(env, userPath, step.command, 120_000, { cwd: dir, env: extraEnv, typed: true });
  const health = (...args: string[]): { run: RunResult; items: HealthItem[] } => {
    const run = cli(["health", hubFlag(), "-o", "json", "--timeout=8s", ...args]);
    let items: HealthItem[] = [];
    try {
      items = (JSON.parse(run.stdout) as { items: HealthItem[] }).items;
    } catch {
      // reported by the caller's assertion with run.stderr
    }
    return { run, items };
  };
  /** Spawns a long-running command in the lab namespace, collecting its output. */
  const spawnInLab = (
    cmd: string,
    args: string[],
    extraEnv: Record<string, string> = {},
  ): { child: ChildProcess; out: () => string; err: () => string } => {
    const child = spawn("ip", ["netns", "exec", nsOf("lab"), cmd, ...args], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, ...extraEnv },
    });
    children.push(child);
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-20_000)));
    return { child, out: () => out, err: () => err };
  };
  /**
   * kubectl with a kubeconfig in the lab namespace, to its end (bounded), with optional stdin and
   * extra environment; resolves with its exit status, output and duration.
   */
  const kubectlAsync = (
    file: string,
    args: string[],
    opts: { env?: Record<string, string>; input?: string; timeoutMs?: number } = {},
  ): Promise<{ code: number | null; stdout: string; stderr: string; ms: number }> =>
    new Promise((resolve) => {
      const started = Date.now();
      const child = spawn(
        "ip",
        ["netns", "exec", nsOf("lab"), join(env.state.binDir, "kubectl"), "--kubeconfig", file, ...args],
        { env: { ...process.env, ...opts.env }, stdio: ["pipe", "pipe", "pipe"] },
      );
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
      child.stdin.end(opts.input ?? "");
      const timer = setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs ?? 60_000);
      child.on("close", (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr, ms: Date.now() - started });
      });
    });

  before(
    async () => {
      env = await startTestEnv();
      hub = new KubeApi(env.kubeConfig("hub"));
      dir = mkdtempSync(join(tmpdir(), "cp-ops-e2e-"));
      userPath = operatorPath(env, join(dir, "user"));
      await installCrd(hub);
      await hub.apply(Resources.namespace, { metadata: { name: MANAGER_NS } });
      await deleteAddonCsrs(hub);
      // In the hub's network namespace, as a manager pod: its tunnel probes reach the servers' pods.
      manager = new ManagerProcess(
        "manager-ops",
        env.kubeconfigPath("hub"),
        MANAGER_NS,
        ["--leader-elect=false"],
        nsOf("hub"),
      );
      await manager.waitForLog("controllers started", 60_000);
      await hub.apply(
        Resources.managedProxyConfiguration,
        mpcBody({
          name: NAME,
          namespace: SERVER_NS,
          entrypoint: { type: "LoadBalancerService", loadBalancerService: {} },
          agentReplicas: 1,
          authentication: { signer: { type: "SelfSigned", selfSigned: { additionalSANs: [DOOR_IP] } } },
        }),
      );
      // How an operator exposes the client doors outside the hub.
      await hub.apply(Resources.namespace, { metadata: { name: SERVER_NS } });
      await hub.apply(Resources.service, {
        metadata: { name: "cluster-proxy-client-doors", namespace: SERVER_NS },
        spec: {
          type: "LoadBalancer",
          loadBalancerIP: DOOR_IP,
          selector: {
            "proxy.open-cluster-management.io/component-name": "proxy-server",
            "proxy.open-cluster-management.io/configuration": NAME,
          },
          ports: [
            { name: "grpc", port: 8090, targetPort: 8090 },
            { name: "http-connect", port: 8093, targetPort: 8093 },
          ],
        },
      });
      for (const c of CLUSTERS)
        await hub.apply(Resources.managedClusterAddOn, {
          apiVersion: Resources.managedClusterAddOn.apiVersion,
          kind: Resources.managedClusterAddOn.kind,
          metadata: { name: NAME, namespace: c },
          spec: {},
        });
      for (const c of CLUSTERS) {
        await waitFor(
          `${c}: the addon Available`,
          300_000,
          async () =>
            (await hub.tryGet<Mca>(Resources.managedClusterAddOn, NAME, c))?.status?.conditions?.find(
              (k) => k.type === "Available",
            )?.status === "True",
          500,
        ).catch((err: Error) => {
          throw new Error(`${err.message}\n--- manager\n${manager?.tail(20) ?? ""}`, { cause: err });
        });
      }
      // A user of each managed cluster: a ServiceAccount with cluster-admin, and its token.
      for (const c of CLUSTERS) {
        const spoke = new KubeApi(env.kubeConfig(c));
        await spoke.apply(Resources.serviceAccount, { metadata: { name: "ops-user", namespace: "default" } });
        await spoke.apply(
          {
            apiVersion: "rbac.authorization.k8s.io/v1",
            kind: "ClusterRoleBinding",
            plural: "clusterrolebindings",
            namespaced: false,
          },
          {
            metadata: { name: "ops-user" },
            roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "cluster-admin" },
            subjects: [{ kind: "ServiceAccount", name: "ops-user", namespace: "default" }],
          },
        );
        tokens[c] = env.kubectl(c, ["create", "token", "ops-user", "-n", "default", "--duration=2h"]).stdout.trim();
        assert.ok(tokens[c], `a token for ${c}`);
      }
    },
    { timeout: 20 * 60_000 },
  );

  after(async () => {
    for (const c of children) c.kill("SIGKILL");
    for (const c of CLUSTERS) await hub?.delete(Resources.managedClusterAddOn, NAME, c).catch(() => undefined);
    await hub?.delete(Resources.service, "cluster-proxy-client-doors", SERVER_NS).catch(() => undefined);
    await hub?.delete(Resources.managedProxyConfiguration, NAME).catch(() => undefined);
    await manager?.stop();
    await hub?.delete(Resources.clusterManagementAddOn, NAME).catch(() => undefined);
    if (hub) await deleteAddonCsrs(hub).catch(() => undefined);
    await hub?.delete(Resources.namespace, MANAGER_NS).catch(() => undefined);
    if (dir) rmSync(dir, { recursive: true, force: true });
    await env?.close();
  });

  test("health lists mc1 and mc2 True/True/True with a latency, in clusteradm's columns", async (t) => {
    // The agents may still be dialling the proxy-server's replica right after Available: poll.
    const { run, items } = await waitFor(
      "health to report every cluster healthy",
      120_000,
      () => {
        const h = health();
        return h.run.status === 0 ? h : undefined;
      },
      2000,
    ).catch((err: Error) => {
      const h = health();
      throw new Error(`${err.message}\n${h.run.stdout}\n${h.run.stderr}`, { cause: err });
    });
    assert.deepEqual(
      items.map((i) => [i.cluster, i.installed, i.available, i.probedHealth]),
      [
        ["mc1", true, "True", true],
        ["mc2", true, "True", true],
      ],
      run.stdout,
    );
    for (const i of items) assert.ok(typeof i.latencyMs === "number" && i.latencyMs >= 0, JSON.stringify(i));
    const [all, wideStep] = transcript("operations-health", 3);
    const table = await typed(all!);
    t.diagnostic(`$ ${all!.command}\n${table.stdout}${table.stderr}`);
    assert.equal(table.status, 0, table.stderr);
    assertShownOutput(all!, table.stdout);
    // No Node warning (DEP0123: a TLS ServerName set to an IP address, the door's LoadBalancer IP).
    for (const r of [run, table]) assert.doesNotMatch(r.stderr, /Warning|DEP\d{4}|ServerName/, r.stderr);
    const wide = await typed(wideStep!);
    t.diagnostic(`$ ${wideStep!.command}\n${wide.stdout}${wide.stderr}`);
    assert.equal(wide.status, 0, wide.stderr);
    assertShownOutput(wideStep!, wide.stdout);
    assert.doesNotMatch(wide.stdout, /^mc1/m, "--cluster filters");
  });

  test("health turns mc1's PROBED HEALTH false, with a reason and exit status 1, while mc1 is cut off", async (t) => {
    env.blackhole("mc1", true);
    try {
      const { run, items } = await waitFor(
        "health to report mc1 unhealthy: its own probe, and the manager's Available",
        120_000,
        () => {
          const h = health();
          const mc1 = h.items.find((i) => i.cluster === "mc1");
          return mc1?.probedHealth === false && mc1.available === "False" ? h : undefined;
        },
        1000,
      );
      assert.equal(run.status, 1, "non-zero exit when a selected cluster is not healthy");
      const mc1 = items.find((i) => i.cluster === "mc1")!;
      assert.match(mc1.reason, /probe through the tunnel: /, JSON.stringify(mc1));
      assert.equal(items.find((i) => i.cluster === "mc2")?.probedHealth, true, "mc2 is not affected");
      const only2 = health("--cluster", "mc2");
      assert.equal(only2.run.status, 0, "only mc2 selected: healthy");
      // The README's line for this situation, with its `echo "exit $?"`.
      const cutOff = transcript("operations-health", 3)[2]!;
      assert.match(cutOff.command, /# mc1 cut off from the hub$/);
      const table = await typed(cutOff);
      t.diagnostic(`$ ${cutOff.command}\n${table.stdout}${table.stderr}`);
      assert.match(table.stdout, /\nexit 1\n$/);
      assertShownOutput(cutOff, table.stdout);
    } finally {
      env.blackhole("mc1", false);
    }
    await waitFor("mc1 healthy again", 180_000, () => health("--cluster", "mc1").run.status === 0, 2000);
  });

  test("the real kubectl with a generated kubeconfig reaches mc1 and mc2 through the hub, TLS verified", async (t) => {
    // mc1 as the README has it, with MC1_TOKEN set to a token of the user's for mc1, as it says.
    const [write, get] = transcript("operations-kubeconfig", 2);
    const wrote = await typed(write!, { MC1_TOKEN: tokens.mc1! });
    t.diagnostic(`$ ${write!.command}\n${wrote.stdout}${wrote.stderr}`);
    assert.equal(wrote.status, 0, wrote.stderr);
    assertShownOutput(write!, wrote.stdout + wrote.stderr);
    const got = await typed(get!);
    t.diagnostic(`$ ${get!.command}\n${got.stdout}${got.stderr}`);
    assert.equal(got.status, 0, got.stderr);
    assertShownOutput(get!, got.stdout);
    // mc2 the same way, by hand; then the same checks for both files.
    const mc2 = cli([
      "kubeconfig",
      hubFlag(),
      "--cluster",
      "mc2",
      "--token",
      tokens.mc2!,
      "--output",
      join(dir, "mc2.kubeconfig"),
    ]);
    assert.equal(mc2.status, 0, mc2.stderr);
    for (const c of CLUSTERS) {
      const file = join(dir, `${c}.kubeconfig`);
      assert.equal(statSync(file).mode & 0o777, 0o600, "mode 0600");
      const text = readFileSync(file, "utf8");
      assert.doesNotMatch(text, /insecure-skip-tls-verify/);
      assert.match(text, new RegExp(`proxy-url: https://${c}:@${DOOR_IP.replace(/\./g, "\\.")}:8093`));
      const ns = labKubectl(file, ["get", "namespaces", "-o", "name"]);
      assert.equal(ns.status, 0, ns.stderr);
      assert.match(ns.stdout, /^namespace\/open-cluster-management-cluster-proxy$/m, ns.stdout);
      const who = labKubectl(file, ["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
      assert.equal(who.stdout, "system:serviceaccount:default:ops-user", `the user's own credentials: ${who.stderr}`);
    }
    // A ManagedServiceAccount's token, as its addon projects it into the hub (Secret <cluster>/<name>).
    await hub.apply(Resources.secret, {
      metadata: { name: "ops-msa", namespace: "mc2" },
      data: { token: Buffer.from(tokens.mc2!).toString("base64") },
    });
    const msaFile = join(dir, "mc2-msa.kubeconfig");
    const msa = cli([
      "kubeconfig",
      hubFlag(),
      "--cluster",
      "mc2",
      "--managed-service-account",
      "ops-msa",
      "-o",
      msaFile,
    ]);
    assert.equal(msa.status, 0, msa.stderr);
    const msaWho = labKubectl(msaFile, ["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert.equal(msaWho.stdout, "system:serviceaccount:default:ops-user", msaWho.stderr);
    await hub.delete(Resources.secret, "ops-msa", "mc2");
    // A user certificate cannot travel through the hub: refused with the reason, not silently dropped.
    const certUser = cli([
      "kubeconfig",
      hubFlag(),
      "--cluster",
      "mc1",
      "--credentials-from",
      env.kubeconfigPath("mc1"),
    ]);
    assert.equal(certUser.status, 2);
    assert.match(certUser.stderr, /authenticates with a client certificate/);
  });

  test("kubectl get --watch through the hub sees an object created during the watch", async () => {
    const file = join(dir, "mc1.kubeconfig");
    const watch = spawnInLab(join(env.state.binDir, "kubectl"), [
      "--kubeconfig",
      file,
      "get",
      "configmaps",
      "-n",
      "default",
      "--watch",
      "-o",
      "name",
    ]);
    await waitFor(
      "the watch's initial list",
      60_000,
      () => /configmap\/kube-root-ca\.crt/.test(watch.out()),
      200,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\nstdout: ${watch.out()}\nstderr: ${watch.err()}`, { cause: err });
    });
    const name = `ops-watch-${Date.now()}`;
    await env
      .core("mc1")
      .createNamespacedConfigMap({ namespace: "default", body: { metadata: { name }, data: { a: "b" } } });
    try {
      await waitFor(
        "the watch to show the new ConfigMap",
        60_000,
        () => watch.out().includes(`configmap/${name}`),
        200,
      );
      assert.equal(watch.child.exitCode, null, "the watch is still running");
    } finally {
      watch.child.kill("SIGTERM");
      await env
        .core("mc1")
        .deleteNamespacedConfigMap({ namespace: "default", name })
        .catch(() => undefined);
    }
  });

  test("port-forward reaches a Service inside mc1, many connections at once, and says why one fails", async (t) => {
    const server = 'require("http").createServer((q,r)=>r.end("hello from "+process.env.POD_NAME+"\\n")).listen(8080)';
    await env.apps("mc1").createNamespacedDeployment({
      namespace: "default",
      body: nodeScriptDeployment({
        name: "ops-web",
        script: server,
        containerName: "web",
        port: 8080,
        portName: "http",
        readiness: true,
      }),
    });
    await env.core("mc1").createNamespacedService({
      namespace: "default",
      body: {
        metadata: { name: "ops-web" },
        spec: { selector: { app: "ops-web" }, ports: [{ port: 80, targetPort: 8080 }] },
      },
    });
    try {
      await waitFor("ops-web ready in mc1", 90_000, async () => {
        const d = await env.apps("mc1").readNamespacedDeployment({ name: "ops-web", namespace: "default" });
        return d.status?.readyReplicas === 1;
      });
      // The README's port-forward line as typed in one terminal, its curl lines in a second one.
      const [forward] = transcript("operations-port-forward", 1);
      const [curlWeb, curlRefused] = transcript("operations-port-forward-use", 2);
      const pf = spawnInLab("bash", ["-c", `exec ${forward!.command}`], {
        PATH: userPath,
        KUBECONFIG: env.kubeconfigPath("hub"),
      });
      const ports = await waitFor(
        "port-forward to listen",
        60_000,
        () => {
          const m = [...pf.out().matchAll(/Forwarding from 127\.0\.0\.1:(\d+) -> (\S+)/g)];
          return m.length === 2 ? Object.fromEntries(m.map((x) => [x[2]!, Number(x[1])])) : undefined;
        },
        200,
      ).catch((err: Error) => {
        throw new Error(`${err.message}\nstdout: ${pf.out()}\nstderr: ${pf.err()}`, { cause: err });
      });
      const web = ports["ops-web.default.svc.mc1:80"]!;
      // 20 requests at once through the forwarded port, from the lab (where port-forward listens).
      const script =
        `const n=20;Promise.all(Array.from({length:n},()=>fetch("http://127.0.0.1:${web}/").then(r=>r.text())))` +
        `.then(a=>console.log(JSON.stringify(a)),e=>{console.log(JSON.stringify(String(e)));process.exit(1)})`;
      const got = env.exec("lab", process.execPath, ["-e", script], { allowFail: true, timeoutMs: 60_000 });
      assert.equal(got.status, 0, `${got.stdout}\n${pf.err()}`);
      const answers = JSON.parse(got.stdout) as string[];
      assert.equal(answers.length, 20);
      for (const a of answers) assert.match(a, /^hello from ops-web-/);
      // The README's curl lines: the Service answers; a connection that cannot be made is
      // reported by the forwarder, which keeps serving.
      const web1 = await typed(curlWeb!);
      t.diagnostic(`$ ${curlWeb!.command}\n${web1.stdout}${web1.stderr}`);
      assert.equal(web1.status, 0, web1.stderr);
      assertShownOutput(curlWeb!, web1.stdout);
      const refused = await typed(curlRefused!);
      t.diagnostic(`$ ${curlRefused!.command}\n${refused.stdout}${refused.stderr}(exit ${refused.status})`);
      assert.notEqual(refused.status, 0);
      assertShownOutput(curlRefused!, refused.stdout + refused.stderr);
      await waitFor(
        "a message for the failed connection",
        60_000,
        () => /to 127\.0\.0\.1\.mc1:1 failed: /.test(pf.err()),
        200,
      );
      t.diagnostic(`$ ${forward!.command}\n${pf.out()}${pf.err()}`);
      assertShownOutput(forward!, pf.out() + pf.err());
      const again = await typed(curlWeb!);
      assert.equal(again.status, 0, again.stderr);
      assertShownOutput(curlWeb!, again.stdout);
      pf.child.kill("SIGTERM");
    } finally {
      await env
        .core("mc1")
        .deleteNamespacedService({ name: "ops-web", namespace: "default" })
        .catch(() => undefined);
      await env
        .apps("mc1")
        .deleteNamespacedDeployment({ name: "ops-web", namespace: "default" })
        .catch(() => undefined);
    }
  });

  describe("kubectl exec, logs -f and port-forward to a pod in mc1 with the generated kubeconfig", () => {
    const APP = "ops-shell";
    const MODES = KUBECTL_STREAMING_MODES;
    // Ticks every 200 ms and serves HTTP on 8080.
    const script =
      'let n=0;setInterval(()=>console.log("tick "+n++),200);' +
      'require("http").createServer((q,r)=>r.end("hello from "+process.env.POD_NAME+"\\n")).listen(8080)';
    let pod = "";
    const file = (): string => join(dir, "mc1.kubeconfig");

    before(async () => {
      await env.apps("mc1").createNamespacedDeployment({
        namespace: "default",
        body: nodeScriptDeployment({ name: APP, script, port: 8080, readiness: true }),
      });
      pod = await waitFor(`a ready ${APP} pod in mc1`, 120_000, async () => {
        const list = await env.core("mc1").listNamespacedPod({ namespace: "default", labelSelector: `app=${APP}` });
        return list.items.find(
          (p) =>
            !p.metadata?.deletionTimestamp &&
            p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"),
        )?.metadata?.name;
      });
      // The generated kubeconfig (written by the kubeconfig test) is used as it is.
      assert.match(readFileSync(file(), "utf8"), /proxy-url: https:\/\/mc1:@/);
    });

    after(async () => {
      await env
        ?.apps("mc1")
        .deleteNamespacedDeployment({ name: APP, namespace: "default" })
        .catch(() => undefined);
    });

    test("kubectl logs -f through the hub shows a line the pod writes during it", async (t) => {
      const started = Date.now();
      const logs = spawnInLab(join(env.state.binDir, "kubectl"), [
        "--kubeconfig",
        file(),
        "logs",
        "-f",
        "--tail=1",
        pod,
      ]);
      try {
        const first = await waitFor("the last line", 60_000, () => /^tick (\d+)$/m.exec(logs.out())?.[1], 50).catch(
          (err: Error) => {
            throw new Error(`${err.message}\nstdout: ${logs.out()}\nstderr: ${logs.err()}`, { cause: err });
          },
        );
        const firstMs = Date.now() - started;
        const next = `tick ${Number(first) + 1}`;
        await waitFor("a line written after the follow began", 10_000, () => logs.out().includes(`${next}\n`), 50);
        t.diagnostic(
          `kubectl logs -f --tail=1 ${pod}: first line after ${firstMs} ms, "${next}" after ${Date.now() - started} ms`,
        );
        assert.equal(logs.child.exitCode, null, "still following");
      } finally {
        logs.child.kill("SIGTERM");
      }
    });

    for (const [mode, kenv] of Object.entries(MODES)) {
      test(`kubectl exec (${mode}) through the hub: output, a non-zero exit status, stdin`, async (t) => {
        const ok = await kubectlAsync(file(), ["exec", pod, "--", "sh", "-c", "echo ok"], { env: kenv });
        t.diagnostic(`kubectl exec ${pod} -- sh -c 'echo ok' (${mode}): exit ${ok.code}, ${ok.ms} ms`);
        assert.equal(ok.code, 0, ok.stderr);
        assert.equal(ok.stdout, "ok\n");
        assert.equal(ok.stderr, "");
        const fail = await kubectlAsync(file(), ["exec", pod, "--", "sh", "-c", "echo bye; exit 7"], { env: kenv });
        t.diagnostic(`kubectl exec ${pod} -- sh -c 'echo bye; exit 7' (${mode}): exit ${fail.code}, ${fail.ms} ms`);
        assert.equal(fail.code, 7, fail.stderr);
        assert.equal(fail.stdout, "bye\n");
        assert.match(fail.stderr, /command terminated with exit code 7/);
        // With stdin, kubectl's SPDY client sometimes loses the exit status (the error stream
        // races the connection's end: 1 in 20 runs straight to mc1's apiserver, 5 in 20 through
        // the hub; kubernetes/kubernetes#73056, fixed by its WebSocket default). The status is
        // proven above on both protocols; over SPDY this checks only what stdin carries.
        const code = mode === "websocket" ? 3 : 0;
        const stdin = await execTolerantOfSpdyLoss(
          mode,
          () =>
            kubectlAsync(
              file(),
              ["exec", "-i", pod, "--", "sh", "-c", `read a; read b; echo got:$a:$b; exit ${code}`],
              {
                env: kenv,
                input: "one\ntwo\n",
              },
            ),
          (r) => r.stdout !== "",
          (m) => t.diagnostic(m),
        );
        t.diagnostic(
          `kubectl exec -i ${pod} -- sh -c 'read a; read b; ...' (${mode}): exit ${stdin.code}, ${stdin.ms} ms`,
        );
        assert.equal(stdin.code, code, stdin.stderr);
        assert.equal(stdin.stdout, "got:one:two\n");
      });

      test(`kubectl port-forward (${mode}) through the hub: a request reaches the pod`, async (t) => {
        const started = Date.now();
        const pf = spawnInLab(
          join(env.state.binDir, "kubectl"),
          ["--kubeconfig", file(), "port-forward", `pod/${pod}`, "0:8080"],
          kenv,
        );
        try {
          const port = await waitFor(
            "Forwarding from",
            60_000,
            () => /127\.0\.0\.1:(\d+) -> 8080/.exec(pf.out())?.[1],
            50,
          ).catch((err: Error) => {
            throw new Error(`${err.message}\nstdout: ${pf.out()}\nstderr: ${pf.err()}`, { cause: err });
          });
          const listening = Date.now() - started;
          for (let i = 0; i < 3; i++) {
            const r0 = Date.now();
            const r = env.exec("lab", "curl", ["-sS", "--max-time", "20", `http://127.0.0.1:${port}/`], {
              allowFail: true,
            });
            assert.equal(r.stdout, `hello from ${pod}\n`, `${r.stderr}\n${pf.err()}`);
            t.diagnostic(
              `port-forward (${mode}): listening after ${listening} ms, request ${i + 1} ${Date.now() - r0} ms`,
            );
          }
          assert.doesNotMatch(pf.err(), /error/i);
        } finally {
          pf.child.kill("SIGTERM");
        }
      });
    }
  });
});
