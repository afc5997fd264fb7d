/**
 * The gateway end to end, on the test environment (real hub and klusterlets, the chart's pods run
 * by the process kubelet), driven by the commands of docs/guides/gateway.md run as written
 * (test/infra/addon/readme-install.ts): the README's chart install -> the addon Available on mc1
 * and mc2 and the gateway Deployment Available -> the guide's two replicas behind a LoadBalancer,
 * its hub grant of mc1 to the ServiceAccount alice, mc1's grant to
 * `cluster:hub:system:serviceaccount:default:alice`, and its `cluster-proxy kubeconfig --gateway`.
 * Then, with the real kubectl as alice: mc1 answers, mc2 is refused naming the permission and the
 * cluster, both audited; mc1's own RBAC decides; a watch streams; exec, logs -f and port-forward
 * over SPDY and WebSocket; a garbage token 401, an impersonated group without the right 403; the
 * guide's service allowlist; the agents' endpoint refuses every certificate but the gateway's; a
 * watch survives the loss of the gateway replica that held it (restarted through the Service);
 * and OIDC logins from a test issuer with a key rotation. The test creates nothing an operator is
 * not told to create, but the workload it reaches and the ConfigMaps it watches.
 */
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { type Condition } from "@cluster-proxy/api";
import { KubeApi, Resources, type KubeObject } from "@cluster-proxy/addon-manager";
import { HOST_ADDR } from "../infra/env/config.js";
import { waitFor } from "../infra/env/exec.js";
import { type TestEnv, nodeScriptDeployment, startTestEnv } from "../infra/env/fixture.js";
import {
  KUBECTL_STREAMING_MODES,
  execTolerantOfSpdyLoss,
  type KubectlStreamingMode,
} from "../infra/env/kubectl-streaming.js";
import { type KubectlDone, KubectlProcess, runKubectl } from "../infra/env/kubectl-process.js";
import { GuideOperator } from "../infra/addon/guide-operator.js";
import { RELEASE, hubHelm, removeLeftRelease } from "../infra/chart.js";
import { docBlock } from "../infra/addon/readme-install.js";
import {
  NS,
  type AuditRecord,
  type OidcIssuer,
  auditRecords,
  gatewayPods,
  installChartAndWaitAvailable,
  probeGatewayEndpoint,
  signingKey,
  startOidcIssuer,
} from "../infra/gateway/gateway-setup.js";

const CLUSTERS = ["mc1", "mc2"] as const;
/** alice, a ServiceAccount of the hub, and who she is in a managed cluster. */
const ALICE = "system:serviceaccount:default:alice";
const ALICE_THERE = `cluster:hub:${ALICE}`;
/** The workload in mc1 that alice reaches (exec, logs, port-forward) and its two Services. */
const APP = "gw-demo";
const ALLOWED_SERVICE = "gw-demo-web";
const OTHER_SERVICE = "gw-demo-other";
const OIDC_CLIENT = "cluster-proxy";
/** What the guide's blocks create, for the cleanup before and after. */
const HUB_OBJECTS = [
  ["service", "cluster-proxy-addon-user-lb", NS],
  ["configmap", "oidc-issuer-ca", NS],
  ["serviceaccount", "alice", "default"],
  ["clusterrolebinding", "alice-cluster-proxy-mc1"],
  ["clusterrolebinding", "carol-cluster-proxy-mc1"],
  ["clusterrole", "cluster-proxy-user-mc1"],
] as const;
const MC1_OBJECTS = [
  ["clusterrolebinding", "hub-alice-view"],
  ["clusterrolebinding", "hub-carol-view"],
  ["clusterrole", "hub-users-view"],
  ["deployment", APP, "default"],
  ["service", ALLOWED_SERVICE, "default"],
  ["service", OTHER_SERVICE, "default"],
] as const;

// The workload: announces itself, ticks (with its clock) every 200 ms, serves HTTP on 8080.
const APP_SCRIPT = `
const http = require("node:http");
console.log("started " + process.env.POD_NAME);
let n = 0;
setInterval(() => console.log("tick " + n++ + " " + Date.now()), 200);
http.createServer((q, s) => s.end("hello from " + process.env.POD_NAME + " " + q.url + "\\n")).listen(8080);
`;

