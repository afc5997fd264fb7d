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
 * and OIDC logins from a test issuer with a key rotation. Then as an attacker (issue 39), as the
 * guide's read-only viewer bob and from pods of mc1: request smuggling through a chunked GET, pods
 * answering what HTTP/2 cannot carry, forged identity headers and an ExternalName to the metadata
 * address behind the allowlist, and upgrades with hub `get` only. The test creates nothing an
 * operator is not told to create, but the workloads it reaches, the ConfigMaps it watches and the
 * grants its attacks need.
 */
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { type Condition } from "@cluster-proxy/api";
import { KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "@cluster-proxy/addon-manager";
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
import type { AttackAnswer, AttackRequest } from "../infra/gateway/attack-probe.js";
import {
  NS,
  type AuditRecord,
  type OidcIssuer,
  attackProbe,
  auditRecords,
  gatewayPods,
  gatewayRestarts,
  installChartAndWaitAvailable,
  probeGatewayEndpoint,
  signingKey,
  startOidcIssuer,
} from "../infra/gateway/gateway-setup.js";

const CLUSTERS = ["mc1", "mc2"] as const;
/** alice, a ServiceAccount of the hub, and who she is in a managed cluster. */
const ALICE = "system:serviceaccount:default:alice";
const ALICE_THERE = `cluster:hub:${ALICE}`;
/** bob, the guide's read-only viewer (`fleet-grant-viewer`): hub `get` on managedclusters/proxy of mc1, nothing else. */
const BOB = "system:serviceaccount:default:bob";
const BOB_THERE = `cluster:hub:${BOB}`;
/** What a smuggled request would create in mc1 (one per protocol): bob bound to cluster-admin. */
const SMUGGLED_BINDING = { h1: "gw-smuggled-h1", h2: "gw-smuggled-h2" } as const;
/** A pod of mc1 whose answers (through pods/proxy) an HTTP/2 response may not carry. */
const HOSTILE_APP = "gw-hostile";
/** An ExternalName Service of mc1 to the cloud metadata address, put in the allowlist. */
const METADATA_SERVICE = "gw-metadata";
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
  ["serviceaccount", "bob", "default"],
  ["clusterrolebinding", "bob-cluster-proxy-view-mc1"],
  ["clusterrole", "cluster-proxy-view-mc1"],
  ["clusterrolebinding", "bob-cluster-proxy-create-mc1"],
  ["clusterrole", "cluster-proxy-create-mc1"],
] as const;
const MC1_OBJECTS = [
  ["clusterrolebinding", "hub-alice-view"],
  ["clusterrolebinding", "hub-carol-view"],
  ["clusterrole", "hub-users-view"],
  ["clusterrolebinding", "hub-bob-view"],
  ["clusterrolebinding", "hub-pods-proxy"],
  ["clusterrole", "hub-pods-proxy"],
  ["clusterrolebinding", SMUGGLED_BINDING.h1],
  ["clusterrolebinding", SMUGGLED_BINDING.h2],
  ["deployment", APP, "default"],
  ["deployment", HOSTILE_APP, "default"],
  ["service", ALLOWED_SERVICE, "default"],
  ["service", OTHER_SERVICE, "default"],
  ["service", METADATA_SERVICE, "default"],
] as const;

