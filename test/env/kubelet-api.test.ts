// The kubelet API of the test environment, through the real kube-apiserver and the real kubectl:
// logs (tail, timestamps, follow, previous), exec (environment, stdin, tty, exit status, the pod's
// namespaces), port-forward and attach, against every cluster, over both of kubectl's client
// protocols (WebSocket, the default, and SPDY). kube-apiserver speaks SPDY/3.1 to the kubelet
// (test/infra/k8s/kubelet-api) either way. Needs root and Go, like env.test.ts.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { CLUSTERS, type ClusterName, HOST_ADDR, KUBELET_PORT, nsOf } from "../infra/env/config.js";
import { waitFor } from "../infra/env/exec.js";
import { type TestEnv, nodeScriptDeployment, startTestEnv } from "../infra/env/fixture.js";
import {
  KUBECTL_STREAMING_MODES,
  execTolerantOfSpdyLoss,
  type KubectlStreamingMode,
} from "../infra/env/kubectl-streaming.js";
import { type KubectlDone as Done, KubectlProcess, runKubectl } from "../infra/env/kubectl-process.js";

const NS = "default";
const APP = "kubelet-api-demo";

// The pod: announces itself, writes to stderr, ticks (with its clock) every 200 ms, serves HTTP on
// 8080 (/exit ends the process: a restart), and echoes what arrives on its stdin (kubectl attach -i).
const POD_SCRIPT = `
const http = require("node:http");
console.log("started " + process.env.POD_NAME);
console.error("a line on stderr");
let n = 0;
setInterval(() => console.log("tick " + n++ + " " + Date.now()), 200);
http.createServer((q, s) => {
  s.end("hello from " + process.env.POD_NAME + "\\n");
  if (q.url === "/exit") {
    console.log("exit requested");
    setTimeout(() => process.exit(3), 50);
  }
}).listen(8080);
process.stdin.on("data", (d) => console.log("stdin: " + d.toString().trim()));
`;

const MODES = KUBECTL_STREAMING_MODES;
type Mode = KubectlStreamingMode;