interface Secret extends KubeObject {
  data?: Record<string, string>;
}
interface Pod extends KubeObject {
  status?: { podIP?: string; phase?: string; conditions?: Condition[] };
}

describe("the gateway: hub users reach clusters as themselves", { timeout: 60 * 60_000 }, () => {
  let env: TestEnv;
  let hub: KubeApi;
  let mc1: KubeApi;
  let op: GuideOperator;
  let dir = "";
  let issuer: OidcIssuer | undefined;
  const running = new Set<KubectlProcess>();

  /** A guide block (or command) as the operator runs it, in their directory; fails the test with its trace. */
  const operator = (
    what: string,
    script: string,
    opts: { env?: Record<string, string>; timeoutMs?: number } = {},
  ): Promise<string> => op.run(what, script, opts);
  /** The same, as mc1's admin (KUBECONFIG mc1's). */
  const mc1Admin = (what: string, script: string): Promise<string> =>
    operator(what, script, { env: { KUBECONFIG: env.kubeconfigPath("mc1") } });
  /** kubectl with a kubeconfig of `dir` (e.g. alice.kubeconfig), run to its end. */
  const as = (kubeconfig: string, args: string[], kenv: Record<string, string> = {}, input?: string) =>
    runKubectl(env, join(dir, kubeconfig), ["--request-timeout=60s", ...args], { env: kenv, input, cwd: dir });
  /** kubectl as alice (the guide's alice.kubeconfig), in the context of `cluster`. */
  const alice = (cluster: string, args: string[], kenv: Record<string, string> = {}, input?: string) =>
    as("alice.kubeconfig", ["--context", cluster, ...args], kenv, input);
  /** A long-running kubectl with a kubeconfig of `dir`, stopped by `after` if the test does not. */
  const start = (kubeconfig: string, args: string[], kenv: Record<string, string> = {}): KubectlProcess => {
    const k = new KubectlProcess(env, join(dir, kubeconfig), args, { env: kenv, cwd: dir });
    running.add(k);
    return k;
  };
  const stop = async (k: KubectlProcess): Promise<void> => {
    await k.stop();
    running.delete(k);
  };
  const ok = (r: KubectlDone, what: string): string => {
    assert.equal(r.code, 0, `${what}: exit ${r.code}\n${r.stdout}${r.stderr}`);
    return r.stdout;
  };
  const deleteObjects = (cluster: "hub" | "mc1", objects: readonly (readonly string[])[]): void => {
    for (const [kind, name, namespace] of objects)
      env.kubectl(cluster, ["delete", kind!, name!, "--ignore-not-found", ...(namespace ? ["-n", namespace] : [])], {
        allowFail: true,
      });
  };
  const secretFile = async (secret: string, key: string, file: string): Promise<void> => {
    const s = await hub.get<Secret>(Resources.secret, secret, NS);
    const text = Buffer.from(s.data?.[key] ?? "", "base64").toString();
    assert.ok(text.includes("-----BEGIN"), `Secret ${NS}/${secret} has a PEM ${key}`);
    writeFileSync(file, text, { mode: 0o600 });
  };
  /** A new ConfigMap in mc1's default namespace (made by mc1's admin, not through the gateway). */
  const createConfigMap = async (name: string): Promise<void> => {
    await env.core("mc1").createNamespacedConfigMap({
      namespace: "default",
      body: { metadata: { name, labels: { "gateway-e2e": "true" } }, data: { made: "by the test" } },
    });
  };
  /** The audit records of every gateway pod that match `want` (each of its fields equal). */
  const audited = async (what: string, want: AuditRecord): Promise<AuditRecord> => {
    let seen: AuditRecord[] = [];
    return waitFor(
      `an audit record of ${what}`,
      60_000,
      async () => {
        seen = auditRecords(env, await gatewayPods(hub));
        return seen.find((r) => Object.entries(want).every(([k, v]) => JSON.stringify(r[k]) === JSON.stringify(v)));
      },
      1000,
    ).catch((err: Error) => {
      throw new Error(
        `${err.message}\nlast records:\n${seen
          .slice(-10)
          .map((r) => JSON.stringify(r))
          .join("\n")}`,
        {
          cause: err,
        },
      );
    });
  };
  const readyAppPod = (): Promise<{ name: string; ip: string }> =>
    waitFor(
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
        return p ? { name: p.metadata.name, ip: p.status!.podIP! } : undefined;
      },
      1000,
    );

  before(
    async () => {
      env = await startTestEnv();
      hub = new KubeApi(env.kubeConfig("hub"));
      mc1 = new KubeApi(env.kubeConfig("mc1"));
      op = GuideOperator.create(env, "cp-gateway-e2e-");
      dir = op.dir;
      // What an interrupted run left: the release and the addon's CSRs, then the guide's objects.
      await removeLeftRelease(env, hub);
      deleteObjects("hub", HUB_OBJECTS);
      deleteObjects("mc1", MC1_OBJECTS);
      env.kubectl("mc1", ["-n", "default", "delete", "configmap", "-l", "gateway-e2e=true", "--ignore-not-found"], {
        allowFail: true,
      });
      // The workload alice reaches in mc1, and two Services in front of it.
      await env.apps("mc1").createNamespacedDeployment({
        namespace: "default",
        body: nodeScriptDeployment({ name: APP, script: APP_SCRIPT, port: 8080, portName: "http", readiness: true }),
      });
      for (const name of [ALLOWED_SERVICE, OTHER_SERVICE])
        await env.core("mc1").createNamespacedService({
          namespace: "default",
          body: {
            metadata: { name },
            spec: { selector: { app: APP }, ports: [{ name: "http", port: 80, targetPort: "http" }] },
          },
        });
    },
    { timeout: 90 * 60_000 },
  );

  after(async () => {
    for (const k of running) await k.stop();
    await issuer?.stop();
    if (env) {
      hubHelm(env, ["uninstall", "-n", NS, RELEASE], { allowFail: true });
      deleteObjects("hub", HUB_OBJECTS);
      deleteObjects("mc1", MC1_OBJECTS);
      env.kubectl("mc1", ["-n", "default", "delete", "configmap", "-l", "gateway-e2e=true", "--ignore-not-found"], {
        allowFail: true,
      });
    }
    op?.remove();
    await env?.close();
  });

  test("the README's chart install: the addon Available on mc1 and mc2, the gateway Deployment Available", async () => {
    await installChartAndWaitAvailable(op, CLUSTERS);
  });

  test("the guide: the gateway's two replicas behind a LoadBalancer, alice granted mc1 on the hub and a view of mc1 there", async () => {
    await waitFor("two ready gateway pods", 180_000, async () => (await gatewayPods(hub)).length === 2, 1000);
    await operator("guide gateway-expose", docBlock("gateway-expose"));
    await operator("guide gateway-grant-hub", docBlock("gateway-grant-hub"));
    await mc1Admin("guide gateway-grant-managed (mc1's admin)", docBlock("gateway-grant-managed"));
  });

  test("the guide's kubeconfig: kubectl get namespaces on mc1 as alice works; mc2 is 403 naming the permission and the cluster; both audited", async () => {
    const out = await operator("guide gateway-kubeconfig", docBlock("gateway-kubeconfig"));
    assert.match(out, /^default\s+Active\s/m, out);
    const kc = readFileSync(join(dir, "alice.kubeconfig"), "utf8");
    for (const c of CLUSTERS) assert.match(kc, new RegExp(`server: https://\\S+/${c}\\b`), kc);
    const denied = await alice("mc2", ["get", "namespaces"]);
    assert.notEqual(denied.code, 0, denied.stdout);
    assert.match(denied.stderr, /Forbidden/i, denied.stderr);
    assert.match(denied.stderr, /managedclusters\/proxy/, denied.stderr);
    assert.match(denied.stderr, /\bmc2\b/, denied.stderr);
    await audited("alice's namespaces of mc1", { user: ALICE, cluster: "mc1", resource: "namespaces", code: 200 });
    await audited("alice refused on mc2", { user: ALICE, cluster: "mc2", code: 403, decision: "deny" });
    // And the guide's own command shows the records.
    const log = await operator("guide gateway-audit", docBlock("gateway-audit"));
    for (const [cluster, code] of [
      ["mc1", 200],
      ["mc2", 403],
    ] as const)
      assert.ok(
        log
          .split("\n")
          .some((l) => [`"user":"${ALICE}"`, `"cluster":"${cluster}"`, `"code":${code}`].every((f) => l.includes(f))),
        `the guide's audit command shows alice's ${code} on ${cluster}:\n${log}`,
      );
  });

  test("in mc1 alice is cluster:hub:system:serviceaccount:default:alice and gets exactly what mc1's RBAC grants", async () => {
    const who = JSON.parse(ok(await alice("mc1", ["auth", "whoami", "-o", "json"]), "auth whoami")) as {
      status: { userInfo: { username: string; groups?: string[] } };
    };
    assert.equal(who.status.userInfo.username, ALICE_THERE);
    assert.ok(who.status.userInfo.groups?.includes("cluster:hub:system:serviceaccounts"), JSON.stringify(who));
    await createConfigMap("gw-rbac");
    const got = ok(await alice("mc1", ["-n", "default", "get", "configmap", "gw-rbac", "-o", "name"]), "get");
    assert.equal(got.trim(), "configmap/gw-rbac");
    const del = await alice("mc1", ["-n", "default", "delete", "configmap", "gw-rbac"]);
    assert.notEqual(del.code, 0, del.stdout);
    assert.match(
      del.stderr,
      new RegExp(`configmaps "gw-rbac" is forbidden: User "${ALICE_THERE}" cannot delete resource "configmaps"`),
      del.stderr,
    );
    const still = await env.core("mc1").readNamespacedConfigMap({ name: "gw-rbac", namespace: "default" });
    assert.equal(still.metadata?.name, "gw-rbac", "the ConfigMap is still there");
  });

  test("kubectl get cm -w through the gateway shows a ConfigMap created in mc1 within 2 s", async () => {
    const w = start("alice.kubeconfig", ["--context", "mc1", "-n", "default", "get", "configmap", "-w", "-o", "name"]);
    try {
      await w.until("the initial list", 60_000, () => w.lines.some((l) => l.line === "configmap/kube-root-ca.crt"));
      const name = `gw-watch-${Date.now()}`;
      const t0 = Date.now();
      await createConfigMap(name);
      const seen = await w.until(`configmap/${name}`, 30_000, () =>
        w.lines.find((l) => l.line === `configmap/${name}`),
      );
      assert.ok(seen.at - t0 < 2_000, `the new ConfigMap showed after ${seen.at - t0} ms`);
      await env.core("mc1").deleteNamespacedConfigMap({ name, namespace: "default" });
    } finally {
      await stop(w);
    }
  });

  for (const mode of Object.keys(KUBECTL_STREAMING_MODES) as KubectlStreamingMode[]) {
    const kenv: Record<string, string> = { ...KUBECTL_STREAMING_MODES[mode] };
    test(`kubectl exec, logs -f and port-forward to a pod in mc1 through the gateway (${mode})`, async (t) => {
      const pod = await readyAppPod();
      const echo = ok(
        await alice("mc1", ["exec", pod.name, "--", "sh", "-c", "ip -4 -o addr show dev eth0"], kenv),
        "exec",
      );
      assert.match(echo, new RegExp(`inet ${pod.ip.replace(/\./g, "\\.")}/32`));
      const stdin = await execTolerantOfSpdyLoss(
        mode,
        () => alice("mc1", ["exec", "-i", pod.name, "--", "sh", "-c", "read a; echo got:$a"], kenv, "hello\n"),
        (r) => r.stdout !== "",
        (m) => t.diagnostic(m),
      );
      assert.equal(ok(stdin, "exec -i"), "got:hello\n");
      const fail = await alice("mc1", ["exec", pod.name, "--", "sh", "-c", "echo bye; exit 7"], kenv);
      assert.equal(fail.code, 7, fail.stderr);
      assert.match(fail.stderr, /command terminated with exit code 7/);

      const follow = start("alice.kubeconfig", ["--context", "mc1", "logs", "-f", "--tail=1", pod.name], kenv);
      try {
        const first = follow.lines.length;
        await follow.until("5 followed tick lines", 60_000, () => follow.lines.length >= first + 6);
        const delays = follow.lines
          .slice(first + 1, first + 6)
          .map(({ at, line }) => at - Number(/^tick \d+ (\d+)$/.exec(line)?.[1]));
        t.diagnostic(`logs -f through the gateway: delays ${delays.join(", ")} ms`);
        assert.ok(
          delays.every((d) => d >= 0 && d < 2_000),
          `followed lines took ${delays.join(", ")} ms`,
        );
      } finally {
        await stop(follow);
      }

      const pf = start("alice.kubeconfig", ["--context", "mc1", "port-forward", `pod/${pod.name}`, "0:8080"], kenv);
      try {
        const port = await pf.until("Forwarding from", 60_000, () => /127\.0\.0\.1:(\d+) -> 8080/.exec(pf.stdout)?.[1]);
        for (let i = 0; i < 3; i++) {
          const r = env.exec("lab", "curl", ["-sS", "--max-time", "20", `http://127.0.0.1:${port}/pf-${i}`]);
          assert.equal(r.stdout, `hello from ${pod.name} /pf-${i}\n`);
        }
      } finally {
        await stop(pf);
      }
    });
  }

  test("a garbage token is 401; an impersonated group (--as-group system:masters) without the right is 403", async () => {
    const garbage = await alice("mc1", ["--token", "not-a-token", "get", "namespaces"]);
    assert.notEqual(garbage.code, 0);
    assert.match(garbage.stderr, /You must be logged in|Unauthorized/, garbage.stderr);
    const masters = await alice("mc1", ["--as", ALICE, "--as-group", "system:masters", "get", "namespaces"]);
    assert.notEqual(masters.code, 0, masters.stdout);
    assert.match(masters.stderr, /Forbidden/i, masters.stderr);
    assert.match(masters.stderr, /impersonate/, masters.stderr);
    assert.doesNotMatch(masters.stdout, /kube-system/);
  });

  test("the guide's service allowlist: the listed Service answers, another is 403", async () => {
    const out = await operator("guide gateway-exposed-services", docBlock("gateway-exposed-services"));
    assert.match(out, /^hello from gw-demo-\S+ \/$/m, out);
    const cm = await env.core("hub").readNamespacedConfigMap({ name: "cluster-proxy-exposed-services", namespace: NS });
    assert.match(cm.data?.services ?? "", new RegExp(ALLOWED_SERVICE), "the chart wrote the allowlist ConfigMap");
    const path2 = ok(
      await alice("mc1", [
        "get",
        "--raw",
        `/api/v1/namespaces/default/services/http:${ALLOWED_SERVICE}:80/proxy-service/a/b?c=d`,
      ]),
      "the allowed Service with a path",
    );
    // (kubectl adds its --request-timeout to the query)
    assert.match(path2, /^hello from gw-demo-\S+ \/a\/b\?c=d(&|$)/m);
    const other = await alice("mc1", [
      "get",
      "--raw",
      `/api/v1/namespaces/default/services/http:${OTHER_SERVICE}:80/proxy-service/`,
    ]);
    assert.notEqual(other.code, 0, other.stdout);
    assert.match(other.stderr, /Forbidden|403/, other.stderr);
    assert.doesNotMatch(other.stdout, /hello from/);
  });

  test("the agents' gateway endpoint answers the gateway's identity certificate and refuses the proxy-client certificate", async () => {
    const certs = join(dir, "proxy-client");
    const identity = join(dir, "gateway-identity");
    mkdirSync(certs, { recursive: true });
    mkdirSync(identity, { recursive: true });
    await secretFile("proxy-client", "tls.crt", join(certs, "tls.crt"));
    await secretFile("proxy-client", "tls.key", join(certs, "tls.key"));
    await secretFile("proxy-server-ca", "ca.crt", join(certs, "ca.crt"));
    await secretFile("cluster-proxy-gateway-identity", "tls.crt", join(identity, "tls.crt"));
    await secretFile("cluster-proxy-gateway-identity", "tls.key", join(identity, "tls.key"));
    await secretFile("cluster-proxy-gateway-identity", "agent-ca.crt", join(identity, "agent-ca.crt"));
    const server = (
      (
        await hub.list(Resources.pod, {
          namespace: NS,
          labelSelector: "proxy.open-cluster-management.io/component-name=proxy-server",
        })
      ).items as Pod[]
    ).find((p) => p.status?.phase === "Running" && p.status.podIP && !p.metadata.deletionTimestamp);
    assert.ok(server, "a running proxy-server pod");
    const probe = (clientCertDir?: string) =>
      probeGatewayEndpoint(env, {
        door: `${server.status!.podIP!}:8090`,
        servername: `proxy-entrypoint.${NS}.svc`,
        proxyCertDir: certs,
        cluster: "mc1",
        agentCaFile: join(identity, "agent-ca.crt"),
        clientCertDir,
      });
    // The gateway's identity: the endpoint performs the request as the asserted user.
    const good = probe(identity);
    assert.equal(good.status, 200, JSON.stringify(good));
    assert.match(good.body ?? "", /"gitVersion"/);
    // Any other certificate, the proxy-client one a hub program holds included, or none: refused
    // in the TLS handshake, before a request is read.
    for (const [what, certDir] of [
      ["the proxy-client certificate", certs],
      ["no certificate", undefined],
    ] as const) {
      const r = probe(certDir);
      assert.equal(r.tunnel, true, `${what}: the tunnel to the endpoint opens (${JSON.stringify(r)})`);
      assert.equal(r.status, undefined, `${what}: no HTTP answer (${JSON.stringify(r)})`);
      assert.match(
        r.error ?? "",
        /alert|certificate|socket hang up|ECONNRESET|disconnected/i,
        `${what}: ${JSON.stringify(r)}`,
      );
    }
  });

  test("two gateway replicas: the one holding a watch is killed; the watch restarted through the Service sees a new ConfigMap", async () => {
    const before = await gatewayPods(hub);
    assert.equal(before.length, 2, before.join(", "));
    const w = start("alice.kubeconfig", ["--context", "mc1", "-n", "default", "get", "configmap", "-w", "-o", "name"]);
    await w.until("the initial list", 60_000, () => w.lines.some((l) => l.line === "configmap/kube-root-ca.crt"));
    // The replica that holds the watch: the one with a connection from the lab on its port.
    const holder = await waitFor(
      "the gateway pod holding the watch",
      30_000,
      async () => {
        for (const pod of before) {
          const ss = await env.podExec("hub", NS, pod, "ss", ["-Htn", "state", "established", "( sport = :9092 )"], {
            allowFail: true,
          });
          if (ss.stdout.includes(HOST_ADDR.lab)) return pod;
        }
        return undefined;
      },
      1000,
    );
    await hub.delete(Resources.pod, holder, NS);
    const ended = await Promise.race([
      w.exited,
      new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 90_000).unref()),
    ]);
    assert.ok(ended, `kubectl's watch did not end within 90 s of deleting ${holder}`);
    running.delete(w);
    // The client starts its watch again (kubectl get -w does not) until it lists, through the
    // Service, now served by the other replica or the new one.
    const name = `gw-ha-${Date.now()}`;
    let created = false;
    await waitFor(
      `a restarted watch that sees ${name}`,
      180_000,
      async () => {
        const again = start("alice.kubeconfig", [
          "--context",
          "mc1",
          "-n",
          "default",
          "get",
          "configmap",
          "-w",
          "-o",
          "name",
        ]);
        try {
          await again.until("the initial list", 30_000, () =>
            again.lines.some((l) => l.line === "configmap/kube-root-ca.crt"),
          );
          if (!created) {
            await createConfigMap(name);
            created = true;
          }
          await again.until(`configmap/${name}`, 30_000, () => again.lines.some((l) => l.line === `configmap/${name}`));
          return true;
        } finally {
          await stop(again);
        }
      },
      1000,
    );
    await env.core("mc1").deleteNamespacedConfigMap({ name, namespace: "default" });
    await waitFor("two ready gateway pods again", 180_000, async () => (await gatewayPods(hub)).length === 2, 1000);
  });

  test("OIDC: an ID token of a trusted issuer reaches mc1 when hub RBAC grants its oidc: user; a key rotation keeps new tokens working", async () => {
    const first = signingKey("key-1");
    issuer = await startOidcIssuer(join(dir, "issuer"), [first]);
    writeFileSync(join(dir, "oidc-ca.crt"), issuer.caPem);
    await operator("guide gateway-oidc", docBlock("gateway-oidc"), { env: { OIDC_ISSUER_URL: issuer.url } });
    // mc1's admin lets carol read, as for alice.
    await mc1Admin(
      "mc1 grants carol",
      "kubectl create clusterrolebinding hub-carol-view --clusterrole=hub-users-view --user=cluster:hub:oidc:carol",
    );
    const tokenFile = join(dir, "carol.token");
    writeFileSync(tokenFile, issuer.token(first, "carol", OIDC_CLIENT, { groups: ["devs"] }), { mode: 0o600 });
    await operator(
      "carol's kubeconfig",
      `cluster-proxy kubeconfig --gateway="$(grep -m1 -o 'https://[^/]*' alice.kubeconfig)" --cluster mc1 --token "$(cat carol.token)" --output carol-mc1.kubeconfig`,
    );
    // The gateway pods roll out with the issuer (bounded: the upgrade's rollout).
    let last: KubectlDone | undefined;
    await waitFor(
      "carol's namespaces of mc1",
      300_000,
      async () =>
        (last = await as("carol-mc1.kubeconfig", ["get", "namespaces", "-o", "name"])).code === 0 ? true : undefined,
      2000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\nlast: ${JSON.stringify(last)}\nissuer saw: ${issuer?.requests().join(", ")}`, {
        cause: err,
      });
    });
    const who = JSON.parse(ok(await as("carol-mc1.kubeconfig", ["auth", "whoami", "-o", "json"]), "carol whoami")) as {
      status: { userInfo: { username: string; groups?: string[] } };
    };
    assert.equal(who.status.userInfo.username, "cluster:hub:oidc:carol");
    assert.ok(who.status.userInfo.groups?.includes("cluster:hub:oidc:devs"), JSON.stringify(who));
    await audited("carol's request", { user: "oidc:carol", authentication: "oidc", cluster: "mc1", code: 200 });
    // A user of the same issuer the hub grants nothing: 403.
    const dave = await as("carol-mc1.kubeconfig", [
      "--token",
      issuer.token(first, "dave", OIDC_CLIENT),
      "get",
      "namespaces",
    ]);
    assert.notEqual(dave.code, 0);
    assert.match(dave.stderr, /Forbidden/i, dave.stderr);
    assert.match(dave.stderr, /managedclusters\/proxy/, dave.stderr);
    // A token for another audience: 401.
    const aud = await as("carol-mc1.kubeconfig", [
      "--token",
      issuer.token(first, "carol", "another-client"),
      "get",
      "namespaces",
    ]);
    assert.match(aud.stderr, /You must be logged in|Unauthorized/, aud.stderr);

    // The issuer rotates: a new key, the old one withdrawn. New tokens work (the gateway fetches
    // the keys again for a key id it does not know).
    const fetchedBefore = issuer.requests().filter((r) => r === "GET /keys").length;
    const second = signingKey("key-2");
    issuer.publish([second]);
    const fresh = issuer.token(second, "carol", OIDC_CLIENT, { groups: ["devs"] });
    let rotated: KubectlDone | undefined;
    await waitFor(
      "a token of the new key accepted",
      60_000,
      async () =>
        (rotated = await as("carol-mc1.kubeconfig", ["--token", fresh, "get", "namespaces", "-o", "name"])).code === 0
          ? true
          : undefined,
      1000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\nlast: ${JSON.stringify(rotated)}`, { cause: err });
    });
    assert.ok(
      issuer.requests().filter((r) => r === "GET /keys").length > fetchedBefore,
      "the gateway fetched the new keys",
    );
  });
});