// The workload: announces itself, ticks (with its clock) every 200 ms, serves HTTP on 8080
// (at /headers: the request headers it received, as JSON).
const APP_SCRIPT = `
const http = require("node:http");
console.log("started " + process.env.POD_NAME);
let n = 0;
setInterval(() => console.log("tick " + n++ + " " + Date.now()), 200);
http.createServer((q, s) => s.end(q.url.startsWith("/headers") ? JSON.stringify(q.headers) :
  "hello from " + process.env.POD_NAME + " " + q.url + "\\n")).listen(8080);
`;
// A pod that answers what an HTTP/2 response cannot carry: an HTTP2-Settings header (a
// connection-specific header, forbidden in HTTP/2), or the status 600 (HTTP/2 allows 100-599).
const HOSTILE_SCRIPT = `
const http = require("node:http");
http.createServer((q, s) => {
  if (q.url.startsWith("/http2-settings")) s.writeHead(200, { "HTTP2-Settings": "AAMAAABkAAQAoAAAAAIAAAAA" });
  else if (q.url.startsWith("/status-600")) s.writeHead(600, "Six Hundred");
  s.end("hostile " + q.url + "\\n");
}).listen(8080);
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
  const readyAppPod = (app: string = APP): Promise<{ name: string; ip: string }> =>
    waitFor(
      `a ready ${app} pod in mc1`,
      120_000,
      async () => {
        const p = (
          (await mc1.list(Resources.pod, { namespace: "default", labelSelector: `app=${app}` })).items as Pod[]
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
      // What the attacks reach in mc1: the hostile pod, and an ExternalName to the metadata address.
      await env.apps("mc1").createNamespacedDeployment({
        namespace: "default",
        body: nodeScriptDeployment({ name: HOSTILE_APP, script: HOSTILE_SCRIPT, port: 8080, readiness: true }),
      });
      await env.core("mc1").createNamespacedService({
        namespace: "default",
        body: {
          metadata: { name: METADATA_SERVICE },
          spec: { type: "ExternalName", externalName: "169.254.169.254", ports: [{ name: "http", port: 80 }] },
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
        // With TLS 1.3 the client's side of the handshake is done before the endpoint refuses its
        // certificate: the endpoint's close shows as the alert, a reset, or as the HTTP/2
        // session's first write failing after it ("write after end").
        /alert|certificate|socket hang up|ECONNRESET|disconnected|write after end|EPIPE/i,
        `${what}: ${JSON.stringify(r)}`,
      );
    }
  });

  // ---- Attacks (issue 39): a hub user whose only hub grant is `get` on managedclusters/proxy of
  // mc1 (the guide's viewer bob), and what a cluster's pods answer, against the installed gateway.

  /** The gateway's URL as the guide's kubeconfig names it (the LoadBalancer's address). */
  const gatewayUrl = (): string => {
    const m = /server: (https:\/\/[^/\s]+)\//.exec(readFileSync(join(dir, "alice.kubeconfig"), "utf8"));
    assert.ok(m, "alice.kubeconfig names the gateway");
    return m[1]!;
  };
  /** A request of attack-probe.ts from the lab, with the token of `who` (a file of `dir`). */
  const attack = (who: "alice" | "bob", request: Omit<AttackRequest, "url" | "tokenFile">): AttackAnswer =>
    attackProbe(env, dir, { ...request, url: gatewayUrl(), tokenFile: join(dir, `${who}.token`) });
  /** kubectl as bob (read-only on the hub), in mc1. */
  const bob = (args: string[], kenv: Record<string, string> = {}) => as("bob.kubeconfig", args, kenv);
  /** mc1's RBAC refuses bob reading its Secrets (its grant is the guide's view), naming him as mc1 sees him. */
  const assertBobRefusedByMc1 = async (): Promise<void> => {
    const r = await bob(["-n", "kube-system", "get", "secrets"]);
    assert.notEqual(r.code, 0, r.stdout);
    assert.match(r.stderr, new RegExp(`User "${BOB_THERE}" cannot list resource "secrets"`), r.stderr);
  };

  test("the guide's read-only viewer bob: hub get on mc1 only, mc1's view; he reads mc1 and mc1 refuses him its Secrets", async () => {
    await operator("guide fleet-grant-viewer", docBlock("fleet-grant-viewer"));
    await mc1Admin(
      "mc1 grants bob the guide's view",
      `kubectl create clusterrolebinding hub-bob-view --clusterrole=hub-users-view --user=${BOB_THERE}`,
    );
    await operator(
      "tokens of alice and bob, bob's kubeconfig",
      [
        "kubectl -n default create token alice > alice.token",
        "kubectl -n default create token bob > bob.token",
        `cluster-proxy kubeconfig --gateway="$(grep -m1 -o 'https://[^/]*' alice.kubeconfig)" --cluster mc1 --token "$(cat bob.token)" --output bob.kubeconfig`,
      ].join("\n"),
    );
    assert.match(ok(await bob(["get", "namespaces", "-o", "name"]), "bob's namespaces"), /^namespace\/default$/m);
    await assertBobRefusedByMc1();
  });

  test("request smuggling: a chunked body on GET /mc1/version holding a cluster-admin binding as system:admin creates nothing (HTTP/1.1 and HTTP/2)", async (t) => {
    const answers: string[] = [];
    for (const proto of ["h1", "h2"] as const) {
      const name = SMUGGLED_BINDING[proto];
      const json = JSON.stringify({
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: "ClusterRoleBinding",
        metadata: { name },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "cluster-admin" },
        subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: BOB_THERE }],
      });
      // The next request on the gateway's connection to the agent, if the body were relayed unframed.
      const smuggled = [
        "POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings HTTP/1.1",
        "Host: gateway.cluster-proxy.invalid",
        "Cluster-Proxy-Target: kube",
        "Impersonate-User: system:admin",
        "Impersonate-Group: system:masters",
        "Content-Type: application/json",
        `Content-Length: ${Buffer.byteLength(json)}`,
        "",
        json,
      ].join("\r\n");
      const answer = attack("bob", { proto, method: "GET", path: "/mc1/version", body: smuggled });
      t.diagnostic(`${proto}: ${JSON.stringify({ ...answer, raw: undefined })}`);
      answers.push(`${proto}: ${answer.status ?? answer.error}`);
    }
    // The smuggled requests were performed nowhere: no binding exists, and bob is refused as before.
    const created = Object.values(SMUGGLED_BINDING).flatMap((name) => {
      const b = env.kubectl("mc1", ["get", "clusterrolebinding", name, "-o", "yaml"], { allowFail: true });
      return b.status === 0 ? [`ClusterRoleBinding ${name}:\n${b.stdout}`] : [];
    });
    assert.deepEqual(created, [], `the smuggled requests created:\n${created.join("\n")}`);
    await assertBobRefusedByMc1();
    // A well-formed answer to each one request: the version, or a refusal of its body.
    assert.ok(
      answers.every((a) => / (200|400)$/.test(a)),
      answers.join(", "),
    );
  });

  test("a pod answering an HTTP2-Settings header or status 600 through pods/proxy leaves every gateway replica running and serving alice", async (t) => {
    await mc1Admin(
      "mc1 lets alice proxy to pods",
      [
        "kubectl create clusterrole hub-pods-proxy --verb=get --resource=pods/proxy",
        `kubectl create clusterrolebinding hub-pods-proxy --clusterrole=hub-pods-proxy --user=${ALICE_THERE}`,
      ].join("\n"),
    );
    const pod = await readyAppPod(HOSTILE_APP);
    const before = await gatewayRestarts(hub);
    assert.equal(Object.keys(before).length, 2, JSON.stringify(before));
    const answers: string[] = [];
    // Several connections each (the LoadBalancer picks a replica per connection), so that both
    // replicas are reached: kubectl (HTTP/2), and the probe over HTTP/2 and HTTP/1.1.
    for (const what of ["http2-settings", "status-600"]) {
      const path = `/api/v1/namespaces/default/pods/${pod.name}:8080/proxy/${what}`;
      for (let i = 0; i < 4; i++) {
        const k = await alice("mc1", ["get", "--raw", path]);
        answers.push(`kubectl ${what}: exit ${k.code} ${k.stdout.trim()} ${k.stderr.trim()}`);
        for (const proto of ["h2", "h1"] as const) {
          const a = attack("alice", { proto, method: "GET", path: `/mc1${path}` });
          answers.push(`${proto} ${what}: ${a.status} ${a.body?.trim()} ${a.error ?? ""}`);
          assert.ok(
            a.status !== undefined && a.status >= 100 && a.status <= 599,
            `${proto} ${what}: a well-formed answer (${JSON.stringify({ ...a, raw: undefined })})`,
          );
        }
      }
    }
    t.diagnostic(answers.join("\n"));
    ok(await alice("mc1", ["get", "namespaces"]), "alice after the hostile answers");
    assert.deepEqual(await gatewayRestarts(hub), before, "no gateway replica restarted");
  });

  test("a caller's X-Remote-User, X-Forwarded-For and the like never reach an exposed Service (HTTP/1.1 and HTTP/2)", () => {
    const forged: Record<string, string> = {
      "x-remote-user": "system:admin",
      "x-remote-group": "system:masters",
      "x-auth-request-user": "admin",
      "x-forwarded-for": "192.0.2.66",
      "x-real-ip": "192.0.2.66",
      forwarded: "for=192.0.2.66",
    };
    for (const proto of ["h1", "h2"] as const) {
      const a = attack("alice", {
        proto,
        method: "GET",
        path: `/mc1/api/v1/namespaces/default/services/http:${ALLOWED_SERVICE}:80/proxy-service/headers`,
        headers: forged,
      });
      assert.equal(a.status, 200, `${proto}: ${JSON.stringify({ ...a, raw: undefined })}`);
      const seen = JSON.parse(a.body ?? "{}") as Record<string, string>;
      for (const name of Object.keys(seen))
        assert.doesNotMatch(name, /^(x-remote-|x-auth-request-|x-real-ip$|forwarded$)/, `${proto}: ${a.body}`);
      assert.doesNotMatch(seen["x-forwarded-for"] ?? "", /192\.0\.2\.66/, `${proto}: ${a.body}`);
    }
  });

  test("an ExternalName Service to 169.254.169.254 put in the allowlist is refused by the agent's destination policy", async () => {
    // The operator lists an ExternalName Service that points at the metadata address.
    await operator(
      "allowlist the ExternalName Service",
      `helm upgrade -n ${NS} cluster-proxy charts/cluster-proxy --reuse-values -f - <<'YAML'
