/**
 * Drop-in proof: our `proxy-server` and `proxy-agent` executables started with the exact
 * argument lists of real deployments of the Go binaries, and then used.
 *
 * - upstream konnectivity (apiserver-network-proxy v0.36.0 `examples/kubernetes/konnectivity-*.yaml`
 *   and the kubernetes.io "Set up Konnectivity service" manifests): a server on a Unix socket in
 *   http-connect and in grpc mode, agents authenticated by ServiceAccount token;
 * - a GKE-style agent (`-v=3 --sync-forever=true --probe-interval=5s --keepalive-time=60s`);
 * - the OCM cluster-proxy addon: the proxy-server Deployment's arguments (`manifests.go`, with the
 *   TLS profile's `--cipher-suites`) and the proxy-agent Deployment's (`addon-agent-deployment.yaml`).
 *
 * Only file paths, hosts (127.0.0.1) and, where two processes of one manifest would collide on
 * this one machine, port numbers are substituted; every flag is passed as the manifest writes it.
 * The ServiceAccount tokens are checked by a small TokenReview endpoint of this test (the
 * egress-selector suite does the same against a real kube-apiserver). The Go agent is run with
 * the upstream agent arguments too, against our server.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { once } from "node:events";
import { readFile, writeFile } from "node:fs/promises";
import * as https from "node:https";
import * as net from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { dial } from "@cluster-proxy/client";
import { NODE_FLAGS } from "@cluster-proxy/cli";
import { REPO } from "../framework/repo.js";
import { echoServer, freePort, Harness } from "../framework/harness.js";
import { httpGet } from "../framework/http.js";
import { waitFor } from "../framework/waits.js";
import { waitForProc, type Proc } from "../framework/process.js";
import { goBin, metric, notePairing, reportPairings } from "../framework/go-harness.js";

const PROXY_SERVER = join(REPO, "packages/cli/dist/proxy-server.js");
const PROXY_AGENT = join(REPO, "packages/cli/dist/proxy-agent.js");
const AUDIENCE = "system:konnectivity-server";
const GOOD_TOKEN = "token-of-kube-system-konnectivity-agent";
const OTHER_SA_TOKEN = "token-of-kube-system-default";

/** A TokenReview endpoint: answers like kube-apiserver for two known tokens, counts reviews. */
async function startTokenReviewer(h: Harness): Promise<{ port: number; reviews: () => number }> {
  const [cert, key] = await Promise.all([readFile(h.certs.server.cert), readFile(h.certs.server.key)]);
  let reviews = 0;
  const server = https.createServer({ cert, key }, (req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      if (req.method !== "POST" || req.url?.split("?")[0] !== "/apis/authentication.k8s.io/v1/tokenreviews") {
        res.writeHead(404).end();
        return;
      }
      reviews++;
      const review = JSON.parse(body) as { spec: { token: string; audiences?: string[] } };
      const audienceOk = review.spec.audiences?.includes(AUDIENCE) === true;
      const users: Record<string, string> = {
        [GOOD_TOKEN]: "system:serviceaccount:kube-system:konnectivity-agent",
        [OTHER_SA_TOKEN]: "system:serviceaccount:kube-system:default",
      };
      const username = users[review.spec.token];
      const status =
        username && audienceOk
          ? { authenticated: true, user: { username }, audiences: [AUDIENCE] }
          : { authenticated: false, error: username ? "token audiences mismatch" : "invalid bearer token" };
      res.writeHead(201, { "content-type": "application/json" });
      res.end(
        JSON.stringify({ apiVersion: "authentication.k8s.io/v1", kind: "TokenReview", spec: review.spec, status }),
      );
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  h.onClose(() => new Promise<void>((r) => server.close(() => r())));
  return { port: (server.address() as net.AddressInfo).port, reviews: () => reviews };
}

async function echoThrough(socket: net.Socket | NodeJS.ReadWriteStream, text: string): Promise<string> {
  let got = "";
  const done = new Promise<void>((resolve, reject) => {
    socket.on("data", (c: Buffer) => {
      got += c.toString();
      if (got.length >= text.length) resolve();
    });
    socket.on("error", reject);
  });
  socket.write(text);
  await Promise.race([
    done,
    new Promise((_, reject) => setTimeout(() => reject(new Error(`no echo of ${text} within 10 s`)), 10_000)),
  ]);
  return got;
}

/** HTTP CONNECT over a Unix socket (what kube-apiserver's HTTPConnect egress does). */
async function connectOverUds(path: string, target: string): Promise<net.Socket> {
  const socket = net.connect(path);
  await once(socket, "connect");
  socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
  let head = "";
  while (!head.includes("\r\n\r\n")) {
    const [chunk] = (await Promise.race([
      once(socket, "data"),
      new Promise((_, reject) => setTimeout(() => reject(new Error("no CONNECT answer within 10 s")), 10_000)),
    ])) as [Buffer];
    head += chunk.toString("latin1");
  }
  assert.match(head, /^HTTP\/1\.1 200/, head);
  return socket;
}

function ourServer(h: Harness, name: string, args: string[]): Proc {
  return h.spawnProc(name, process.execPath, [...NODE_FLAGS, PROXY_SERVER, ...args]);
}
function ourAgent(h: Harness, name: string, args: string[]): Proc {
  return h.spawnProc(name, process.execPath, [...NODE_FLAGS, PROXY_AGENT, ...args]);
}

async function healthy(proc: Proc, port: number, path: string): Promise<void> {
  await waitForProc(proc, `${proc.name} ${path} on ${port}`, async () => {
    const r = await httpGet(`http://127.0.0.1:${port}${path}`).catch(() => ({ status: 0 }));
    return r.status === 200;
  });
}

describe("our binaries with the argument lists of real Go deployments", { timeout: 240_000 }, () => {
  const h = new Harness();
  let reviewer: { port: number; reviews: () => number };
  let echo: number;
  let kubeconfig: string;
  let tokenFile: string;
  let otherTokenFile: string;

  before(async () => {
    await h.init(["east"]);
    reviewer = await startTokenReviewer(h);
    echo = await echoServer(h);
    kubeconfig = join(h.dir, "konnectivity-server.conf");
    await writeFile(
      kubeconfig,
      [
        "apiVersion: v1",
        "kind: Config",
        "clusters:",
        "- name: kubernetes",
        "  cluster:",
        `    server: https://127.0.0.1:${reviewer.port}`,
        `    certificate-authority: ${h.certs.ca.cert}`,
        "users:",
        "- name: system:konnectivity-server",
        "  user:",
        "    token: konnectivity-server-token",
        "contexts:",
        "- name: system:konnectivity-server@kubernetes",
        "  context: { cluster: kubernetes, user: system:konnectivity-server }",
        "current-context: system:konnectivity-server@kubernetes",
        "",
      ].join("\n"),
    );
    tokenFile = join(h.dir, "konnectivity-agent-token");
    otherTokenFile = join(h.dir, "other-token");
    await writeFile(tokenFile, GOOD_TOKEN); // projected tokens have no trailing newline
    await writeFile(otherTokenFile, OTHER_SA_TOKEN);
  });
  after(async () => {
    await h.close();
    reportPairings("manifests.test.ts");
  });

  test("upstream examples/kubernetes: http-connect on a Unix socket, log file, token-authenticated agents (ours and Go's)", async () => {
    const socket = join(h.dir, "konnectivity-server.socket");
    const logFile = join(h.dir, "konnectivity-server.log");
    const [agentPort, healthPort, adminPort] = [await freePort(), await freePort(), await freePort()];
    // examples/kubernetes/konnectivity-server.yaml, args verbatim but paths and ports.
    const server = ourServer(h, "upstream-server", [
      `--log-file=${logFile}`,
      "--logtostderr=false",
      "--log-file-max-size=0",
      `--uds-name=${socket}`,
      `--cluster-cert=${h.certs.server.cert}`,
      `--cluster-key=${h.certs.server.key}`,
      "--server-port=0",
      `--agent-port=${agentPort}`,
      `--health-port=${healthPort}`,
      `--admin-port=${adminPort}`,
      "--keepalive-time=1h",
      "--mode=http-connect",
      "--agent-namespace=kube-system",
      "--agent-service-account=konnectivity-agent",
      `--kubeconfig=${kubeconfig}`,
      "--authentication-audience=system:konnectivity-server",
    ]);
    await healthy(server, healthPort, "/healthz");

    // examples/kubernetes/konnectivity-agent.yaml: no agent certificate, the projected token.
    const agentArgs = [
      "--logtostderr=true",
      `--ca-cert=${h.certs.ca.cert}`,
      "--proxy-server-host=127.0.0.1",
      `--proxy-server-port=${agentPort}`,
      `--service-account-token-path=${tokenFile}`,
    ];
    const reviewsBefore = reviewer.reviews();
    const agent = ourAgent(h, "upstream-agent", agentArgs); // health 8093 and admin 8094: the defaults
    await healthy(agent, 8093, "/readyz");
    await healthy(server, healthPort, "/readyz");
    assert.ok(reviewer.reviews() > reviewsBefore, "the server reviewed the agent's token");

    const tunnel = await connectOverUds(socket, `127.0.0.1:${echo}`);
    assert.equal(await echoThrough(tunnel, "through the UDS HTTP CONNECT door"), "through the UDS HTTP CONNECT door");
    tunnel.destroy();
    notePairing("upstream konnectivity manifests: our proxy-server + our proxy-agent (token auth, http-connect UDS)");

    // The same manifest's agent, but with a token of another ServiceAccount: refused, Go's text.
    await agent.kill("SIGTERM");
    const wrong = ourAgent(h, "wrong-sa-agent", [
      ...agentArgs.slice(0, -1),
      `--service-account-token-path=${otherTokenFile}`,
    ]);
    const refusal = 'incoming request from \\"default\\" service account. Expected \\"konnectivity-agent\\"';
    await waitFor("the server's refusal of the wrong ServiceAccount", async () =>
      (await readFile(logFile, "utf8")).includes(refusal),
    );
    assert.notEqual((await httpGet("http://127.0.0.1:8093/readyz")).status, 200);
    assert.ok((await metric(healthPort, "cluster_proxy_server_agent_token_auth_failures_total")) >= 1);
    await wrong.kill("SIGTERM");

    // The Go proxy-agent with the manifest's arguments, against our server.
    const goAgent = h.spawnProc("go-upstream-agent", join(goBin(), "proxy-agent"), agentArgs);
    await healthy(goAgent, 8093, "/readyz");
    await waitFor(
      "our server to see the Go agent",
      async () => (await httpGet(`http://127.0.0.1:${healthPort}/readyz`)).status === 200,
    );
    const viaGo = await connectOverUds(socket, `127.0.0.1:${echo}`);
    assert.equal(await echoThrough(viaGo, "via the Go agent"), "via the Go agent");
    viaGo.destroy();
    notePairing("upstream konnectivity manifests: our proxy-server + Go proxy-agent (token auth, http-connect UDS)");
    await goAgent.kill("SIGKILL");

    // --logtostderr=false --log-file: the server's JSON lines are in the file.
    const log = await readFile(logFile, "utf8");
    assert.match(log, /"name":"proxy-server"/);
    assert.match(log, /agent connected/);
    await server.kill("SIGTERM");
  });

  test("kubernetes.io konnectivity setup: grpc on a Unix socket; a GKE-style agent with -v=3 and --sync-forever", async () => {
    const socket = join(h.dir, "k8s-io.socket");
    const [agentPort, adminPort, healthPort] = [await freePort(), await freePort(), await freePort()];
    // kubernetes.io konnectivity-server.yaml (ports 8132-8134 substituted).
    const server = ourServer(h, "k8s-io-server", [
      "--logtostderr=true",
      `--uds-name=${socket}`,
      "--delete-existing-uds-file",
      `--cluster-cert=${h.certs.server.cert}`,
      `--cluster-key=${h.certs.server.key}`,
      "--mode=grpc",
      "--server-port=0",
      `--agent-port=${agentPort}`,
      `--admin-port=${adminPort}`,
      `--health-port=${healthPort}`,
      "--agent-namespace=kube-system",
      "--agent-service-account=konnectivity-agent",
      `--kubeconfig=${kubeconfig}`,
      "--authentication-audience=system:konnectivity-server",
    ]);
    await healthy(server, healthPort, "/healthz");
    const [agentAdmin, agentHealth] = [await freePort(), await freePort()];
    // kubernetes.io konnectivity-agent DaemonSet, plus the flags a GKE agent adds.
    const agent = ourAgent(h, "gke-agent", [
      "--logtostderr=true",
      `--ca-cert=${h.certs.ca.cert}`,
      "--proxy-server-host=127.0.0.1",
      `--proxy-server-port=${agentPort}`,
      `--admin-server-port=${agentAdmin}`,
      `--health-server-port=${agentHealth}`,
      "--sync-interval=5s",
      "--sync-interval-cap=30s",
      "--sync-forever=true",
      "--probe-interval=5s",
      "--keepalive-time=60s",
      `--service-account-token-path=${tokenFile}`,
      "--v=3",
      "-v=3",
    ]);
    await healthy(agent, agentHealth, "/readyz");
    await healthy(server, healthPort, "/readyz");
    const socketThrough = await dial(`127.0.0.1:${echo}`, { proxy: { udsPath: socket }, timeoutMs: 10_000 });
    assert.equal(await echoThrough(socketThrough, "grpc over the socket"), "grpc over the socket");
    socketThrough.destroy();
    notePairing("kubernetes.io konnectivity manifests: our proxy-server + our proxy-agent (token auth, grpc UDS)");
    // The Go metric families a konnectivity dashboard reads are there.
    const { body } = await httpGet(`http://127.0.0.1:${adminPort}/metrics`);
    for (const family of [
      "konnectivity_network_proxy_server_ready_backend_connections",
      "konnectivity_network_proxy_server_frontend_write_duration_seconds",
      "konnectivity_network_proxy_server_full_receive_channels",
      "konnectivity_network_proxy_server_grpc_connections",
    ])
      assert.match(body, new RegExp(`^# TYPE ${family} `, "m"), family);
    assert.match(body, /^konnectivity_network_proxy_server_ready_backend_connections 1$/m);
    await agent.kill("SIGTERM");
    await server.kill("SIGTERM");
  });

  test("OCM cluster-proxy addon: the proxy-server and proxy-agent Deployments' arguments", async () => {
    // manifests.go proxyServerArgs (replicas 1) with the TLS profile's cipher suites; no ports are
    // passed, so the Go defaults 8090/8091/8092/8095 are used, and the agent's 8093/8094.
    const server = ourServer(h, "ocm-server", [
      "--server-count=1",
      "--proxy-strategies=destHost",
      `--server-ca-cert=${h.certs.clientCa.cert}`,
      `--server-cert=${h.certs.server.cert}`,
      `--server-key=${h.certs.server.key}`,
      `--cluster-ca-cert=${h.certs.agentCa.cert}`,
      `--cluster-cert=${h.certs.server.cert}`,
      `--cluster-key=${h.certs.server.key}`,
      "--cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
      "--tls-min-version=VersionTLS12",
    ]);
    await healthy(server, 8092, "/healthz");
    // The addon's service-proxy host: "cluster-" + hex(sha256(name)), the label cut to 56 characters.
    const hashHost = `${`cluster-${createHash("sha256").update("east").digest("hex")}`.slice(0, 56)}.open-cluster-management.proxy`;
    // addon-agent-deployment.yaml (an agent certificate of this cluster, as our addon issues).
    const cert = h.certs.agents.get("east")!;
    const agent = ourAgent(h, "ocm-agent", [
      "--proxy-server-host=127.0.0.1",
      "--proxy-server-port=8091",
      `--agent-identifiers=host=${hashHost}&host=east&host=east.open-cluster-management-agent-addon`,
      `--ca-cert=${h.certs.ca.cert}`,
      `--agent-cert=${cert.cert}`,
      `--agent-key=${cert.key}`,
    ]);
    await healthy(agent, 8093, "/readyz");
    await healthy(server, 8092, "/readyz");
    // A client of the addon dials <cluster>.<namespace>:<port>-style names over mTLS gRPC on 8090.
    const tls = {
      ca: await readFile(h.certs.ca.cert),
      cert: await readFile(h.certs.client.cert),
      key: await readFile(h.certs.client.key),
    };
    // The agent strips nothing: "east" is not this agent's --cluster-name, so dial an address
    // the name-routed agent can reach: the echo target under the cluster suffix.
    const s = await dial(`127.0.0.1.east:${echo}`, {
      proxy: { host: "127.0.0.1", port: 8090, ...tls },
      timeoutMs: 10_000,
    });
    assert.equal(await echoThrough(s, "through the OCM-shaped hub"), "through the OCM-shaped hub");
    s.destroy();
    notePairing("OCM cluster-proxy Deployments' args: our proxy-server + our proxy-agent (mTLS, destHost)");
    await agent.kill("SIGTERM");
    await server.kill("SIGTERM");
  });
});
