/**
 * When the hub changes under load (issue "Nothing lost when the hub changes"), on the test
 * environment after the README's bare chart install (entrypoint PortForward: every tunnel runs
 * through the hub kube-apiserver). A hub controller in a pod (the traffic pod, in the release
 * namespace so that it can mount the hub's proxy client Secret) sends, all through:
 *
 * - a GET of mc1's `default` namespace through the gateway every 300 ms, as a ServiceAccount the
 *   hub grants mc1 the way the gateway guide grants anyone (keep-alive connections, 10 s timeout);
 * - the seeds' Go snippet every 500 ms: a new konnectivity-client tunnel through the gRPC door
 *   (Service proxy-entrypoint port 8090, mTLS with Secret proxy-client), client-go with
 *   `cfg.Dial = tunnel.DialContext`, TLS to mc1's kube-apiserver verified against mc1's CA and one
 *   list of mc1's namespaces as a ServiceAccount of mc1 (its token in a kubeconfig, as a hub
 *   controller holds a managed cluster's credentials). It is the test peer `clientgo-tunnel`
 *   (test/infra/k8s/kubernetes/clientgo-tunnel), a Go binary: the process kubelet maps images only
 *   to Node.js, so the pod's script runs it from the environment's binary directory as a child
 *   process (a real controller has it in its image); it runs in the pod's network namespace with
 *   the pod's DNS, the mounted Secrets and no route or hosts entry a user would not have. Killed
 *   after 10 s;
 * - a new tunnel every second on the HTTP CONNECT door (same certificate), inside it TLS to mc1's
 *   kube-apiserver verified against mc1's CA and one `GET /version` (10 s timeout).
 *
 * Each outcome is one JSON line of the pod's log. The faults:
 *
 * 1. the hub kube-apiserver stopped for 20 s: every request during the outage ends within its
 *    timeout (never a hang), a failure with a 503 that says what is wrong: the gateway's (the hub
 *    cannot authorize the request), or the proxy-server's naming mc1 and that no agent of it is
 *    connected (both doors: the CONNECT status, the Go snippet's DIAL_RSP text); within 15 s of the
 *    apiserver being back every path works again and every cluster is Available;
 * 2. kill -9 of one proxy-server, one gateway, one agent replica and the addon manager, one after
 *    the other: only requests in flight on the killed process may fail, each with an error, and
 *    new connections that the Service still sends to the dead pod in the first 3 s (refused or
 *    reset before any answer; at most 3); a dial waiting on a killed agent goes to the cluster's
 *    other agent. Both paths work again within 20 s;
 * 3. `helm upgrade` changing the proxy-servers', agents' and gateways' arguments (every pod
 *    replaced): no request fails, Available stays True, and the client-go style watch through the
 *    gateway (list, watch from its resourceVersion, list and watch again whenever the watch ends
 *    or fails) sees an object created after the upgrade;
 * 4. proxy-servers 3 -> 1 -> 3 and gateways 2 -> 1 -> 2: no request fails, Available stays True.
 *
 * The measured blips are printed (test diagnostics) for docs/guides/install-hub.md.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test, type TestContext } from "node:test";
import { KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "@cluster-proxy/addon-manager";
import { MANAGED, paths, type ClusterName } from "../infra/env/config.js";
import { startApiserverAgain, stopApiserver } from "../infra/env/environment.js";
import { waitFor } from "../infra/env/exec.js";
import { type TestEnv, nodeScriptDeployment, startTestEnv } from "../infra/env/fixture.js";
import { pkiFile } from "../infra/env/pki.js";
import { GuideOperator } from "../infra/addon/guide-operator.js";
import { AGENT_NAMESPACE, RELEASE, addonAvailability, hubHelm, removeLeftRelease } from "../infra/chart.js";
import { GATEWAY, NS, installChartAndWaitAvailable } from "../infra/gateway/gateway-setup.js";

const TRAFFIC = "fault-traffic";
const HUB_OBJECTS = [
  ["deployment", TRAFFIC, NS],
  ["serviceaccount", TRAFFIC, NS],
  ["secret", `${TRAFFIC}-mc1-ca`, NS],
  ["secret", `${TRAFFIC}-mc1-user`, NS],
  ["clusterrole", `${TRAFFIC}-mc1`],
  ["clusterrolebinding", `${TRAFFIC}-mc1`],
] as const;
const MC1_BINDING = `hub-${TRAFFIC}`;
const PROXY_SERVER_SELECTOR = "proxy.open-cluster-management.io/component-name=proxy-server";
const GATEWAY_SELECTOR = "app.kubernetes.io/name=cluster-proxy,app.kubernetes.io/component=gateway";
/** How long a request may take before the client gives up (the traffic script's timeouts). */
const REQUEST_TIMEOUT_MS = 10_000;
/** How long after a kill -9 a new connection may still reach the dead pod through its Service. */
const DEAD_ENDPOINT_MS = 3_000;
/** The traffic pod stops by itself after this long (every loop bounded). */
const TRAFFIC_LIFETIME_MS = 50 * 60_000;