gateway:
  exposedServices:
    - {clusters: [mc1], namespace: default, service: ${ALLOWED_SERVICE}, port: 80, protocol: http}
    - {clusters: [mc1], namespace: default, service: ${METADATA_SERVICE}, port: 80, protocol: http}
YAML`,
    );
    const path = `/api/v1/namespaces/default/services/http:${METADATA_SERVICE}:80/proxy-service/latest/meta-data/`;
    let last: KubectlDone | undefined;
    // Until the gateway has read the new list (a 403 naming the Service before).
    await waitFor(
      "an answer past the allowlist",
      60_000,
      async () => ((last = await alice("mc1", ["get", "--raw", path])).stderr.includes("allowlist") ? undefined : last),
      1000,
    );
    assert.notEqual(last!.code, 0, last!.stdout);
    assert.match(last!.stderr, /refused by the agent's destination policy/, last!.stderr);
  });

  test("exec, attach and port-forward with only hub get are 403 naming create (WebSocket and SPDY); with create they work", async () => {
    const pod = await readyAppPod();
    const modes = Object.keys(KUBECTL_STREAMING_MODES) as KubectlStreamingMode[];
    const ticks = (k: KubectlProcess): boolean => k.lines.some((l) => /^tick \d+/.test(l.line));
    /** kubectl as bob ends refused (403 naming create), not streaming (`streaming`). */
    const refused = async (
      mode: KubectlStreamingMode,
      args: string[],
      streaming: (k: KubectlProcess) => boolean,
    ): Promise<void> => {
      const what = `kubectl ${args[0]} (${mode}) as bob, with hub get only`;
      const k = start("bob.kubeconfig", ["--context", "mc1", ...args], { ...KUBECTL_STREAMING_MODES[mode] });
      try {
        const how = await k.until(`${what} refused`, 60_000, () =>
          k.ended ? "ended" : streaming(k) ? "streamed" : undefined,
        );
        assert.equal(how, "ended", `${what} went through:\n${k.stdout}${k.stderr}`);
        const done = await k.exited;
        assert.notEqual(done.code, 0, what);
        assert.match(done.stderr, /create/, `${what}: ${done.stderr}`);
        assert.match(done.stderr, /managedclusters\/proxy/, `${what}: ${done.stderr}`);
      } finally {
        await stop(k);
      }
    };
    for (const mode of modes) {
      await refused(mode, ["exec", pod.name, "--", "sh", "-c", "echo exec-ran"], (k) => /exec-ran/.test(k.stdout));
      await refused(mode, ["attach", pod.name, "-c", "app"], ticks);
      await refused(mode, ["port-forward", `pod/${pod.name}`, "0:8080"], (k) => /Forwarding from/.test(k.stdout));
    }

    await operator(
      "the hub grants bob create on mc1",
      `kubectl apply -f - <<'YAML'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cluster-proxy-create-mc1}
