/**
 * kube-apiserver's own konnectivity client through our proxy-server.
 *
 * A real kube-apiserver (with etcd, from scripts/k8s-binaries.mjs) runs in a control-plane network
 * namespace with an EgressSelectorConfiguration whose `cluster` egress goes to our proxy-server
 * over a Unix socket, once with `proxyProtocol: GRPC` and once with `HTTPConnect`. A validating
 * admission webhook is served, behind a Service, from a second namespace that only the agent's
 * side reaches: the Service's cluster IP exists on that namespace's loopback and nowhere else.
 * kube-apiserver sends Service-based webhook calls through the `cluster` egress, so
 * `kubectl create` only gets the webhook's answer when the apiserver's dial went through our
 * server and an agent: ours, then the Go proxy-agent. Without an agent the same create fails
 * with the apiserver's "failed calling webhook". Agents authenticate with a ServiceAccount token
 * the apiserver issued, checked by TokenReview against that same apiserver; the server runs with
 * the kubernetes.io konnectivity-server arguments.
 *
 * The namespaces are this test's own (`cpeg<pid>-cp`, `cpeg<pid>-cl`, joined by one veth pair);
 * traffic stays inside them. Needs root and iproute2 (skipped otherwise).
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { NODE_FLAGS } from "@cluster-proxy/cli";
import { kubeconfig } from "../infra/env/pki.js";
import { Harness } from "../framework/harness.js";
import { REPO } from "../framework/repo.js";
import { failIfMissing, prerequisiteSkip } from "../framework/prerequisites.js";
import { waitFor } from "../framework/waits.js";
import { type Proc } from "../framework/process.js";
import { goBin, notePairing, reportPairings } from "../framework/go-harness.js";
import { errorMessage } from "@cluster-proxy/errors";

const PREFIX = `cpeg${process.pid}-`;
const NS_CP = `${PREFIX}cp`; // etcd, kube-apiserver, proxy-server
const NS_CL = `${PREFIX}cl`; // agent and webhook: the "cluster network"
const VETH_CP = `eg${process.pid}a`;
const VETH_CL = `eg${process.pid}b`;
const CP_ADDR = "10.231.0.1";
const CL_ADDR = "10.231.0.2";
const SERVICE_CIDR = "10.96.0.0/16";
const WEBHOOK_IP = "10.96.77.77";
const AGENT_PORT = 8132;
const ADMIN_PORT = 8133;
const HEALTH_PORT = 8134;
const AUDIENCE = "system:konnectivity-server";

const prerequisites = prerequisiteSkip(
  process.getuid?.() === 0 && spawnSync("ip", ["netns", "list"], { stdio: "ignore" }).status === 0
    ? undefined
    : "needs root and iproute2 (network namespaces)",
);

function sh(cmd: string, args: string[], input?: string): string {
  return execFileSync(cmd, args, { encoding: "utf8", input, stdio: ["pipe", "pipe", "pipe"], timeout: 60_000 });
}

/** openssl: a CA and leaves signed by it (EC P-256). */
class Pki {
  constructor(readonly dir: string) {
    mkdirSync(dir, { recursive: true });
  }
  file(name: string): string {
    return join(this.dir, name);
  }
  key(name: string): void {
    sh("openssl", [
      "genpkey",
      "-algorithm",
      "EC",
      "-pkeyopt",
      "ec_paramgen_curve:P-256",
      "-out",
      this.file(`${name}.key`),
    ]);
  }
  ca(): void {
    this.key("ca");
    sh("openssl", [
      "req",
      "-x509",
      "-new",
      "-key",
      this.file("ca.key"),
      "-subj",
      "/CN=cpeg-ca",
      "-days",
      "2",
      "-addext",
      "basicConstraints=critical,CA:TRUE",
      "-addext",
      "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
      "-out",
      this.file("ca.crt"),
    ]);
  }
  leaf(name: string, subj: string, ext: string): void {
    this.key(name);
    const csr = sh("openssl", ["req", "-new", "-key", this.file(`${name}.key`), "-subj", subj]);
    writeFileSync(this.file(`${name}.ext`), ext);
    sh(
      "openssl",
      [
        "x509",
        "-req",
        "-CA",
        this.file("ca.crt"),
        "-CAkey",
        this.file("ca.key"),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        this.file(`${name}.ext`),
        "-out",
        this.file(`${name}.crt`),
      ],
      csr,
    );
  }
}