const TRAFFIC_SCRIPT = `
const https = require("node:https"), tls = require("node:tls"), fs = require("node:fs");
const { execFile } = require("node:child_process");
const SA = "/var/run/secrets/kubernetes.io/serviceaccount/";
const NS = ${JSON.stringify(NS)};
const GW = ${JSON.stringify(GATEWAY)} + "." + NS + ".svc";
const DOOR = "proxy-entrypoint." + NS + ".svc";
const TIMEOUT = ${REQUEST_TIMEOUT_MS};
const read = (f) => fs.readFileSync(f);
const agent = new https.Agent({ keepAlive: true, maxSockets: 4 });
const out = (r) => console.log(JSON.stringify(r));
function gw() {
  const t0 = Date.now();
  let done = false;
  const fin = (r) => { if (!done) { done = true; out({ k: "gw", t0, ms: Date.now() - t0, ...r }); } };
  const req = https.get({ host: GW, port: 9092, path: "/mc1/api/v1/namespaces/default", agent, ca: read("/gw/ca.crt"),
    headers: { authorization: "Bearer " + fs.readFileSync(SA + "token", "utf8").trim() } }, (res) => {
    let body = "";
    res.on("data", (c) => { if (body.length < 300) body += c; });
    res.on("end", () => fin(res.statusCode === 200 ? { status: 200 } : { status: res.statusCode, err: body.slice(0, 300) }));
    res.on("error", (e) => fin({ err: e.message }));
  });
  req.setTimeout(TIMEOUT, () => req.destroy(new Error("no answer within " + TIMEOUT + " ms")));
  req.on("error", (e) => fin({ err: e.message }));
}
function tunnel() {
  const t0 = Date.now();
  let done = false;
  const s = tls.connect({ host: DOOR, port: 8093, servername: DOOR, ca: read("/server-ca/ca.crt"),
    cert: read("/client/tls.crt"), key: read("/client/tls.key") },
    () => s.write("CONNECT mc1:443 HTTP/1.1\\r\\nHost: mc1:443\\r\\n\\r\\n"));
  const fin = (r) => { if (!done) { done = true; clearTimeout(timer); out({ k: "tunnel", t0, ms: Date.now() - t0, ...r }); s.destroy(); } };
  const timer = setTimeout(() => fin({ err: "no answer within " + TIMEOUT + " ms" }), TIMEOUT);
  let head = "";
  const onHead = (c) => {
    head += c.toString("latin1");
    const end = head.indexOf("\\r\\n\\r\\n");
    if (end < 0) return;
    s.off("data", onHead);
    const status = Number(head.split(" ")[1]);
    if (status !== 200) return fin({ status, err: head.slice(0, 200) });
    const inner = tls.connect({ socket: s, servername: "kubernetes.default.svc", ca: read("/mc1-ca/ca.crt") },
      () => inner.write("GET /version HTTP/1.1\\r\\nHost: mc1\\r\\nConnection: close\\r\\n\\r\\n"));
    let resp = "";
    inner.on("data", (d) => { resp += d; });
    inner.on("end", () => fin(resp.startsWith("HTTP/1.1 200") ? { status: 200 } : { status: Number(resp.split(" ")[1]) || 0, err: resp.slice(0, 200) || "no answer" }));
    inner.on("error", (e) => fin({ err: "inside the tunnel: " + e.message }));
  };
  s.on("data", onHead);
  s.on("error", (e) => fin({ err: e.message }));
  s.on("close", () => fin({ err: "connection closed" }));
}
// The seeds' Go snippet: a new konnectivity tunnel (gRPC door), client-go through it, one list.
function goTunnel() {
  const t0 = Date.now();
  execFile(process.env.CLIENTGO_TUNNEL, [DOOR + ":8090", DOOR, "/gotls", "mc1", "/mc1-ca/ca.crt", "/mc1-user/kubeconfig"],
    { timeout: TIMEOUT, killSignal: "SIGKILL", maxBuffer: 1 << 20 }, (e, stdout, stderr) => {
    const ms = Date.now() - t0;
    let r = {};
    try { r = JSON.parse(String(stdout).trim().split("\\n").pop() || "{}"); } catch {}
    if (r.ok) return out({ k: "go", t0, ms, status: 200 });
    const why = r.error || (e && e.killed ? "no answer within " + TIMEOUT + " ms" : ((e && e.message) || "no output") + " " + String(stderr).slice(0, 200));
    out({ k: "go", t0, ms, err: why });
  });
}
// A client-go style watch of mc1's ConfigMaps in default through the gateway: list, watch from the
// list's resourceVersion, list again whenever the watch ends or fails.
function watch() {
  const headers = { authorization: "Bearer " + fs.readFileSync(SA + "token", "utf8").trim() };
  let over = false;
  const again = (err) => { if (over) return; over = true; out({ k: "watch-end", t0: Date.now(), err }); setTimeout(watch, 1000); };
  const step = (t0, what, res) => out({ k: "watch-step", t0, ms: Date.now() - t0, status: res.statusCode,
    err: what + " (local port " + (res.socket && res.socket.localPort) + ")" });
  const base = { host: GW, port: 9092, ca: read("/gw/ca.crt"), headers };
  const t0 = Date.now();
  const list = https.get({ ...base, path: "/mc1/api/v1/namespaces/default/configmaps" }, (res) => {
    let body = "";
    res.on("data", (c) => { body += c; });
    res.on("error", (e) => again("list: " + e.message));
    res.on("end", () => {
      step(t0, "list", res);
      if (res.statusCode !== 200) return again("list " + res.statusCode);
      const rv = JSON.parse(body).metadata.resourceVersion;
      // As client-go's reflector: the server ends the watch after 5 to 10 minutes.
      const timeoutSeconds = 300 + Math.floor(Math.random() * 300);
      const t1 = Date.now();
      const w = https.get({ ...base, path: "/mc1/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=" + rv + "&timeoutSeconds=" + timeoutSeconds }, (wres) => {
        w.setTimeout(0);
        step(t1, "watch", wres);
        if (wres.statusCode !== 200) { wres.resume(); return again("watch " + wres.statusCode); }
        let buf = "";
        wres.on("data", (c) => {
          buf += c;
          for (let i = buf.indexOf("\\n"); i >= 0; i = buf.indexOf("\\n")) {
            const line = buf.slice(0, i); buf = buf.slice(i + 1);
            try { const e = JSON.parse(line); out({ k: "watch", t0: Date.now(), type: e.type, name: e.object && e.object.metadata && e.object.metadata.name }); } catch {}
          }
        });
        wres.on("end", () => again("watch ended"));
        wres.on("error", (e) => again("watch: " + e.message));
        wres.on("close", () => again("watch closed"));
      });
      // No answer (head) within the request timeout: give up and list again.
      w.setTimeout(TIMEOUT, () => w.destroy(new Error("no watch answer within " + TIMEOUT + " ms")));
      w.on("error", (e) => again("watch: " + e.message));
    });
  });
  list.setTimeout(TIMEOUT, () => list.destroy(new Error("no list answer within " + TIMEOUT + " ms")));
  list.on("error", (e) => again("list: " + e.message));
}
watch();
const a = setInterval(gw, 300), b = setInterval(goTunnel, 500), c = setInterval(tunnel, 1000);
setTimeout(() => { clearInterval(a); clearInterval(b); clearInterval(c); setTimeout(() => process.exit(0), TIMEOUT + 1000); }, ${TRAFFIC_LIFETIME_MS});
require("node:http").createServer((q, r) => r.end("ok")).listen(8080);
`;