rules:
  - apiGroups: [cluster.open-cluster-management.io]
    resources: [managedclusters/proxy]
    resourceNames: [mc1]
    verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: bob-cluster-proxy-create-mc1}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-proxy-create-mc1}
subjects:
  - {kind: ServiceAccount, name: bob, namespace: default}
YAML`,
    );
    try {
      for (const mode of modes) {
        const kenv: Record<string, string> = { ...KUBECTL_STREAMING_MODES[mode] };
        // Bounded by the gateway's authorization cache (a denial is cached for at most 1 s).
        let last: KubectlDone | undefined;
        await waitFor(
          `bob's exec with create (${mode})`,
          60_000,
          async () =>
            (last = await bob(["exec", pod.name, "--", "sh", "-c", "echo exec-ran"], kenv)).code === 0
              ? last
              : undefined,
          1000,
        ).catch((err: Error) => {
          throw new Error(`${err.message}\nlast: ${JSON.stringify(last)}`, { cause: err });
        });
        assert.equal(last?.stdout, "exec-ran\n");
        const attach = start("bob.kubeconfig", ["--context", "mc1", "attach", pod.name, "-c", "app"], kenv);
        try {
          await attach.until(`a tick line through attach (${mode})`, 60_000, () => ticks(attach));
        } finally {
          await stop(attach);
        }
        const pf = start("bob.kubeconfig", ["--context", "mc1", "port-forward", `pod/${pod.name}`, "0:8080"], kenv);
        try {
          const port = await pf.until(
            `Forwarding from (${mode})`,
            60_000,
            () => /127\.0\.0\.1:(\d+) -> 8080/.exec(pf.stdout)?.[1],
          );
          const r = env.exec("lab", "curl", ["-sS", "--max-time", "20", `http://127.0.0.1:${port}/pf-bob`]);
          assert.equal(r.stdout, `hello from ${pod.name} /pf-bob\n`);
        } finally {
          await stop(pf);
        }
      }
    } finally {
      deleteObjects("hub", [
        ["clusterrolebinding", "bob-cluster-proxy-create-mc1"],
        ["clusterrole", "cluster-proxy-create-mc1"],
      ]);
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