/** Poll `check` once a second until true (bounded); on timeout, say so with `proc`'s last output. */
async function waitAlive(proc: Proc, what: string, check: () => boolean, timeoutMs: number): Promise<void> {
  try {
    await waitFor(what, () => proc.child.exitCode === null && check(), timeoutMs, 1000);
  } catch (err) {
    const state = proc.child.exitCode === null ? "still running" : `exited ${proc.child.exitCode}`;
    throw new Error(`${errorMessage(err)} (${proc.name} ${state}):\n${proc.output().slice(-3000)}`, {
      cause: err,
    });
  }
}

function k8sBin(): string {
  const out = execFileSync(process.execPath, [join(REPO, "scripts/k8s-binaries.mjs")], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
    timeout: 80 * 60_000,
  });
  return join(out.trim().split("\n").pop() ?? "", "bin");
}

describe(
  "kube-apiserver's egress selector through our proxy-server",
  { skip: prerequisites.skip, timeout: 900_000 },
  () => {
    const h = new Harness();
    let bin: string;
    let pki: Pki;
    let adminConf: string;
    let tokenFile: string;
    let etcd: Proc | undefined;

    const kubectl = (args: string[], input?: string): { code: number; out: string; err: string } => {
      const r = spawnSync("ip", ["netns", "exec", NS_CP, join(bin, "kubectl"), `--kubeconfig=${adminConf}`, ...args], {
        encoding: "utf8",
        input,
        timeout: 60_000,
      });
      return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
    };
    const curlInCp = (url: string): number => {
      const r = spawnSync(
        "ip",
        ["netns", "exec", NS_CP, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "5", url],
        {
          encoding: "utf8",
          timeout: 15_000,
        },
      );
      return Number(r.stdout || 0);
    };
    const spawnIn = (ns: string, name: string, cmd: string, args: string[]): Proc =>
      h.spawnProc(name, "ip", ["netns", "exec", ns, cmd, ...args]);

    before(async () => {
      failIfMissing(prerequisites.missing);
      bin = k8sBin();
      await h.init([], [CP_ADDR]);
      // Namespaces and the one link between them.
      for (const ns of [NS_CP, NS_CL]) {
        sh("ip", ["netns", "add", ns]);
        sh("ip", ["-n", ns, "link", "set", "lo", "up"]);
      }
      sh("ip", ["link", "add", VETH_CP, "netns", NS_CP, "type", "veth", "peer", "name", VETH_CL, "netns", NS_CL]);
      sh("ip", ["-n", NS_CP, "addr", "add", `${CP_ADDR}/30`, "dev", VETH_CP]);
      sh("ip", ["-n", NS_CL, "addr", "add", `${CL_ADDR}/30`, "dev", VETH_CL]);
      sh("ip", ["-n", NS_CP, "link", "set", VETH_CP, "up"]);
      sh("ip", ["-n", NS_CL, "link", "set", VETH_CL, "up"]);
      // The webhook Service's cluster IP lives only on the cluster side's loopback.
      sh("ip", ["-n", NS_CL, "addr", "add", `${WEBHOOK_IP}/32`, "dev", "lo"]);

      pki = new Pki(join(h.dir, "k8s-pki"));
      pki.ca();
      pki.leaf(
        "apiserver",
        "/CN=kube-apiserver",
        `subjectAltName=IP:127.0.0.1,IP:${CP_ADDR},IP:10.96.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n`,
      );
      pki.leaf("admin", "/O=system:masters/CN=cpeg-admin", "extendedKeyUsage=clientAuth\n");
      pki.leaf(
        "webhook",
        "/CN=egress-webhook",
        "subjectAltName=DNS:egress-webhook.default.svc\nextendedKeyUsage=serverAuth\n",
      );
      pki.key("sa");
      sh("openssl", ["pkey", "-in", pki.file("sa.key"), "-pubout", "-out", pki.file("sa.pub")]);
      adminConf = join(h.dir, "admin.conf");
      writeFileSync(
        adminConf,
        kubeconfig("https://127.0.0.1:6443", pki.file("ca.crt"), pki.file("admin.crt"), pki.file("admin.key"), "admin"),
      );

      etcd = spawnIn(NS_CP, "etcd", join(bin, "etcd"), [
        "--name=cpeg",
        `--data-dir=${join(h.dir, "etcd")}`,
        "--listen-client-urls=http://127.0.0.1:2379",
        "--advertise-client-urls=http://127.0.0.1:2379",
        "--listen-peer-urls=http://127.0.0.1:2380",
        "--initial-advertise-peer-urls=http://127.0.0.1:2380",
        "--initial-cluster=cpeg=http://127.0.0.1:2380",
        "--listen-metrics-urls=http://127.0.0.1:2381",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
      ]);
      spawnIn(NS_CL, "webhook", process.execPath, [
        join(REPO, "test/egress/webhook-server.mjs"),
        WEBHOOK_IP,
        "443",
        pki.file("webhook.crt"),
        pki.file("webhook.key"),
      ]);
    });

    after(async () => {
      await h.close();
      for (const ns of [NS_CP, NS_CL]) spawnSync("ip", ["netns", "del", ns], { stdio: "ignore" });
      reportPairings("egress-selector.test.ts");
    });

    /** Start kube-apiserver with the `cluster` egress to `socket` in `protocol`; resolves when ready. */
    async function startApiserver(protocol: "GRPC" | "HTTPConnect", socket: string): Promise<Proc> {
      const egress = join(h.dir, `egress-${protocol}.yaml`);
      writeFileSync(
        egress,
        [
          "apiVersion: apiserver.k8s.io/v1beta1",
          "kind: EgressSelectorConfiguration",
          "egressSelections:",
          "- name: cluster",
          "  connection:",
          `    proxyProtocol: ${protocol}`,
          "    transport:",
          "      uds:",
          `        udsName: ${socket}`,
          "- name: controlplane",
          "  connection:",
          "    proxyProtocol: Direct",
          "- name: etcd",
          "  connection:",
          "    proxyProtocol: Direct",
          "",
        ].join("\n"),
      );
      const proc = spawnIn(NS_CP, `kube-apiserver-${protocol}`, join(bin, "kube-apiserver"), [
        "--etcd-servers=http://127.0.0.1:2379",
        "--bind-address=127.0.0.1",
        "--secure-port=6443",
        `--advertise-address=${CP_ADDR}`,
        `--cert-dir=${join(h.dir, "apiserver-certs")}`,
        `--tls-cert-file=${pki.file("apiserver.crt")}`,
        `--tls-private-key-file=${pki.file("apiserver.key")}`,
        `--client-ca-file=${pki.file("ca.crt")}`,
        `--service-cluster-ip-range=${SERVICE_CIDR}`,
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        `--service-account-key-file=${pki.file("sa.pub")}`,
        `--service-account-signing-key-file=${pki.file("sa.key")}`,
        "--authorization-mode=RBAC",
        "--enable-priority-and-fairness=false",
        "--profiling=false",
        `--egress-selector-config-file=${egress}`,
        "--v=1",
      ]);
      await waitAlive(
        proc,
        `kube-apiserver (${protocol}) /readyz`,
        () => kubectl(["get", "--raw", "/readyz"]).out.trim() === "ok",
        180_000,
      );
      return proc;
    }

    /** The Service, the webhook configuration, the agents' ServiceAccount and its token (once). */
    function setUpCluster(): void {
      if (tokenFile) return;
      const caBundle = sh("base64", ["-w0", pki.file("ca.crt")]).trim();
      const apply = kubectl(
        ["apply", "-f", "-"],
        JSON.stringify({
          apiVersion: "v1",
          kind: "List",
          items: [
            {
              apiVersion: "v1",
              kind: "ServiceAccount",
              metadata: { name: "konnectivity-agent", namespace: "kube-system" },
            },
            {
              apiVersion: "v1",
              kind: "Service",
              metadata: { name: "egress-webhook", namespace: "default" },
              spec: { clusterIP: WEBHOOK_IP, ports: [{ port: 443, targetPort: 443 }] },
            },
            {
              apiVersion: "admissionregistration.k8s.io/v1",
              kind: "ValidatingWebhookConfiguration",
              metadata: { name: "egress-probe" },
              webhooks: [
                {
                  name: "egress-probe.cluster-proxy.test",
                  clientConfig: { service: { namespace: "default", name: "egress-webhook", port: 443 }, caBundle },
                  rules: [{ apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"] }],
                  objectSelector: { matchLabels: { "egress-probe": "true" } },
                  failurePolicy: "Fail",
                  sideEffects: "None",
                  admissionReviewVersions: ["v1"],
                  timeoutSeconds: 10,
                },
              ],
            },
          ],
        }),
      );
      assert.equal(apply.code, 0, apply.err);
      const token = kubectl([
        "create",
        "token",
        "konnectivity-agent",
        "-n",
        "kube-system",
        `--audience=${AUDIENCE}`,
        "--duration=2h",
      ]);
      assert.equal(token.code, 0, token.err);
      tokenFile = join(h.dir, "konnectivity-agent-token");
      writeFileSync(tokenFile, token.out.trim());
    }

    /** `kubectl create` of a labelled ConfigMap: the webhook (through the tunnel) must answer. */
    function probe(name: string): { code: number; err: string } {
      const r = kubectl(
        ["create", "-f", "-"],
        JSON.stringify({
          apiVersion: "v1",
          kind: "ConfigMap",
          metadata: { name, namespace: "default", labels: { "egress-probe": "true" } },
        }),
      );
      return { code: r.code, err: r.err };
    }

    for (const protocol of ["GRPC", "HTTPConnect"] as const) {
      test(`${protocol} over a Unix socket: a Service webhook behind our agent and behind the Go agent`, async () => {
        const socket = join(h.dir, `konnectivity-${protocol}.socket`);
        // The kubernetes.io konnectivity-server arguments, in this protocol's mode.
        const server = spawnIn(NS_CP, `proxy-server-${protocol}`, process.execPath, [
          ...NODE_FLAGS,
          join(REPO, "packages/cli/dist/proxy-server.js"),
          "--logtostderr=true",
          `--uds-name=${socket}`,
          "--delete-existing-uds-file",
          `--cluster-cert=${h.certs.server.cert}`,
          `--cluster-key=${h.certs.server.key}`,
          `--mode=${protocol === "GRPC" ? "grpc" : "http-connect"}`,
          "--server-port=0",
          `--agent-port=${AGENT_PORT}`,
          `--admin-port=${ADMIN_PORT}`,
          `--health-port=${HEALTH_PORT}`,
          "--agent-namespace=kube-system",
          "--agent-service-account=konnectivity-agent",
          `--kubeconfig=${adminConf}`,
          `--authentication-audience=${AUDIENCE}`,
        ]);
        const apiserver = await startApiserver(protocol, socket);
        setUpCluster();
        await waitAlive(
          server,
          "proxy-server /healthz",
          () => curlInCp(`http://127.0.0.1:${HEALTH_PORT}/healthz`) === 200,
          60_000,
        );

        // No agent: the apiserver's dial has nowhere to go, and the create fails without the webhook's answer.
        const lonely = probe(`no-agent-${protocol.toLowerCase()}`);
        assert.notEqual(lonely.code, 0);
        assert.match(lonely.err, /failed calling webhook/);
        assert.doesNotMatch(lonely.err, /reached through the agent/);

        // The kubernetes.io konnectivity-agent arguments (our agent, then the Go agent).
        const agentArgs = [
          "--logtostderr=true",
          `--ca-cert=${h.certs.ca.cert}`,
          `--proxy-server-host=${CP_ADDR}`,
          `--proxy-server-port=${AGENT_PORT}`,
          `--admin-server-port=${ADMIN_PORT}`,
          `--health-server-port=${HEALTH_PORT}`,
          `--service-account-token-path=${tokenFile}`,
        ];
        for (const kind of ["ours", "go"] as const) {
          const agent =
            kind === "ours"
              ? spawnIn(NS_CL, `agent-${kind}-${protocol}`, process.execPath, [
                  ...NODE_FLAGS,
                  join(REPO, "packages/cli/dist/proxy-agent.js"),
                  ...agentArgs,
                ])
              : spawnIn(NS_CL, `agent-${kind}-${protocol}`, join(goBin(), "proxy-agent"), agentArgs);
          await waitAlive(
            agent,
            `${kind} agent connected (server /readyz)`,
            () => curlInCp(`http://127.0.0.1:${HEALTH_PORT}/readyz`) === 200,
            60_000,
          );
          const r = probe(`via-${kind}-${protocol.toLowerCase()}`);
          assert.notEqual(r.code, 0, "the webhook denies the create");
          assert.match(
            r.err,
            /admission webhook "egress-probe\.cluster-proxy\.test" denied the request: egress-webhook: reached through the agent/,
          );
          notePairing(
            `kube-apiserver egress ${protocol} (UDS) -> our proxy-server -> ${kind === "ours" ? "our" : "Go"} proxy-agent -> Service webhook`,
          );
          await agent.kill("SIGKILL");
          await waitFor(
            "server readiness to drop",
            () => curlInCp(`http://127.0.0.1:${HEALTH_PORT}/readyz`) !== 200,
            30_000,
            500,
          );
        }
        await apiserver.kill("SIGTERM");
        await server.kill("SIGTERM");
      });
    }

    test("etcd stayed up", () => {
      assert.equal(etcd?.child.exitCode, null);
    });
  },
);
