/**
 * The hub operations from a workstation that has nothing but the hub kubeconfig (issue 40 item 1):
 * the README's bare chart install, then every command of the README's and the hub operations
 * guide's workstation blocks, as written, from the test environment's lab network, which reaches
 * the hub only at its kube-apiserver (no route to the Service network, no exposed door, no cluster
 * DNS). The harness adds no route, hosts entry or port-forward: the CLI finds its way through the
 * hub kube-apiserver (pods/portforward to a Ready proxy-server pod) by itself.
 *
 * - `cluster-proxy health --kubeconfig hub.kubeconfig` lists mc1 and mc2 True True True with a
 *   latency, VIA apiserver; with mc2's tunnel cut (its packets to the hub dropped), mc2 leaves True
 *   within 30 s while mc1 stays;
 * - the real `clusteradm proxy health` (v1.3.1, scripts/clusteradm-binary.mjs) lists mc1 and mc2
 *   True True True with a latency: its SPDY port-forward through the hub kube-apiserver to a
 *   proxy-server pod, its konnectivity client on the gRPC door (verified as 127.0.0.1) and its probe
 *   through the tunnel all work against the chart;
 * - `cluster-proxy port-forward` reaches a Service in mc1;
 * - a tunnel kubeconfig with `cluster-proxy relay` beside it lists mc1's namespaces with the real
 *   kubectl;
 * - `cluster-proxy relay --door gateway` and a gateway kubeconfig for 127.0.0.1:9092: kubectl lists
 *   mc1's namespaces through the gateway as a hub user (the gateway guide's grants);
 * - every example that `health`, `port-forward`, `kubeconfig` and `relay --help` print for a real hub
 *   runs as printed, in the order printed, in a directory holding what the examples name as the
 *   user's own (hub.kubeconfig, a token file, an OIDC kubeconfig, a ManagedServiceAccount's token as
 *   its addon projects it, a Service `web`); the local hub's examples run in first-hour.test.ts.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { KubeApi } from "@cluster-proxy/kube";
import { nsOf, paths } from "../infra/env/config.js";
import { type RunResult, waitFor } from "../infra/env/exec.js";
import { type TestEnv, nodeScriptDeployment, startTestEnv } from "../infra/env/fixture.js";
import { buildClusteradm } from "../infra/env/environment.js";
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
import {
  RELEASE,
  RELEASE_NAMESPACE as NS,
  helmBinary,
  readmeInstallAvailable,
  removeLeftRelease,
} from "../infra/chart.js";

const CLUSTERS = ["mc1", "mc2"] as const;

const transcript = (name: DocBlockName, count: number): TranscriptStep[] => {
  const steps = transcriptSteps(docBlock(name));
  assert.equal(steps.length, count, `the ${DOC_BLOCKS[name].file} ${name} transcript has ${count} commands`);
  return steps;
};

interface HealthItem {
  cluster: string;
  healthy: boolean;
  probedHealth: boolean;
  via: string | null;
  reason: string;
}

describe("from a workstation with only the hub kubeconfig", { timeout: 30 * 60_000 }, () => {
  let env: TestEnv;
  let hub: KubeApi;
  let dir = "";
  let path = "";
  let mc1Token = "";
  const children: ChildProcess[] = [];

  /** A `$` line as the user types it in the lab, in `dir` (which holds hub.kubeconfig). */
  const typed = (command: string, extra: Record<string, string> = {}): Promise<RunResult> =>
    runAsOperator(env, path, command, 120_000, { cwd: dir, env: extra, typed: true });
  /** A long-running `$` line (a trailing `&` dropped: the test runs it in the background). */
  const background = (command: string): { out: () => string; err: () => string } => {
    const child = spawn("ip", ["netns", "exec", nsOf("lab"), "bash", "-c", `exec ${command.replace(/\s*&\s*$/, "")}`], {
      cwd: dir,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, PATH: path },
    });
    children.push(child);
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-20_000)));
    return { out: () => out, err: () => err };
  };

  /** A Service `name` in mc1's default namespace in front of the ops-web pods (port 80). */
  const webService = (name: string): Promise<unknown> =>
    env
      .core("mc1")
      .createNamespacedService({
        namespace: "default",
        body: { metadata: { name }, spec: { selector: { app: "ops-web" }, ports: [{ port: 80, targetPort: 8080 }] } },
      })
      .catch(() => undefined);

  before(
    async () => {
      env = await startTestEnv();
      hub = new KubeApi(env.kubeConfig("hub"));
      dir = mkdtempSync(join(tmpdir(), "cp-workstation-"));
      path = operatorPath(env, dir);
      copyFileSync(env.kubeconfigPath("hub"), join(dir, "hub.kubeconfig"));
      helmBinary();
      // The real clusteradm, on the operator's PATH beside cluster-proxy.
      symlinkSync(buildClusteradm(), join(dir, "bin", "clusteradm"));
      await removeLeftRelease(env, hub);
      for (const c of CLUSTERS) env.hubApiserverOnly(c, true);
      // A user of mc1 (what MC1_TOKEN stands for in the guide) and a Service of theirs.
      env.kubectl("mc1", ["create", "serviceaccount", "ws-user", "-n", "default"], { allowFail: true });
      env.kubectl(
        "mc1",
        ["create", "clusterrolebinding", "ws-user", "--clusterrole=cluster-admin", "--serviceaccount=default:ws-user"],
        { allowFail: true },
      );
      mc1Token = env.kubectl("mc1", ["create", "token", "ws-user", "-n", "default", "--duration=2h"]).stdout.trim();
      const server =
        'require("http").createServer((q,r)=>r.end("hello from "+process.env.POD_NAME+"\\n")).listen(8080)';
      await env
        .apps("mc1")
        .createNamespacedDeployment({
          namespace: "default",
          body: nodeScriptDeployment({
            name: "ops-web",
            script: server,
            containerName: "web",
            port: 8080,
            portName: "http",
            readiness: true,
          }),
        })
        .catch(() => undefined);
      await webService("ops-web");
    },
    { timeout: 90 * 60_000 },
  );

  after(async () => {
    for (const c of children) c.kill("SIGKILL");
    if (env)
      env.exec("lab", paths.helm, ["uninstall", "-n", NS, RELEASE, "--kubeconfig", env.kubeconfigPath("hub")], {
        allowFail: true,
        timeoutMs: 120_000,
      });
    await env
      ?.apps("mc1")
      .deleteNamespacedDeployment({ name: "ops-web", namespace: "default" })
      .catch(() => undefined);
    await env
      ?.core("mc1")
      .deleteNamespacedService({ name: "ops-web", namespace: "default" })
      .catch(() => undefined);
    env?.kubectl("mc1", ["delete", "clusterrolebinding", "ws-user"], { allowFail: true });
    env?.kubectl("mc1", ["delete", "clusterrolebinding/hub-alice-view", "clusterrole/hub-users-view"], {
      allowFail: true,
    });
    env?.kubectl(
      "hub",
      [
        "delete",
        "clusterrolebinding/alice-cluster-proxy-mc1",
        "clusterrole/cluster-proxy-user-mc1",
        "-n",
        "default",
        "sa/alice",
      ],
      { allowFail: true },
    );
    await env
      ?.core("mc1")
      .deleteNamespacedService({ name: "web", namespace: "default" })
      .catch(() => undefined);
    await env
      ?.core("hub")
      .deleteNamespacedSecret({ name: "my-msa", namespace: "mc1" })
      .catch(() => undefined);
    env?.kubectl("mc1", ["delete", "clusterrolebinding/hub-admin-view"], { allowFail: true });
    for (const c of CLUSTERS) env?.blackhole(c, false);
    for (const c of CLUSTERS) env?.hubApiserverOnly(c, false);
    if (dir) rmSync(dir, { recursive: true, force: true });
    await env?.close();
  });

  test("the README's bare chart install: cluster-proxy Available on mc1 and mc2", async () => {
    await readmeInstallAvailable(env, path, CLUSTERS);
  });

  test("health through the hub kube-apiserver: mc1 and mc2 True True True with a latency, VIA apiserver", async (t) => {
    const [readme] = docBlock("workstation-start")
      .split("\n")
      .map((l) => l.replace(/\s+#.*$/, "").trim())
      .filter(Boolean);
    assert.ok(readme);
    const steps = transcript("workstation-health", 2);
    // The tunnels of a fresh install may take a moment to serve every proxy-server.
    let last: RunResult | undefined;
    await waitFor(
      "health to list mc1 and mc2 healthy",
      120_000,
      async () => {
        last = await typed(steps[0]!.command);
        return last.status === 0 || undefined;
      },
      2000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${last?.stdout}\n${last?.stderr}`, { cause: err });
    });
    t.diagnostic(`$ ${steps[0]!.command}\n${last!.stdout}${last!.stderr}`);
    for (const c of CLUSTERS)
      assert.match(last!.stdout, new RegExp(`^${c}\\s+True\\s+True\\s+True\\s+\\d+(?:ms|\\.\\ds)\\s`, "m"));
    assertShownOutput(steps[0]!, last!.stdout);
    const wide = await typed(steps[1]!.command);
    t.diagnostic(`$ ${steps[1]!.command}\n${wide.stdout}${wide.stderr}`);
    assert.equal(wide.status, 0, wide.stderr);
    assertShownOutput(steps[1]!, wide.stdout);
    const fromReadme = await typed(readme);
    t.diagnostic(`$ ${readme}\n${fromReadme.stdout}${fromReadme.stderr}`);
    assert.equal(fromReadme.status, 0, fromReadme.stderr);
    for (const c of CLUSTERS)
      assert.match(
        fromReadme.stdout,
        new RegExp(`^${c}\\s+True\\s+True\\s+True\\s+\\d+(?:ms|\\.\\ds)\\s.*\\sapiserver\\s+-$`, "m"),
      );
    // Forcing the direct way fails as it did before (no route to the Service from here).
    const direct = await typed("cluster-proxy health --kubeconfig hub.kubeconfig --via=direct --timeout=5s");
    assert.notEqual(direct.status, 0);
    assert.match(direct.stdout + direct.stderr, /proxy-entrypoint\.open-cluster-management-addon\.svc/);
    const bad = await typed("cluster-proxy health --kubeconfig hub.kubeconfig --via=tunnel");
    assert.notEqual(bad.status, 0);
    assert.match(bad.stderr, /--via: "tunnel" is not one of auto, apiserver, direct/);
  });

  test("the real clusteradm proxy health lists mc1 and mc2 True True True with a latency", async (t) => {
    const command = "clusteradm proxy health --kubeconfig hub.kubeconfig";
    // clusteradm prints a row per cluster (a Go duration as the latency when the probe answered
    // "ok") and exits 0 even when a probe fails: the rows are what count.
    const row = (c: string): RegExp =>
      new RegExp(`^${c}\\s+True\\s+True\\s+True\\s+\\d+(?:\\.\\d+)?(?:µs|ms|s)\\s*$`, "m");
    let last: RunResult | undefined;
    await waitFor(
      "clusteradm proxy health to list mc1 and mc2 healthy",
      120_000,
      async () => {
        const r = (last = await typed(command));
        return (r.status === 0 && CLUSTERS.every((c) => row(c).test(r.stdout))) || undefined;
      },
      2000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n$ ${command}\n${last?.stdout}\n${last?.stderr}`, { cause: err });
    });
    t.diagnostic(`$ ${command}\n${last!.stdout}${last!.stderr}`);
    assert.match(last!.stdout, /^CLUSTER NAME\s+INSTALLED\s+AVAILABLE\s+PROBED HEALTH\s+LATENCY\s*$/m);
    const version = await typed("clusteradm version");
    assert.match(version.stdout, /^clusteradm\s+version\s*:\s*v1\.3\.1$/m, version.stderr);
  });

  test("with mc2's tunnel cut, mc2 leaves True within 30 s and mc1 stays healthy", async (t) => {
    const command = `${transcript("workstation-health", 2)[0]!.command} -o json --timeout=5s`;
    const items = async (): Promise<HealthItem[]> => {
      const r = await typed(command);
      try {
        return (JSON.parse(r.stdout) as { items: HealthItem[] }).items;
      } catch {
        throw new Error(`not JSON:\n${r.stdout}\n${r.stderr}`);
      }
    };
    env.blackhole("mc2", true);
    try {
      const started = Date.now();
      const seen = await waitFor(
        "mc2 to leave True",
        30_000,
        async () => {
          const at = Date.now() - started;
          const now = await items();
          const mc2 = now.find((i) => i.cluster === "mc2");
          t.diagnostic(
            `health run started ${at} ms after the cut, took ${Date.now() - started - at} ms: mc2 probed ${mc2?.probedHealth}`,
          );
          return mc2?.probedHealth === false ? now : undefined;
        },
        500,
      );
      t.diagnostic(`mc2 left True after ${Date.now() - started} ms: ${JSON.stringify(seen)}`);
      const mc1 = seen.find((i) => i.cluster === "mc1");
      assert.equal(mc1?.healthy, true, JSON.stringify(mc1));
      assert.equal(mc1?.via, "apiserver");
    } finally {
      env.blackhole("mc2", false);
    }
  });

  test("port-forward reaches a Service in mc1 through the hub kube-apiserver", async (t) => {
    await waitFor("ops-web ready in mc1", 90_000, async () => {
      const d = await env.apps("mc1").readNamespacedDeployment({ name: "ops-web", namespace: "default" });
      return d.status?.readyReplicas === 1;
    });
    const [forward, curl] = transcript("workstation-port-forward", 2);
    const pf = background(forward!.command);
    await waitFor(
      "port-forward to listen",
      60_000,
      () => /Forwarding from 127\.0\.0\.1:9080/.test(pf.out()),
      200,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\nstdout: ${pf.out()}\nstderr: ${pf.err()}`, { cause: err });
    });
    assertShownOutput(forward!, pf.out());
    assert.match(pf.err(), /through the hub: apiserver port-forward to open-cluster-management-addon\//);
    const got = await typed(curl!.command);
    t.diagnostic(`$ ${curl!.command}\n${got.stdout}${got.stderr}`);
    assert.equal(got.status, 0, `${got.stderr}\n${pf.err()}`);
    assertShownOutput(curl!, got.stdout);
  });

  test("a tunnel kubeconfig, with cluster-proxy relay beside it, lists mc1's namespaces with the real kubectl", async (t) => {
    const [write, relay, get] = transcript("workstation-kubeconfig", 3);
    const wrote = await typed(write!.command, { MC1_TOKEN: mc1Token });
    t.diagnostic(`$ ${write!.command}\n${wrote.stdout}${wrote.stderr}`);
    assert.equal(wrote.status, 0, wrote.stderr);
    assertShownOutput(write!, wrote.stderr);
    const r = background(relay!.command);
    await waitFor("relay to listen", 60_000, () => /Relaying 127\.0\.0\.1:8093/.test(r.out()), 200).catch(
      (err: Error) => {
        throw new Error(`${err.message}\nstdout: ${r.out()}\nstderr: ${r.err()}`, { cause: err });
      },
    );
    assertShownOutput(relay!, r.out());
    const ns = await typed(get!.command);
    t.diagnostic(`$ ${get!.command}\n${ns.stdout}${ns.stderr}`);
    assert.equal(ns.status, 0, `${ns.stderr}\nrelay: ${r.err()}`);
    assertShownOutput(get!, ns.stdout);
  });

  test("the gateway through the hub kube-apiserver: relay --door gateway and a gateway kubeconfig, as a hub user", async (t) => {
    // The gateway guide's grants: alice may use managedclusters/proxy on mc1 (hub), and
    // cluster:hub:<alice> may read mc1 (mc1's RBAC).
    const grantHub = await runAsOperator(env, path, docBlock("gateway-grant-hub"), 120_000, { cwd: dir });
    assert.equal(grantHub.status, 0, grantHub.stderr);
    const grantMc1 = await runAsOperator(env, path, docBlock("gateway-grant-managed"), 120_000, {
      cwd: dir,
      env: { KUBECONFIG: env.kubeconfigPath("mc1") },
    });
    assert.equal(grantMc1.status, 0, grantMc1.stderr);
    const aliceToken = env.kubectl("hub", ["-n", "default", "create", "token", "alice"]).stdout.trim();
    const [relay, write, get] = transcript("workstation-gateway", 3);
    const r = background(relay!.command);
    await waitFor("the gateway relay to listen", 60_000, () => /Relaying 127\.0\.0\.1:9092/.test(r.out()), 200).catch(
      (err: Error) => {
        throw new Error(`${err.message}\nstdout: ${r.out()}\nstderr: ${r.err()}`, { cause: err });
      },
    );
    assertShownOutput(relay!, r.out());
    const wrote = await typed(write!.command, { ALICE_TOKEN: aliceToken });
    t.diagnostic(`$ ${write!.command}\n${wrote.stdout}${wrote.stderr}`);
    assert.equal(wrote.status, 0, wrote.stderr);
    let ns: RunResult | undefined;
    // The grant on mc1 reaches its RBAC cache within moments.
    await waitFor(
      "kubectl through the gateway to list mc1's namespaces",
      60_000,
      async () => ((ns = await typed(get!.command)).status === 0 ? true : undefined),
      1000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${ns?.stdout}\n${ns?.stderr}\nrelay: ${r.err()}`, { cause: err });
    });
    t.diagnostic(`$ ${get!.command}\n${ns!.stdout}${ns!.stderr}`);
    assertShownOutput(get!, ns!.stdout);
  });

  test("every real-hub example of health, port-forward, kubeconfig and relay --help runs as printed", async (t) => {
    for (const c of children.splice(0)) c.kill("SIGKILL");
    // What the examples name as the user's own: a token of mc1 in mc1.token, an OIDC-style
    // kubeconfig of mc1 in ~/.kube, a ManagedServiceAccount my-msa (its addon projects the token
    // into the hub as Secret mc1/my-msa), and a Service web in mc1's default namespace.
    const home = join(dir, "home");
    mkdirSync(join(home, ".kube"), { recursive: true });
    writeFileSync(join(dir, "mc1.token"), mc1Token);
    writeFileSync(
      join(home, ".kube", "mc1-oidc.kubeconfig"),
      [
        "apiVersion: v1",
        "kind: Config",
        "clusters: [{name: mc1, cluster: {server: 'https://mc1.example:6443'}}]",
        "users: [{name: me, user: {token: " + JSON.stringify(mc1Token) + "}}]",
        "contexts: [{name: mc1, context: {cluster: mc1, user: me}}]",
        "current-context: mc1",
        "",
      ].join("\n"),
      { mode: 0o600 },
    );
    await env
      .core("hub")
      .createNamespacedSecret({
        namespace: "mc1",
        body: { metadata: { name: "my-msa" }, data: { token: Buffer.from(mc1Token).toString("base64") } },
      })
      .catch(() => undefined);
    await webService("web");
    // The gateway guide's grant on the managed side, for the hub kubeconfig's own user.
    const grant = docBlock("gateway-grant-managed")
      .replaceAll("system:serviceaccount:default:alice", "cpenv-admin")
      .replaceAll("hub-alice-view", "hub-admin-view");
    const granted = await runAsOperator(env, path, grant, 120_000, {
      cwd: dir,
      env: { KUBECONFIG: env.kubeconfigPath("mc1") },
    });
    assert.equal(granted.status, 0, granted.stderr);

    const shellEnv = { HOME: home };
    const running: { line: string; out: () => string; err: () => string }[] = [];
    const start = (line: string): { out: () => string; err: () => string } => {
      const command = line.replace(/\s+#\s.*$/, "").replace(/\s*&\s*$/, "");
      const child = spawn("ip", ["netns", "exec", nsOf("lab"), "bash", "-c", `exec ${command}`], {
        cwd: dir,
        stdio: ["ignore", "pipe", "pipe"],
        env: { ...process.env, PATH: path, KUBECONFIG: env.kubeconfigPath("hub"), ...shellEnv },
      });
      children.push(child);
      let out = "";
      let err = "";
      child.stdout.on("data", (d: Buffer) => (out += d.toString()));
      child.stderr.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-20_000)));
      const handle = { line, out: () => out, err: () => err };
      running.push(handle);
      return handle;
    };
    const stopAll = (): void => {
      for (const c of children.splice(0)) c.kill("SIGKILL");
      running.splice(0);
    };
    const examples = async (command: string): Promise<string[]> => {
      const help = await typed(`cluster-proxy ${command} --help`);
      assert.equal(help.status, 0, help.stderr);
      const section = help.stdout.slice(help.stdout.indexOf("\nExamples:\n"));
      return [...section.slice(0, section.indexOf("\n\n", 1)).matchAll(/^ {2}((?:cluster-proxy|kubectl) .+)$/gm)]
        .map((m) => m[1]!)
        .filter((l) => !l.includes('# the local hub of "cluster-proxy up"'));
    };
    const longRunning = (line: string): boolean =>
      /\s&(\s+#.*)?$/.test(line) || /^cluster-proxy (port-forward|relay) /.test(line);
    const runLine = async (line: string): Promise<void> => {
      if (longRunning(line)) {
        const p = start(line);
        await waitFor("it to listen", 60_000, () => /^(Forwarding from|Relaying) /m.test(p.out()), 200).catch(
          (err: Error) => {
            throw new Error(`$ ${line}\n${err.message}\nstdout: ${p.out()}\nstderr: ${p.err()}`, { cause: err });
          },
        );
        t.diagnostic(`$ ${line}\n${p.out()}`);
        return;
      }
      let last: RunResult | undefined;
      // A cluster cut off by an earlier test may take a moment to be healthy again.
      await waitFor(
        "it to succeed",
        90_000,
        async () => ((last = await typed(line, shellEnv)).status === 0 ? true : undefined),
        2000,
      ).catch((err: Error) => {
        const bg = running.map((r) => `${r.line}: ${r.err()}`).join("\n");
        throw new Error(`$ ${line}\n${err.message}\n${last?.stdout}\n${last?.stderr}\n${bg}`, { cause: err });
      });
      t.diagnostic(`$ ${line}\n${last!.stdout}${last!.stderr}`);
    };

    const health = await examples("health");
    assert.equal(health.length, 4, health.join("\n"));
    for (const line of health) await runLine(line);

    const forwards = await examples("port-forward");
    assert.equal(forwards.length, 2, forwards.join("\n"));
    for (const line of forwards) await runLine(line);
    const web = await typed("curl -sS --max-time 20 http://127.0.0.1:8080/");
    assert.match(web.stdout, /^hello from ops-web-/, web.stderr);
    const apiserver = await typed(
      "curl -sk --max-time 20 -o /dev/null -w '%{http_code}' https://127.0.0.1:6443/version",
    );
    assert.match(apiserver.stdout, /^[2-4]\d\d$/, `mc1's kube-apiserver answers on 6443: ${apiserver.stderr}`);
    stopAll();

    const kubeconfigs = await examples("kubeconfig");
    assert.equal(kubeconfigs.length, 9, kubeconfigs.join("\n"));
    for (const line of kubeconfigs) await runLine(line);
    const pods = await typed("kubectl --kubeconfig hub-clusters.kubeconfig --context mc1 get pods");
    assert.match(pods.stdout, /^ops-web-/m, pods.stderr);
    stopAll();

    const relays = await examples("relay");
    assert.equal(relays.length, 4, relays.join("\n"));
    for (const line of relays) await runLine(line);
    stopAll();
  });
});