const shellQuote = (a: string): string => `'${a.replace(/'/g, `'\\''`)}'`;

/** Runs a command in the test's own namespace to its end (bounded, 60 s). */
function runLocal(cmd: string, args: string[], extraEnv: Record<string, string>): Promise<Done> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { env: { ...process.env, ...extraEnv }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const t = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.on("close", (code) => {
      clearTimeout(t);
      resolve({ code, stdout, stderr });
    });
  });
}

describe("kubelet API: logs, exec, attach, port-forward through kube-apiserver", { timeout: 60 * 60_000 }, () => {
  let env: TestEnv;
  const pods = new Map<ClusterName, { name: string; ip: string }>();

  /** Runs kubectl to its end (bounded), with optional stdin. */
  const kubectl = (
    c: ClusterName,
    args: string[],
    opts: { env?: Record<string, string>; input?: string; timeoutMs?: number } = {},
  ): Promise<Done> => runKubectl(env, env.kubeconfigPath(c), ["--request-timeout=60s", ...args], opts);
  /** A long-running kubectl against cluster `c`. */
  const kubectlProcess = (c: ClusterName, args: string[], extraEnv: Record<string, string> = {}): KubectlProcess =>
    new KubectlProcess(env, env.kubeconfigPath(c), args, { env: extraEnv });

  const readyPod = async (c: ClusterName): Promise<{ name: string; ip: string; restarts: number }> =>
    waitFor(`a ready ${APP} pod in ${c}`, 120_000, async () => {
      const list = await env.core(c).listNamespacedPod({ namespace: NS, labelSelector: `app=${APP}` });
      const p = list.items.find(
        (x) =>
          !x.metadata?.deletionTimestamp &&
          x.status?.conditions?.some((cd) => cd.type === "Ready" && cd.status === "True"),
      );
      return p
        ? {
            name: p.metadata!.name!,
            ip: p.status!.podIP!,
            restarts: p.status?.containerStatuses?.[0]?.restartCount ?? 0,
          }
        : null;
    });

  before(
    async () => {
      env = await startTestEnv();
      const body = nodeScriptDeployment({
        name: APP,
        script: POD_SCRIPT,
        port: 8080,
        portName: "http",
        stdin: true,
        env: [{ name: "POD_IP", valueFrom: { fieldRef: { fieldPath: "status.podIP" } } }],
      });
      for (const c of CLUSTERS) {
        await env
          .apps(c)
          .deleteNamespacedDeployment({ name: APP, namespace: NS })
          .catch(() => undefined);
        await waitFor(`old ${APP} pods gone in ${c}`, 60_000, async () => {
          const list = await env.core(c).listNamespacedPod({ namespace: NS, labelSelector: `app=${APP}` });
          return list.items.length === 0;
        });
        await env.apps(c).createNamespacedDeployment({ namespace: NS, body });
      }
      for (const c of CLUSTERS) pods.set(c, await readyPod(c));
    },
    { timeout: 90 * 60_000 },
  );

  after(async () => {
    for (const c of CLUSTERS)
      await env
        ?.apps(c)
        .deleteNamespacedDeployment({ name: APP, namespace: NS })
        .catch(() => undefined);
    await env?.close();
  });

  test("each cluster has a Ready Node whose kubelet endpoint is the node address", async () => {
    for (const c of CLUSTERS) {
      const node = await env.core(c).readNode({ name: c });
      const internal = node.status?.addresses?.find((a) => a.type === "InternalIP");
      assert.equal(internal?.address, HOST_ADDR[c]);
      assert.equal(node.status?.daemonEndpoints?.kubeletEndpoint?.Port, KUBELET_PORT);
      assert.equal(node.status?.conditions?.find((x) => x.type === "Ready")?.status, "True");
      const out = await kubectl(c, ["get", "pods", "-o", "wide", "-l", `app=${APP}`]);
      assert.match(out.stdout, new RegExp(`${pods.get(c)!.name}\\s+1/1\\s+Running.*\\s${c}\\s`));
    }
  });

  test("the kubelet API accepts only the apiserver's kubelet client certificate", () => {
    // From the node itself, without a client certificate: the TLS handshake is refused.
    const r = env.exec(
      "mc1",
      "curl",
      ["-sS", "-k", "--max-time", "10", `https://${HOST_ADDR.mc1}:${KUBELET_PORT}/healthz`],
      { allowFail: true },
    );
    assert.notEqual(r.status, 0, `curl without a client certificate: ${r.stdout}${r.stderr}`);
  });

  for (const c of CLUSTERS) {
    describe(`in ${c}`, () => {
      test("kubectl logs: stdout and stderr, --tail, --timestamps", async () => {
        const { name } = pods.get(c)!;
        const all = await kubectl(c, ["logs", name]);
        assert.equal(all.code, 0, all.stderr);
        assert.match(all.stdout, new RegExp(`^started ${name}$`, "m"));
        assert.match(all.stdout, /^a line on stderr$/m);
        assert.match(all.stdout, /^tick \d+ \d+$/m);
        const tail = await kubectl(c, ["logs", name, "--tail=2"]);
        assert.equal(tail.code, 0, tail.stderr);
        assert.equal(tail.stdout.trimEnd().split("\n").length, 2, tail.stdout);
        const ts = await kubectl(c, ["logs", name, "--tail=1", "--timestamps"]);
        assert.match(ts.stdout, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z tick \d+ \d+\n$/);
        const container = await kubectl(c, ["logs", name, "-c", "nope"]);
        assert.notEqual(container.code, 0);
        assert.match(container.stderr, /container .*nope.* (is not valid|not found)/);
      });

      test("kubectl logs -f: a line written by the pod appears within 1 s", async (t) => {
        const { name } = pods.get(c)!;
        const k = kubectlProcess(c, ["logs", "-f", "--tail=1", name]);
        try {
          const first = k.lines.length;
          await k.until("10 followed tick lines", 30_000, () => k.lines.length >= first + 11);
          const delays = k.lines
            .slice(first + 1, first + 11)
            .map(({ at, line }) => {
              const m = /^tick \d+ (\d+)$/.exec(line);
              assert.ok(m, `unexpected line ${line}`);
              return at - Number(m[1]);
            })
            .sort((a, b) => a - b);
          t.diagnostic(
            `logs -f latency in ${c} (10 lines): median ${delays[5]} ms, max ${delays[9]} ms, min ${delays[0]} ms`,
          );
          assert.ok(delays[9]! < 1_000, `a line took ${delays[9]} ms: ${delays.join(", ")}`);
        } finally {
          await k.stop();
        }
      });

      for (const mode of Object.keys(MODES) as Mode[]) {
        const kenv = MODES[mode];
        test(`kubectl exec (${mode}): environment, the pod's namespaces, stdin, exit status`, async (t) => {
          const { name, ip } = pods.get(c)!;
          const echo = await kubectl(c, ["exec", name, "--", "sh", "-c", "echo $POD_IP"], { env: kenv });
          assert.equal(echo.code, 0, echo.stderr);
          assert.equal(echo.stdout, `${ip}\n`);
          // The pod's network namespace (its address on eth0) and mount namespace (the service
          // account files at their well-known path, bind-mounted only inside the pod).
          const where = await kubectl(
            c,
            [
              "exec",
              name,
              "-c",
              "app",
              "--",
              "sh",
              "-c",
              "ip -4 -o addr show dev eth0; cat /var/run/secrets/kubernetes.io/serviceaccount/namespace",
            ],
            { env: kenv },
          );
          assert.equal(where.code, 0, where.stderr);
          assert.match(where.stdout, new RegExp(`inet ${ip.replace(/\./g, "\\.")}/32`));
          assert.match(where.stdout, new RegExp(`${NS}$`));
          const stdin = await execTolerantOfSpdyLoss(
            mode,
            () =>
              kubectl(c, ["exec", "-i", name, "--", "sh", "-c", "read a; read b; echo got:$a:$b >&2"], {
                env: kenv,
                input: "one\ntwo\n",
              }),
            (r) => r.stderr !== "",
            (m) => t.diagnostic(m),
          );
          assert.equal(stdin.code, 0, stdin.stderr);
          assert.equal(stdin.stderr, "got:one:two\n");
          const fail = await kubectl(c, ["exec", name, "--", "sh", "-c", "echo bye; exit 7"], { env: kenv });
          assert.equal(fail.code, 7, fail.stderr);
          assert.equal(fail.stdout, "bye\n");
          assert.match(fail.stderr, /command terminated with exit code 7/);
        });

        test(`kubectl exec -it (${mode}): a terminal of the size kubectl's terminal has`, async () => {
          const { name } = pods.get(c)!;
          // script(1) gives kubectl a terminal (40 rows, 100 columns), so that it asks for one in
          // the pod and sends its size; the shell around kubectl prints kubectl's exit status.
          const kubectlArgv = [
            "ip",
            ...["netns", "exec", nsOf("lab"), join(env.state.binDir, "kubectl")],
            ...["--kubeconfig", env.kubeconfigPath(c), "exec", "-it", name, "--"],
            ...["sh", "-c", "tty; stty size; exit 3"],
          ];
          const inner = `stty rows 40 cols 100; ${kubectlArgv.map(shellQuote).join(" ")}; echo "kubectl exit=$?"`;
          const r = await runLocal("script", ["-qc", inner, "/dev/null"], kenv);
          assert.match(r.stdout, /kubectl exit=3/, `${r.stdout}${r.stderr}`);
          // (script echoes its empty input as "^@" before the output)
          assert.match(r.stdout, /\/dev\/pts\/\d+\r?$/m);
          assert.match(r.stdout, /40 100\r?$/m);
        });

        test(`kubectl port-forward (${mode}): a request through it reaches the pod`, async () => {
          const { name } = pods.get(c)!;
          const k = kubectlProcess(c, ["port-forward", `pod/${name}`, "0:8080"], kenv);
          try {
            const port = await k.until(
              "Forwarding from",
              60_000,
              () => /127\.0\.0\.1:(\d+) -> 8080/.exec(k.stdout)?.[1],
            );
            for (let i = 0; i < 3; i++) {
              const r = env.exec("lab", "curl", ["-sS", "--max-time", "20", `http://127.0.0.1:${port}/`]);
              assert.equal(r.stdout, `hello from ${name}\n`);
            }
          } finally {
            await k.stop();
          }
        });

        test(`kubectl attach (${mode}): the container's output, and its stdin`, async () => {
          const { name } = pods.get(c)!;
          const k = kubectlProcess(c, ["attach", "-i", name, "-c", "app"], kenv);
          try {
            await k.until("a tick line through attach", 60_000, () => k.lines.some((l) => /^tick \d+/.test(l.line)));
            k.child.stdin!.write(`ping ${mode}\n`);
            await k.until("the echo of stdin", 30_000, () => k.lines.some((l) => l.line === `stdin: ping ${mode}`));
          } finally {
            await k.stop();
          }
        });
      }
    });
  }

  test("kubectl logs -f ends when the container exits; --previous shows the run before (mc1)", async () => {
    const before = pods.get("mc1")!;
    const follow = kubectlProcess("mc1", ["logs", "-f", "--tail=1", before.name]);
    await follow.until("a followed line", 30_000, () => follow.lines.length > 0);
    const r = await env.podExec("mc1", NS, before.name, "curl", [
      "-sS",
      "--max-time",
      "10",
      "http://127.0.0.1:8080/exit",
    ]);
    assert.equal(r.stdout, `hello from ${before.name}\n`);
    // As with a kubelet: the stream ends (kubectl exits 0) once the container has stopped.
    const killer = setTimeout(() => follow.child.kill("SIGKILL"), 30_000);
    const ended = await follow.exited;
    clearTimeout(killer);
    assert.equal(ended.code, 0, ended.stderr);
    assert.match(ended.stdout, /^exit requested$/m);
    const now = await waitFor("the container restarted", 60_000, async () => {
      const p = await readyPod("mc1");
      return p.restarts >= 1 ? p : null;
    });
    assert.equal(now.name, before.name);
    const prev = await kubectl("mc1", ["logs", "--previous", now.name]);
    assert.equal(prev.code, 0, prev.stderr);
    assert.match(prev.stdout, /^exit requested$/m);
    const cur = await kubectl("mc1", ["logs", now.name]);
    assert.doesNotMatch(cur.stdout, /exit requested/);
    assert.match(cur.stdout, new RegExp(`^started ${now.name}$`, "m"));
  });
});