/** The request loops: the gateway, the Go snippet's gRPC tunnels, the CONNECT tunnels. */
const KINDS = ["gw", "go", "tunnel"] as const;
type Kind = (typeof KINDS)[number];

/**
 * One line of the traffic pod: a request's outcome (`gw`, `go`, `tunnel`) or the watch's
 * (`watch`: an event, `watch-end`, `watch-step`: a list or watch request's answer).
 */
interface Outcome {
  k: Kind | "watch" | "watch-end" | "watch-step";
  type?: string;
  name?: string;
  t0: number;
  ms: number;
  status?: number;
  err?: string;
}

interface Pod extends KubeObject {
  status?: { phase?: string };
}

/** The process ID of `pod`'s first container, from the process kubelet's pod.json. */
function containerPid(cluster: ClusterName, namespace: string, pod: string): number {
  const info = JSON.parse(
    readFileSync(join(paths.data, cluster, "kubelet", `${namespace}_${pod}`, "pod.json"), "utf8"),
  ) as {
    containers: { pid: number }[];
  };
  const pid = info.containers[0]?.pid ?? 0;
  assert.ok(pid > 1, `${cluster} ${namespace}/${pod} has no running container`);
  return pid;
}

const ok = (o: Outcome): boolean => o.status === 200 && o.err === undefined;
const describeOutcome = (o: Outcome): string =>
  `${o.k} at +${o.t0} ${o.ms} ms: ${o.status ?? "-"} ${o.err ?? ""}`.trim();

