/**
 * The gateway's aggregated path end to end on the test environment (issue "From a workstation"),
 * from the lab network with nothing but a hub kubeconfig, after the README's bare chart install:
 * the APIService becomes Available (the addon manager publishes its CA bundle); dave, a hub user
 * with a client-certificate kubeconfig (an authentication the gateway's own port does not know),
 * granted mc1 by hub RBAC the way the gateway guide grants anyone, runs the guide's
 * `gateway-aggregated` block as written and lists mc1's namespaces; mc2 is refused naming
 * `managedclusters/proxy` and `mc2`; exec, logs -f, port-forward (WebSocket and SPDY) and a watch
 * work on mc1; the audit names dave. And as an attacker: identity headers sent to the gateway
 * through the hub apiserver's pod proxy (no front-proxy certificate) are not believed.
 *
 * Creating dave's certificate is the identity provider's part, not the product's: the test signs
 * it with the hub's CA as a kubeadm admin would (`kubeadm kubeconfig user`).
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { loadYaml, dumpYaml } from "@kubernetes/client-node";
import { KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "@cluster-proxy/addon-manager";
import { nsOf } from "../infra/env/config.js";
import { run, waitFor } from "../infra/env/exec.js";
import { Browser, CHROMIUM, chromiumMissing } from "../framework/browser.js";
import { pkiFile } from "../infra/env/pki.js";
import { type TestEnv, nodeScriptDeployment, startTestEnv } from "../infra/env/fixture.js";
import {
  KUBECTL_STREAMING_MODES,
  execTolerantOfSpdyLoss,
  type KubectlStreamingMode,
} from "../infra/env/kubectl-streaming.js";
import { type KubectlDone, KubectlProcess, runKubectl } from "../infra/env/kubectl-process.js";
import { GuideOperator } from "../infra/addon/guide-operator.js";
import { RELEASE, hubHelm, removeLeftRelease } from "../infra/chart.js";
import { docBlock, runAsOperator } from "../infra/addon/readme-install.js";
import { NS, auditRecords, gatewayPods, installChartAndWaitAvailable } from "../infra/gateway/gateway-setup.js";

const CLUSTERS = ["mc1", "mc2"] as const;
const DAVE = "dave";
const API_SERVICE = "v1alpha1.gateway.proxy.open-cluster-management.io";
const APP = "agg-demo";
const HUB_OBJECTS = [
  ["clusterrolebinding", "dave-cluster-proxy-mc1"],
  ["clusterrole", "dave-cluster-proxy-mc1"],
] as const;
const MC1_OBJECTS = [
  ["clusterrolebinding", "hub-dave"],
  ["clusterrole", "hub-dave"],
  ["deployment", APP, "default"],
  ["service", APP, "default"],
] as const;
/** The guide's fleet-view section: what it tells a workstation user to browse and to get. */
const FLEET_SECTION = readFileSync(new URL("../../docs/guides/gateway.md", import.meta.url), "utf8");

const APP_SCRIPT = `
const http = require("node:http");
let n = 0;
setInterval(() => console.log("tick " + n++ + " " + Date.now()), 200);
http.createServer((q, s) => s.end("hello from " + process.env.POD_NAME + " " + q.url + "\\n")).listen(8080);
`;

interface Pod extends KubeObject {
  status?: { podIP?: string; conditions?: { type: string; status: string }[] };
}

describe("the gateway as an aggregated API: a workstation with only a hub kubeconfig", { timeout: 60 * 60_000 }, () => {
  let env: TestEnv;
  let hub: KubeApi;
  let mc1: KubeApi;
  let op: GuideOperator;
  let dir = "";
  let kubectlProxy: ChildProcess | undefined;
  let browser: Browser | undefined;
  const running = new Set<KubectlProcess>();
  const deleteObjects = (cluster: "hub" | "mc1", objects: readonly (readonly string[])[]): void => {
    for (const [kind, name, namespace] of objects)
      env.kubectl(cluster, ["delete", kind!, name!, "--ignore-not-found", ...(namespace ? ["-n", namespace] : [])], {
        allowFail: true,
      });
  };
  /** kubectl as dave through the aggregated path (mc1.kubeconfig of the guide's block). */
  const dave = (args: string[], kenv: Record<string, string> = {}, input?: string): Promise<KubectlDone> =>
    runKubectl(env, join(dir, "mc1.kubeconfig"), ["--request-timeout=60s", ...args], { env: kenv, input, cwd: dir });
  const ok = (r: KubectlDone, what: string): string => {
    assert.equal(r.code, 0, `${what}: exit ${r.code}\n${r.stdout}${r.stderr}`);
    return r.stdout;
  };
  const start = (args: string[], kenv: Record<string, string> = {}): KubectlProcess => {
    const k = new KubectlProcess(env, join(dir, "mc1.kubeconfig"), args, { env: kenv, cwd: dir });
    running.add(k);
    return k;
  };
  const stop = async (k: KubectlProcess): Promise<void> => {
    await k.stop();
    running.delete(k);
  };

  before(
    async () => {
      env = await startTestEnv();
      hub = new KubeApi(env.kubeConfig("hub"));
      mc1 = new KubeApi(env.kubeConfig("mc1"));
      op = GuideOperator.create(env, "cp-aggregated-e2e-");
      dir = op.dir;
      await removeLeftRelease(env, hub);
      deleteObjects("hub", HUB_OBJECTS);
      deleteObjects("mc1", MC1_OBJECTS);
      await env.apps("mc1").createNamespacedDeployment({
        namespace: "default",
        body: nodeScriptDeployment({ name: APP, script: APP_SCRIPT, port: 8080, portName: "http", readiness: true }),
      });
      // dave's hub credentials, from the identity provider (here: the hub CA, as kubeadm would).
      const key = join(dir, "dave.key");
      run("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key]);
      const csr = run("openssl", ["req", "-new", "-key", key, "-subj", `/O=agg-users/CN=${DAVE}`]).stdout;
      writeFileSync(join(dir, "dave.ext"), "extendedKeyUsage=clientAuth\n");
      run(
        "openssl",
        [
          "x509",
          "-req",
          "-CA",
          pkiFile("hub", "ca.crt"),
          "-CAkey",
          pkiFile("hub", "ca.key"),
          "-CAcreateserial",
          "-CAserial",
          join(dir, "ca.srl"),
          "-days",
          "2",
          "-extfile",
          join(dir, "dave.ext"),
          "-out",
          join(dir, "dave.crt"),
        ],
        { input: csr },
      );
      const hubKubeconfig = loadYaml<{ users: { name: string; user: Record<string, unknown> }[] }>(
        readFileSync(env.kubeconfigPath("hub"), "utf8"),
      );
      for (const u of hubKubeconfig.users)
        u.user = {
          "client-certificate-data": readFileSync(join(dir, "dave.crt")).toString("base64"),
          "client-key-data": readFileSync(key).toString("base64"),
        };
      writeFileSync(join(dir, "dave-hub.kubeconfig"), dumpYaml(hubKubeconfig), { mode: 0o600 });
    },
    { timeout: 90 * 60_000 },
  );

  after(async () => {
    for (const k of running) await k.stop();
    await browser?.close();
    if (kubectlProxy?.pid !== undefined) {
      try {
        process.kill(-kubectlProxy.pid, "SIGTERM");
      } catch {
        // already gone
      }
    }
    if (env) {
      hubHelm(env, ["uninstall", "-n", NS, RELEASE], { allowFail: true });
      deleteObjects("hub", HUB_OBJECTS);
      deleteObjects("mc1", MC1_OBJECTS);
    }
    op?.remove();
    await env?.close();
  });

  test("the README's chart install; the APIService becomes Available and the hub lists the group", async () => {
    await installChartAndWaitAvailable(op, CLUSTERS);
    await op.run(
      "the APIService Available",
      `kubectl wait apiservice/${API_SERVICE} --for=condition=Available --timeout=300s`,
    );
    const discovery = await op.run(
      "discovery through the hub",
      "kubectl get --raw /apis/gateway.proxy.open-cluster-management.io/v1alpha1",
    );
    assert.match(discovery, /"clusters\/proxy"/);
  });

  test("dave (a client-certificate hub user, granted mc1 as the guide grants anyone) runs the guide's block: mc1's namespaces", async () => {
    // The hub grant, as in docs/guides/gateway.md ("Grant a hub user one cluster"), for a User.
    await op.run(
      "dave's hub grant of mc1",
      [
        "kubectl create clusterrole dave-cluster-proxy-mc1 --verb=get,list,watch,create,update,patch,delete \\",
        "  --resource=managedclusters.cluster.open-cluster-management.io/proxy --resource-name=mc1",
        "kubectl create clusterrolebinding dave-cluster-proxy-mc1 --clusterrole=dave-cluster-proxy-mc1 --user=dave",
      ].join("\n"),
    );
    // mc1's admin grants cluster:hub:dave what the test uses.
    await op.run(
      "mc1's grant to cluster:hub:dave",
      [
        "kubectl create clusterrole hub-dave --verb=get,list,watch --resource=namespaces,pods,pods/log,configmaps",
        'kubectl patch clusterrole hub-dave --type=json -p \'[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resources":["pods/exec","pods/portforward"],"verbs":["create","get"]}}]\'',
        "kubectl create clusterrolebinding hub-dave --clusterrole=hub-dave --user=cluster:hub:dave",
      ].join("\n"),
      { env: { KUBECONFIG: env.kubeconfigPath("mc1") } },
    );
    const out = await op.run("guide gateway-aggregated (as dave)", docBlock("gateway-aggregated"), {
      env: { KUBECONFIG: join(dir, "dave-hub.kubeconfig") },
    });
    assert.match(out, /^default\s+Active\s/m, out);
    const kc = loadYaml<{ clusters: { cluster: { server: string } }[] }>(
      readFileSync(join(dir, "mc1.kubeconfig"), "utf8"),
    );
    assert.match(
      kc.clusters[0]!.cluster.server,
      /^https:\/\/\S+\/apis\/gateway\.proxy\.open-cluster-management\.io\/v1alpha1\/clusters\/mc1\/proxy$/,
    );
    const who = JSON.parse(ok(await dave(["auth", "whoami", "-o", "json"]), "auth whoami")) as {
      status: { userInfo: { username: string; groups?: string[] } };
    };
    assert.equal(who.status.userInfo.username, "cluster:hub:dave");
    // Each hub group on its own (the hub sends one X-Remote-Group field per group).
    for (const g of ["cluster:hub:agg-users", "cluster:hub:system:authenticated"])
      assert.ok(who.status.userInfo.groups?.includes(g), JSON.stringify(who));
  });

  test("mc2 is refused naming managedclusters/proxy and mc2", async () => {
    await op.run(
      "dave's kubeconfig for mc2",
      "cluster-proxy kubeconfig --gateway --cluster mc2 --output mc2.kubeconfig",
      { env: { KUBECONFIG: join(dir, "dave-hub.kubeconfig") } },
    );
    const denied = await runKubectl(env, join(dir, "mc2.kubeconfig"), ["get", "namespaces"], { cwd: dir });
    assert.notEqual(denied.code, 0, denied.stdout);
    assert.match(denied.stderr, /managedclusters\/proxy/, denied.stderr);
    assert.match(denied.stderr, /\bmc2\b/, denied.stderr);
  });

  test("a watch streams through the aggregated path", async () => {
    const w = start(["-n", "default", "get", "configmap", "-w", "-o", "name"]);
    try {
      await w.until("the initial list", 60_000, () => w.lines.some((l) => l.line === "configmap/kube-root-ca.crt"));
      const name = `agg-watch-${Date.now()}`;
      await env.core("mc1").createNamespacedConfigMap({ namespace: "default", body: { metadata: { name } } });
      await w.until(`configmap/${name}`, 30_000, () => w.lines.find((l) => l.line === `configmap/${name}`));
      await env.core("mc1").deleteNamespacedConfigMap({ name, namespace: "default" });
    } finally {
      await stop(w);
    }
  });

  for (const mode of Object.keys(KUBECTL_STREAMING_MODES) as KubectlStreamingMode[]) {
    const kenv: Record<string, string> = { ...KUBECTL_STREAMING_MODES[mode] };
    test(`exec, logs -f and port-forward through the aggregated path (${mode})`, async (t) => {
      const pod = await waitFor(
        `a ready ${APP} pod in mc1`,
        120_000,
        async () => {
          const p = (
            (await mc1.list(Resources.pod, { namespace: "default", labelSelector: `app=${APP}` })).items as Pod[]
          ).find(
            (x) =>
              !x.metadata.deletionTimestamp &&
              x.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"),
          );
          return p ? { name: p.metadata.name } : undefined;
        },
        1000,
      );
      const stdin = await execTolerantOfSpdyLoss(
        mode,
        () => dave(["exec", "-i", pod.name, "--", "sh", "-c", "read a; echo got:$a"], kenv, "hello\n"),
        (r) => r.stdout !== "",
        (m) => t.diagnostic(m),
      );
      assert.equal(ok(stdin, "exec -i"), "got:hello\n");
      const follow = start(["logs", "-f", "--tail=1", pod.name], kenv);
      try {
        const first = follow.lines.length;
        await follow.until("3 followed tick lines", 60_000, () => follow.lines.length >= first + 3);
      } finally {
        await stop(follow);
      }
      const pf = start(["port-forward", `pod/${pod.name}`, "0:8080"], kenv);
      try {
        const port = await pf.until("Forwarding from", 60_000, () => /127\.0\.0\.1:(\d+) -> 8080/.exec(pf.stdout)?.[1]);
        const r = env.exec("lab", "curl", ["-sS", "--max-time", "20", `http://127.0.0.1:${port}/agg`]);
        assert.equal(r.stdout, `hello from ${pod.name} /agg\n`);
      } finally {
        await stop(pf);
      }
    });
  }

  test("the audit names dave, authenticated by the hub's front proxy", async () => {
    await waitFor(
      "an audit record of dave on mc1",
      60_000,
      async () =>
        auditRecords(env, await gatewayPods(hub)).find(
          (r) => r.user === DAVE && r.cluster === "mc1" && r.authentication === "front-proxy" && r.code === 200,
        ),
      1000,
    );
  });

  test("a Service on the admin's allowlist answers dave through the aggregated path", async () => {
    // The app's owner exposes it in mc1; the hub admin lists it (docs/guides/gateway.md, "Services
    // of a managed cluster, by allowlist").
    env.kubectl("mc1", ["-n", "default", "expose", "deployment", APP, "--port=80", "--target-port=8080"]);
    await op.run(
      "the admin lists the Service",
      [
        "helm upgrade -n open-cluster-management-addon cluster-proxy charts/cluster-proxy --reuse-values -f - <<'YAML'",
        "gateway:",
        "  exposedServices:",
        `    - {clusters: [mc1], namespace: default, service: ${APP}, port: 80, protocol: http}`,
        "YAML",
      ].join("\n"),
    );
    const out = await waitFor(
      "the Service's answer through the aggregated path",
      120_000,
      async () => {
        const r = await dave(["get", "--raw", `/api/v1/namespaces/default/services/http:${APP}:80/proxy-service/svc`]);
        return r.code === 0 ? r.stdout : undefined;
      },
      2000,
    );
    assert.match(out, new RegExp(`^hello from ${APP}-\\S+ /svc`, "m"), out);
    const other = await dave([
      "get",
      "--raw",
      "/api/v1/namespaces/kube-system/services/http:kube-dns:53/proxy-service/",
    ]);
    assert.notEqual(other.code, 0, other.stdout);
    assert.match(other.stderr, /Forbidden|403/, other.stderr);
  });

  test("the fleet view through the hub apiserver (the guide's kubectl proxy): dave sees mc1 only, no token asked", async (t) => {
    const raw = /kubectl get --raw\s+(\/apis\/\S+\/fleet\/api\/clusters)`/.exec(FLEET_SECTION)?.[1];
    const pageUrl = /<(http:\/\/127\.0\.0\.1:8001\/\S+\/fleet\/)>/.exec(FLEET_SECTION)?.[1];
    assert.ok(raw && pageUrl, "the guide names the fleet view's aggregated URLs");
    const asDave = { env: { KUBECONFIG: join(dir, "dave-hub.kubeconfig") } };
    const snapshot = JSON.parse(await op.run("the fleet's JSON (as dave)", `kubectl get --raw ${raw}`, asDave)) as {
      clusters: { cluster: string }[];
    };
    assert.deepEqual(
      snapshot.clusters.map((c) => c.cluster),
      ["mc1"],
    );
    await waitFor(
      "an audit record of dave's fleet request",
      60_000,
      async () =>
        auditRecords(env, await gatewayPods(hub)).find(
          (r) => r.user === DAVE && /\/fleet\/api\/clusters$/.test(String(r.path)),
        ),
      1000,
    );

    // The guide's block, as dave runs it on the workstation (the lab), left running.
    let out = "";
    kubectlProxy = spawn(
      "ip",
      [
        "netns",
        "exec",
        nsOf("lab"),
        "env",
        `PATH=${op.path}`,
        `KUBECONFIG=${join(dir, "dave-hub.kubeconfig")}`,
        "bash",
        "-c",
        docBlock("fleet-aggregated"),
      ],
      { cwd: dir, detached: true, stdio: ["ignore", "pipe", "pipe"] },
    );
    kubectlProxy.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    kubectlProxy.stderr!.on("data", (d: Buffer) => (out += d.toString()));
    await waitFor(`kubectl proxy serving (${out})`, 60_000, () => /Starting to serve/.test(out));
    const page = await runAsOperator(
      env,
      op.path,
      `curl -sS --max-time 30 -o page.html -w '%{http_code}' '${pageUrl}'; cat page.html`,
      60_000,
      { cwd: dir },
    );
    assert.match(page.stdout, /^200[\s\S]*<script/, page.stdout + page.stderr);

    const missing = chromiumMissing();
    if (missing) return t.skip(missing);
    const wrapper = join(dir, "chromium-in-lab");
    writeFileSync(wrapper, `#!/bin/sh\nexec ip netns exec ${nsOf("lab")} ${CHROMIUM} "$@"\n`, { mode: 0o755 });
    browser = await Browser.launch({ executablePath: wrapper });
    const tab = await browser.open(pageUrl);
    await tab.locator('[data-testid="fleet-row"][data-cluster="mc1"]').waitFor({ timeout: 30_000 });
    const rows = tab.locator('[data-testid="fleet-row"]');
    assert.equal(await rows.count(), 1, "dave sees one row");
    assert.equal(await tab.getByTestId("token-form").count(), 0, "no token asked: the hub said who dave is");
    assert.deepEqual(browser.pageErrors(tab), []);
    await browser.screenshot(tab, "gateway-aggregated-fleet");
  });

  test("identity headers sent through the hub's pod proxy (no front-proxy certificate) are not believed", async () => {
    // The operator (hub admin) may use pods/proxy; what reaches the gateway that way carries no
    // front-proxy certificate, so X-Remote-User means nothing there.
    const pod = (await gatewayPods(hub))[0]!;
    const path = `/api/v1/namespaces/${NS}/pods/https:${pod}:9092/proxy/mc1/api/v1/namespaces`;
    const out = await op.run(
      "X-Remote-User through the hub's pod proxy",
      [
        "kubectl config view --raw --minify -o jsonpath='{.users[0].user.client-certificate-data}' | base64 -d > admin.crt",
        "kubectl config view --raw --minify -o jsonpath='{.users[0].user.client-key-data}' | base64 -d > admin.key",
        "kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d > hub-ca.crt",
        "server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')",
        `curl -sS --max-time 30 --cacert hub-ca.crt --cert admin.crt --key admin.key -H 'X-Remote-User: dave' -H 'X-Remote-Group: system:masters' -o body.txt -w '%{http_code}' "$server${path}"`,
        "echo; cat body.txt",
      ].join("\n"),
    );
    assert.match(out, /^401\n/, out);
  });
});