describe("the hub changes under load: apiserver restart, kill -9", { timeout: 60 * 60_000 }, () => {
  let env: TestEnv;
  let hub: KubeApi;
  let op: GuideOperator;
  const blips: string[] = [];
  const killedFailures: string[] = [];

  const deleteObjects = (): void => {
    for (const [kind, name, namespace] of HUB_OBJECTS)
      env.kubectl("hub", ["delete", kind, name, "--ignore-not-found", ...(namespace ? ["-n", namespace] : [])], {
        allowFail: true,
      });
    env.kubectl("mc1", ["delete", "clusterrolebinding", MC1_BINDING, "--ignore-not-found"], { allowFail: true });
  };

  /** Every line the traffic pod logged (all its containers' runs). */
  const lines = (): Outcome[] =>
    env
      .kubectl("hub", ["-n", NS, "logs", `deploy/${TRAFFIC}`, "--tail=-1"])
      .stdout.split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as Outcome);
  /** The requests' outcomes. */
  const outcomes = (): Outcome[] => lines().filter((o) => KINDS.some((k) => k === o.k));

  /** Waits until every path has worked for `what` (a request of each kind that started after `since`). */
  const bothWork = (what: string, since: number, timeoutMs: number): Promise<number> =>
    waitFor(
      what,
      timeoutMs,
      () => {
        const after = outcomes().filter((o) => o.t0 >= since && ok(o));
        const firsts = KINDS.map((k) => after.find((o) => o.k === k));
        return firsts.every((o) => o !== undefined) ? Math.max(...firsts.map((o) => (o ? o.t0 + o.ms : 0))) : undefined;
      },
      1000,
    );

  const podsOf = async (api: KubeApi, namespace: string, selector: string): Promise<string[]> =>
    ((await api.list(Resources.pod, { namespace, labelSelector: selector })).items as Pod[])
      .filter((p) => p.status?.phase === "Running" && !p.metadata.deletionTimestamp)
      .map((p) => p.metadata.name)
      .sort();

  before(
    async () => {
      env = await startTestEnv();
      hub = new KubeApi(env.kubeConfig("hub"));
      op = GuideOperator.create(env, "cp-hub-faults-");
      await removeLeftRelease(env, hub);
      deleteObjects();
    },
    { timeout: 30 * 60_000 },
  );

  after(async () => {
    if (env) {
      deleteObjects();
      hubHelm(env, ["uninstall", "-n", NS, RELEASE], { allowFail: true });
    }
    op?.remove();
    await env?.close();
  });

  test("the README's chart install, and a hub controller's traffic through the gateway and new tunnels", async () => {
    await installChartAndWaitAvailable(op, MANAGED);
    // The controller's identity and grants, as the gateway guide grants anyone (hub: mc1's
    // managedclusters/proxy; mc1: read access for cluster:hub:<it>).
    env.kubectl("hub", ["-n", NS, "create", "serviceaccount", TRAFFIC]);
    env.kubectl("hub", [
      "create",
      "clusterrole",
      `${TRAFFIC}-mc1`,
      "--verb=get",
      "--resource=managedclusters.cluster.open-cluster-management.io/proxy",
      "--resource-name=mc1",
    ]);
    env.kubectl("hub", [
      "create",
      "clusterrolebinding",
      `${TRAFFIC}-mc1`,
      `--clusterrole=${TRAFFIC}-mc1`,
      `--serviceaccount=${NS}:${TRAFFIC}`,
    ]);
    env.kubectl("mc1", [
      "create",
      "clusterrolebinding",
      MC1_BINDING,
      "--clusterrole=view",
      `--user=cluster:hub:system:serviceaccount:${NS}:${TRAFFIC}`,
      // The Go snippet's own identity on mc1 (a ServiceAccount there, its token on the hub).
      `--serviceaccount=default:${TRAFFIC}`,
    ]);
    env.kubectl("mc1", ["-n", "default", "create", "serviceaccount", TRAFFIC]);
    const token = env.kubectl("mc1", ["-n", "default", "create", "token", TRAFFIC, "--duration=2h"]).stdout.trim();
    const kubeconfig = [
      "apiVersion: v1",
      "kind: Config",
      "clusters: [{name: mc1, cluster: {server: 'https://mc1:443'}}]",
      `users: [{name: ${TRAFFIC}, user: {token: '${token}'}}]`,
      `contexts: [{name: mc1, context: {cluster: mc1, user: ${TRAFFIC}}}]`,
      "current-context: mc1",
      "",
    ].join("\n");
    await env.core("hub").createNamespacedSecret({
      namespace: NS,
      body: { metadata: { name: `${TRAFFIC}-mc1-user` }, stringData: { kubeconfig } },
    });
    // mc1's CA, as a hub controller has it (the ManagedCluster's caBundle).
    env.kubectl("hub", [
      "-n",
      NS,
      "create",
      "secret",
      "generic",
      `${TRAFFIC}-mc1-ca`,
      `--from-file=ca.crt=${pkiFile("mc1", "ca.crt")}`,
    ]);
    const d = nodeScriptDeployment({
      name: TRAFFIC,
      script: TRAFFIC_SCRIPT,
      port: 8080,
      readiness: true,
      env: [{ name: "CLIENTGO_TUNNEL", value: join(env.state.binDir, "clientgo-tunnel") }],
    });
    const spec = d.spec!.template.spec!;
    spec.serviceAccountName = TRAFFIC;
    const mounts = [
      ["gw", "cluster-proxy-gateway-serving"],
      ["server-ca", "proxy-server-ca"],
      ["client", "proxy-client"],
      ["mc1-ca", `${TRAFFIC}-mc1-ca`],
      ["mc1-user", `${TRAFFIC}-mc1-user`],
    ] as const;
    spec.volumes = [
      ...mounts.map(([name, secretName]) => ({ name, secret: { secretName } })),
      // The Go snippet reads ca.crt, tls.crt and tls.key from one directory.
      {
        name: "gotls",
        projected: {
          sources: [
            {
              secret: {
                name: "proxy-client",
                items: [
                  { key: "tls.crt", path: "tls.crt" },
                  { key: "tls.key", path: "tls.key" },
                ],
              },
            },
            { secret: { name: "proxy-server-ca", items: [{ key: "ca.crt", path: "ca.crt" }] } },
          ],
        },
      },
    ];
    spec.containers[0]!.volumeMounts = [...mounts.map(([name]) => name), "gotls"].map((name) => ({
      name,
      mountPath: `/${name}`,
      readOnly: true,
    }));
    await env.apps("hub").createNamespacedDeployment({ namespace: NS, body: d });
    await bothWork("the traffic pod's first gateway request, Go snippet and CONNECT tunnel", 0, 180_000);
  });

  test("the hub kube-apiserver stopped for 20 s: no hang, a clear error, back within 15 s", async (t: TestContext) => {
    const stopped = Date.now();
    await stopApiserver("hub");
    await new Promise((r) => setTimeout(r, 20_000));
    await startApiserverAgain("hub");
    const back = Date.now();
    const recovered = await bothWork("both paths after the apiserver is back", back, 120_000);
    await waitFor(
      "every cluster Available",
      120_000,
      () => MANAGED.every((c) => addonAvailability(env)[c]?.status === "True"),
      1000,
    );
    const availableAt = Date.now();
    const during = outcomes().filter((o) => o.t0 >= stopped && o.t0 < back);
    const failed = during.filter((o) => !ok(o));
    const afterBack = outcomes().filter((o) => o.t0 >= back && ok(o));
    const backPer = KINDS.map((k) => {
      const first = afterBack.find((o) => o.k === k);
      return `${k} ${first ? ((first.t0 + first.ms - back) / 1000).toFixed(1) : "-"} s`;
    }).join(", ");
    const blip = `hub apiserver stopped 20 s: ${failed.length} of ${during.length} requests failed during the outage; every path back ${((recovered - back) / 1000).toFixed(1)} s (${backPer}) and every cluster Available ${((availableAt - back) / 1000).toFixed(1)} s after it was ready`;
    blips.push(blip);
    t.diagnostic(blip);
    for (const kind of KINDS) {
      const samples = failed.filter((o) => o.k === kind).slice(0, 3);
      for (const o of samples) t.diagnostic(describeOutcome({ ...o, t0: o.t0 - stopped }));
    }
    // No hang: every request of the outage ended within its timeout (and a little); each failure is
    // a 503 saying what is wrong: the gateway's, or the proxy-server's naming the cluster.
    const clear503: Record<Kind, (o: Outcome) => boolean> = {
      gw: (o) => o.status === 503 && (o.err ?? "").length > 0,
      tunnel: (o) => o.status === 503 && /No agent available for cluster mc1/.test(o.err ?? ""),
      go: (o) => /no agent of cluster mc1 is connected|No agent available for cluster mc1/.test(o.err ?? ""),
    };
    const unclear: string[] = [];
    const late: string[] = [];
    for (const o of during) {
      const seen = describeOutcome({ ...o, t0: o.t0 - stopped });
      if (o.ms > REQUEST_TIMEOUT_MS + 2_000) late.push(seen);
      const clear = KINDS.find((k) => k === o.k);
      if (!ok(o) && !(clear && clear503[clear](o))) unclear.push(seen);
    }
    assert.deepEqual({ unclear, late }, { unclear: [], late: [] }, "every failure a clear 503, every answer in time");
    assert.ok(recovered - back <= 15_000, blip);
    assert.ok(availableAt - back <= 15_000 + 10_000, blip);
  });

  test("kill -9 of a proxy-server, a gateway, an agent replica and the addon manager: only what was in flight, and new connections to the dead pod", async (t: TestContext) => {
    const targets: { what: string; cluster: ClusterName; namespace: string; selector: string }[] = [
      {
        what: "a proxy-server",
        cluster: "hub",
        namespace: NS,
        selector: PROXY_SERVER_SELECTOR,
      },
      {
        what: "a gateway",
        cluster: "hub",
        namespace: NS,
        selector: GATEWAY_SELECTOR,
      },
      { what: "an agent replica of mc1", cluster: "mc1", namespace: AGENT_NAMESPACE, selector: "" },
      {
        what: "the addon manager",
        cluster: "hub",
        namespace: NS,
        selector: "app.kubernetes.io/name=cluster-proxy,app.kubernetes.io/component=addon-manager",
      },
    ];
    for (const target of targets) {
      const api = new KubeApi(env.kubeConfig(target.cluster));
      const pods = await podsOf(api, target.namespace, target.selector);
      assert.ok(pods.length > 0, `no running pod for ${target.what} (${target.selector})`);
      const pid = containerPid(target.cluster, target.namespace, pods[0]!);
      const killed = Date.now();
      process.kill(pid, "SIGKILL");
      const recovered = await bothWork(`both paths after killing ${target.what}`, killed + 5_000, 120_000);
      // Every request of the window has ended (or timed out) before it is counted.
      const windowEnd = killed + 20_000;
      await new Promise((r) => setTimeout(r, Math.max(0, windowEnd + REQUEST_TIMEOUT_MS + 2_000 - Date.now())));
      const window = outcomes().filter((o) => o.t0 < windowEnd && o.t0 + o.ms >= killed);
      const failed = window.filter((o) => !ok(o));
      const inFlight = (o: Outcome): boolean => o.t0 < killed;
      // A new connection to the killed pod before its endpoint is gone (the Service still lists
      // it for a moment, as a real cluster's does): refused or reset before any answer.
      const toDeadEndpoint = (o: Outcome): boolean =>
        o.t0 < killed + DEAD_ENDPOINT_MS &&
        o.status === undefined &&
        /ECONNREFUSED|ECONNRESET|socket hang up|connection refused|connection reset by peer/.test(o.err ?? "");
      const blip = `kill -9 of ${target.what} (${pods[0]}): ${failed.length} of ${window.length} requests failed (${failed.filter(inFlight).length} in flight at the kill); both paths working ${((recovered - killed) / 1000).toFixed(1)} s after`;
      blips.push(blip);
      t.diagnostic(blip);
      for (const o of failed.slice(0, 4)) t.diagnostic(describeOutcome({ ...o, t0: o.t0 - killed }));
      for (const o of failed) assert.ok((o.err ?? "").length > 0, describeOutcome(o));
      const refused = failed.filter((o) => !inFlight(o) && toDeadEndpoint(o));
      assert.ok(refused.length <= 3, `${target.what}: ${refused.length} new connections refused by the killed pod`);
      killedFailures.push(
        ...failed
          .filter((o) => !inFlight(o) && !toDeadEndpoint(o))
          .map((o) => `${target.what}: ${describeOutcome({ ...o, t0: o.t0 - killed })}`),
      );
    }
    // Only what was in flight on the killed process may fail (and new connections to it before
    // its endpoint is gone, counted above).
    assert.deepEqual(killedFailures, []);
  });

  /**
   * Runs `change` (which resolves once it is complete) under the traffic, with Available polled
   * every 2 s; then asserts that no request that started meanwhile failed and Available stayed True.
   */
  const withoutLoss = async (t: TestContext, what: string, change: () => Promise<void>): Promise<void> => {
    const started = Date.now();
    let unavailable = "";
    const poll = setInterval(() => {
      for (const [c, cond] of Object.entries(addonAvailability(env)))
        if (cond?.status !== "True") unavailable ||= `${c} ${cond?.status} ${cond?.message ?? ""}`;
    }, 2_000);
    try {
      await change();
    } finally {
      clearInterval(poll);
    }
    const done = Date.now();
    // Every request of the change has ended (or timed out) before it is counted.
    await new Promise((r) => setTimeout(r, REQUEST_TIMEOUT_MS + 2_000));
    const window = outcomes().filter((o) => o.t0 >= started && o.t0 < done);
    const failed = window.filter((o) => !ok(o));
    const watchEnds = lines().filter((o) => o.k === "watch-end" && o.t0 >= started && o.t0 < done).length;
    const blip = `${what} (done in ${((done - started) / 1000).toFixed(0)} s): ${failed.length} of ${window.length} requests failed; Available ${unavailable ? `left True: ${unavailable}` : "stayed True"}; the watch ended ${watchEnds} times`;
    blips.push(blip);
    t.diagnostic(blip);
    for (const o of failed.slice(0, 6)) t.diagnostic(describeOutcome({ ...o, t0: o.t0 - started }));
    assert.deepEqual(
      failed.map((o) => describeOutcome({ ...o, t0: o.t0 - started })),
      [],
    );
    assert.equal(unavailable, "");
  };

  /** Running pods of `selector`, none being deleted, all matching `each`. */
  const podsAre = async (
    api: KubeApi,
    namespace: string,
    selector: string,
    count: number | undefined,
    each: (args: string[]) => boolean = () => true,
  ): Promise<boolean> => {
    const pods = (
      (await api.list(Resources.pod, { namespace, labelSelector: selector })).items as (Pod & {
        spec: { containers: { args?: string[] }[] };
      })[]
    ).filter((p) => !p.metadata.deletionTimestamp);
    return (
      (count === undefined ? pods.length > 0 : pods.length === count) &&
      pods.every((p) => each(p.spec.containers[0]?.args ?? []))
    );
  };

  /** Each component's pods (not being deleted) and whether `rolled` holds for their arguments: for a timeout's message. */
  const rollState = async (rolled: (args: string[]) => boolean): Promise<string> => {
    const parts: string[] = [];
    for (const [cluster, namespace, selector] of [
      ["hub", NS, PROXY_SERVER_SELECTOR],
      ["hub", NS, GATEWAY_SELECTOR],
      ["mc1", AGENT_NAMESPACE, ""],
      ["mc2", AGENT_NAMESPACE, ""],
    ] as const) {
      const pods = (
        await new KubeApi(env.kubeConfig(cluster)).list(Resources.pod, { namespace, labelSelector: selector })
      ).items as (Pod & { spec: { containers: { args?: string[] }[] } })[];
      parts.push(
        `${cluster} ${selector || namespace}: ` +
          pods
            .map(
              (p) =>
                `${p.metadata.name} ${p.status?.phase ?? "?"}${p.metadata.deletionTimestamp ? " deleting" : ""} ${rolled(p.spec.containers[0]?.args ?? []) ? "new" : "old"}`,
            )
            .join(", "),
      );
    }
    return parts.join("; ");
  };

  test("helm upgrade changing the proxy-servers', agents' and gateways' arguments: no failed request, Available throughout, the watch goes on", async (t: TestContext) => {
    let upgradeStarted = 0;
    await withoutLoss(t, "helm upgrade of every component", async () => {
      upgradeStarted = Date.now();
      await op.run(
        "helm upgrade with new arguments",
        [
          "helm upgrade -n open-cluster-management-addon cluster-proxy charts/cluster-proxy --reuse-values \\",
          "  --set 'proxyServer.additionalArgs={--log-level=info}' --set 'proxyAgent.additionalArgs={--log-level=info}' \\",
          "  --set 'gateway.additionalArgs={--log-level=info}'",
        ].join("\n"),
      );
      // Every component rolled: the new arguments are in every running pod of each.
      const rolled = (args: string[]): boolean => args.includes("--log-level=info");
      await waitFor(
        "every proxy-server, gateway and agent pod with the new arguments",
        300_000,
        async () =>
          (await podsAre(hub, NS, PROXY_SERVER_SELECTOR, undefined, rolled)) &&
          (await podsAre(hub, NS, GATEWAY_SELECTOR, undefined, rolled)) &&
          (await podsAre(new KubeApi(env.kubeConfig("mc1")), AGENT_NAMESPACE, "", undefined, rolled)) &&
          (await podsAre(new KubeApi(env.kubeConfig("mc2")), AGENT_NAMESPACE, "", undefined, rolled)),
        2_000,
      ).catch(async (err: Error) => {
        throw new Error(`${err.message}\n${await rollState(rolled)}`, { cause: err });
      });
    });
    // The watch went on (client-go style: a watch that ends or fails is listed and watched again):
    // it sees an object created after the upgrade, as an event.
    await watchSeesNewObject(t, upgradeStarted);
  });

  /** The client-go style watch through the gateway sees an object created now, as an event. */
  async function watchSeesNewObject(t: TestContext, upgradeStarted: number): Promise<void> {
    const name = `after-upgrade-${Date.now()}`;
    const created = Date.now();
    await env.core("mc1").createNamespacedConfigMap({ namespace: "default", body: { metadata: { name } } });
    const seen = await waitFor(
      `the watch sees ${name}`,
      60_000,
      () => lines().find((o) => o.k === "watch" && o.name === name),
      1000,
    ).catch(() => undefined);
    await env.core("mc1").deleteNamespacedConfigMap({ name, namespace: "default" });
    const steps = lines()
      .filter((o) => (o.k === "watch-step" || o.k === "watch-end") && o.t0 >= upgradeStarted)
      .map((o) => describeOutcome({ ...o, ms: o.ms ?? 0, t0: o.t0 - upgradeStarted }));
    const blip = seen
      ? `the watch through the gateway saw an object created after the upgrade within ${((seen.t0 - created) / 1000).toFixed(1)} s (${steps.filter((l) => l.startsWith("watch-end")).length} re-lists since the upgrade began)`
      : "the watch through the gateway did NOT see an object created after the upgrade within 60 s";
    blips.push(blip);
    t.diagnostic(blip);
    for (const l of steps.slice(-12)) t.diagnostic(`  ${l}`);
    assert.ok(seen, `${blip}; its steps since the upgrade began:\n${steps.join("\n")}`);
  }

  test("scaling proxy-servers 3 -> 1 -> 3 and gateways 2 -> 1 -> 2: no failed request, Available throughout", async (t: TestContext) => {
    for (const [servers, gateways] of [
      [1, 1],
      [3, 2],
    ] as const)
      await withoutLoss(t, `scale to ${servers} proxy-server(s) and ${gateways} gateway(s)`, async () => {
        await op.run(
          `scale to ${servers} proxy-servers and ${gateways} gateways`,
          `helm upgrade -n open-cluster-management-addon cluster-proxy charts/cluster-proxy --reuse-values --set proxyServer.replicas=${servers} --set gateway.replicas=${gateways}`,
        );
        // Every proxy-server is replaced (--server-count is in its pod template) and counts them.
        await waitFor(
          `${servers} proxy-server(s) with --server-count=${servers} and ${gateways} gateway(s), every cluster Available`,
          300_000,
          async () =>
            (await podsAre(hub, NS, PROXY_SERVER_SELECTOR, servers, (a) => a.includes(`--server-count=${servers}`))) &&
            (await podsAre(hub, NS, GATEWAY_SELECTOR, gateways)) &&
            MANAGED.every((c) => addonAvailability(env)[c]?.status === "True"),
          2_000,
        );
      });
  });

  test("the blips, for the install guide", (t: TestContext) => {
    for (const b of blips) t.diagnostic(b);
  });
});
