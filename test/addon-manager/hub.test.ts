// The addon manager against the real hub of the multi-cluster test environment: the real
// kube-apiserver (CRD validation with CEL, garbage collection), the process kubelet running the
// proxy-server Deployment the manager renders, and the manager itself as a process of the built CLI.
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { Condition } from "@cluster-proxy/api";
import { KubeApi, KubeApiError, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "@cluster-proxy/addon-manager";
import { NODE_FLAGS } from "@cluster-proxy/cli";
import { agentClusterUri, issueCertificate } from "@cluster-proxy/pki";
import { nsOf, repoRoot } from "../infra/env/config.js";
import { waitFor } from "../infra/env/exec.js";
import { type TestEnv, startTestEnv } from "../infra/env/fixture.js";
import { cond, installCrd, mpcBody as sharedMpcBody } from "../infra/addon/hub-setup.js";
import { ManagerProcess } from "../infra/addon/manager-process.js";
import { errorMessage } from "@cluster-proxy/errors";

const MANAGER_NS = "cluster-proxy-addon-it";
const SERVER_NS = "cluster-proxy-it";
const NAME = "cluster-proxy";
const LEASE_ARGS = [
  "--leader-elect-lease-duration=6s",
  "--leader-elect-renew-deadline=4s",
  "--leader-elect-retry-period=1s",
];

interface Mpc extends KubeObject {
  spec: Record<string, unknown>;
  status?: {
    conditions?: Condition[];
    readyReplicas?: number;
    replicas?: number;
    entrypoint?: string;
    lastObservedGeneration?: number;
  };
}
interface Secret extends KubeObject {
  data?: Record<string, string>;
}

/** The test environment's LoadBalancer controller reports an ingress `ip` (default) or only a `hostname`. */
let lbAnnotations: { key: string; value: string }[] = [{ key: "example.com/load-balancer-tier", value: "internal" }];
const LB_INGRESS_ANNOTATION = "cpenv.cluster-proxy.io/load-balancer-ingress";
const LB_POOL = /^10\.200\.30\.\d+$/;

const mpcBody = (spec: Record<string, unknown> = {}): Mpc => {
  const base = sharedMpcBody({
    name: NAME,
    namespace: SERVER_NS,
    entrypoint: { type: "LoadBalancerService", loadBalancerService: { annotations: lbAnnotations } },
  });
  return { ...base, spec: { ...base.spec, ...spec } };
};

const pem = (s: Secret | undefined, key: string): string => Buffer.from(s?.data?.[key] ?? "", "base64").toString();

describe("addon manager on the hub", { timeout: 30 * 60_000 }, () => {
  let env: TestEnv;
  let api: KubeApi;
  let dir: string;
  let kubeconfig: string;
  const managers: ManagerProcess[] = [];
  const children: ChildProcess[] = [];
  /** Runs a command inside one of the environment's network namespaces, as a child of the test. */
  const output = new Map<ChildProcess, string>();
  const spawnIn = (where: "mc1" | "lab", cmd: string, args: string[]): ChildProcess => {
    const child = spawn("ip", ["netns", "exec", nsOf(where), cmd, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    output.set(child, "");
    child.stderr.on("data", (d: Buffer) => output.set(child, (output.get(child)! + d.toString()).slice(-4000)));
    return child;
  };
  /** The proxy-server pods: their addresses and the PIDs in their network namespaces. */
  const serverPods = async (): Promise<{ ip: string; pids: string }[]> => {
    const pods = (await api.list(Resources.pod, { namespace: SERVER_NS })).items as (KubeObject & {
      status?: { podIP?: string; phase?: string };
    })[];
    return pods
      .filter((p) => p.status?.podIP && !p.metadata.deletionTimestamp)
      .map((p) => {
        const netns = p.metadata.annotations?.["cpenv.cluster-proxy.io/netns"] ?? "";
        const pids = netns
          ? execFileSync("ip", ["netns", "pids", netns], { encoding: "utf8" }).trim().split("\n").sort().join(",")
          : "";
        return { ip: p.status!.podIP!, pids };
      });
  };

  const getMpc = (): Promise<Mpc | undefined> => api.tryGet<Mpc>(Resources.managedProxyConfiguration, NAME);
  const start = (name: string): ManagerProcess => {
    const m = new ManagerProcess(name, kubeconfig, MANAGER_NS, LEASE_ARGS);
    managers.push(m);
    return m;
  };
  const waitConditions = async (what: string, ok: (m: Mpc) => boolean, timeoutMs = 120_000): Promise<Mpc> => {
    let last: Mpc | undefined;
    try {
      return await waitFor(
        what,
        timeoutMs,
        async () => {
          last = await getMpc();
          return last && ok(last) ? last : undefined;
        },
        250,
      );
    } catch (err) {
      throw new Error(
        `${errorMessage(err)}\nlast status: ${JSON.stringify(last?.status)}\n${managers.map((m) => `--- ${m.name}\n${m.tail(15)}`).join("\n")}`,
        { cause: err },
      );
    }
  };

  before(
    async () => {
      env = await startTestEnv();
      api = new KubeApi(env.kubeConfig("hub"));
      dir = mkdtempSync(join(tmpdir(), "cp-addon-it-"));
      kubeconfig = join(dir, "hub.kubeconfig");
      writeFileSync(kubeconfig, env.kubeConfig("hub").exportConfig(), { mode: 0o600 });
      await installCrd(api);
      await api.apply(Resources.namespace, { metadata: { name: MANAGER_NS } });
    },
    { timeout: 90 * 60_000 },
  );

  after(async () => {
    for (const c of children) c.kill("SIGKILL");
    await Promise.all(managers.map((m) => m.stop()));
    await api?.delete(Resources.managedProxyConfiguration, NAME).catch(() => undefined);
    await api?.delete(Resources.namespace, MANAGER_NS).catch(() => undefined);
    if (dir) rmSync(dir, { recursive: true, force: true });
    await env?.close();
  });

  test("the apiserver refuses a bad or unsupported configuration with a message naming the field (the chart's CRD file)", async () => {
    const bad: [string, Record<string, unknown>, RegExp][] = [
      [
        "Hostname without hostname",
        { proxyServer: { image: "x", entrypoint: { type: "Hostname" } } },
        /spec\.proxyServer\.entrypoint\.hostname: .*Hostname needs hostname\.value/,
      ],
      [
        "a hostname that is no host",
        { proxyServer: { image: "x", entrypoint: { type: "Hostname", hostname: { value: "not a host!" } } } },
        /spec\.proxyServer\.entrypoint\.hostname\.value: .*must be a DNS name or an IP address/,
      ],
      [
        "LoadBalancerService with a leftover hostname",
        {
          proxyServer: {
            image: "x",
            entrypoint: { type: "LoadBalancerService", loadBalancerService: {}, hostname: { value: "proxy.example" } },
          },
        },
        /spec\.proxyServer\.entrypoint\.hostname: .*hostname is only valid with type Hostname/,
      ],
      [
        "CertManager",
        { proxyServer: { image: "x" }, authentication: { signer: { type: "CertManager" } } },
        /spec\.authentication\.signer\.type: .*CertManager is not supported/,
      ],
      [
        "Provided without a Secret",
        { proxyServer: { image: "x" }, authentication: { signer: { type: "Provided" } } },
        /provided\.secretName/,
      ],
      [
        "userServer",
        { proxyServer: { image: "x" }, userServer: { additionalSANs: ["a"] } },
        /userServer is not supported/,
      ],
      [
        "same port twice",
        { proxyServer: { image: "x" }, deploy: { ports: { proxyServer: 9000, agentServer: 9000 } } },
        /four different ports/,
      ],
    ];
    for (const [what, spec, message] of bad) {
      const body = mpcBody(spec);
      body.metadata.name = "bad";
      await assert.rejects(api.create(Resources.managedProxyConfiguration, body), (err: unknown) => {
        assert.ok(err instanceof KubeApiError, what);
        assert.equal(err.status, 422, `${what}: ${err.message}`);
        assert.match(err.message, message, what);
        return true;
      });
    }
    // A Go addon object with every field it knows (the ones we implement) applies unchanged.
    const goObject = mpcBody({
      authentication: {
        signer: { type: "SelfSigned", selfSigned: { additionalSANs: ["proxy.example"] } },
        dump: {
          secrets: {
            signingProxyServerSecretName: "proxy-server",
            signingProxyClientSecretName: "proxy-client",
            signingAgentServerSecretName: "agent-server",
          },
        },
      },
      proxyAgent: {
        image: "a",
        replicas: 1,
        additionalArgs: ["--x"],
        imagePullSecrets: ["pull"],
        agentNodePlacements: { mc1: { nodeSelector: { a: "b" } } },
      },
      deploy: { ports: { proxyServer: 8090, agentServer: 8091, healthServer: 8092, adminServer: 8095 } },
    });
    goObject.metadata.name = "go-compatible";
    await api.create(Resources.managedProxyConfiguration, goObject);
    await api.delete(Resources.managedProxyConfiguration, "go-compatible");
  });

  test("a manager deploys the proxy-server; ProxyServerDeployed is True only when every replica is ready", async () => {
    const m = start("manager-a");
    await m.waitForLog("became leader", 60_000);
    await api.create(Resources.managedProxyConfiguration, mpcBody());
    const seen: string[] = [];
    const ready = await waitConditions("all conditions True", (mpc) => {
      const d = cond(mpc, "ProxyServerDeployed");
      if (d) seen.push(`${d.status}:${d.message}`);
      return [
        "ProxyServerDeployed",
        "ProxyServerSecretSigned",
        "AgentServerSecretSigned",
        "ProxyClientSecretSigned",
        "GatewayServingSecretSigned",
        "GatewayIdentitySecretSigned",
        "EntrypointReady",
        "SignerCAConsistent",
      ].every((t) => cond(mpc, t)?.status === "True");
    });
    assert.ok(
      seen.some((s) => s.startsWith("False:0 of 1")),
      `ProxyServerDeployed was False before the server was ready: ${seen.join(" | ")}`,
    );
    assert.equal(cond(ready, "ProxyServerDeployed")?.message, "1 of 1 proxy-servers ready");
    assert.match(
      ready.status?.entrypoint ?? "",
      /^10\.200\.30\.\d+:8091$/,
      "agents dial the LoadBalancer's ingress IP",
    );
    assert.equal(cond(ready, "EntrypointReady")?.reason, "LoadBalancerReady");
    const lb = await api.get(Resources.service, "proxy-agent-entrypoint", SERVER_NS);
    assert.equal(lb.metadata.annotations?.["example.com/load-balancer-tier"], "internal");
    assert.equal(ready.status?.lastObservedGeneration, ready.metadata.generation);
    assert.match(cond(ready, "AgentServerSecretSigned")?.message ?? "", /^Expiry:\d{4}-/);
    assert.equal(await m.health("/readyz"), 200);

    // More replicas than are ready: the condition says so.
    await api.apply(Resources.managedProxyConfiguration, {
      ...mpcBody(),
      spec: { ...mpcBody().spec, proxyServer: { ...(mpcBody().spec.proxyServer as object), replicas: 2 } },
    });
    const two = await waitConditions(
      "status for 2 replicas",
      (mpc) =>
        mpc.status?.replicas === 2 && /of 2 proxy-servers ready/.test(cond(mpc, "ProxyServerDeployed")?.message ?? ""),
    );
    const dep = await api.get<
      KubeObject & {
        spec: { template: { spec: { containers: { args: string[] }[] } } };
      }
    >(Resources.deployment, NAME, SERVER_NS);
    assert.ok(
      dep.spec.template.spec.containers[0]!.args.includes("--server-count=2"),
      "--server-count follows replicas",
    );
    const deployed = cond(two, "ProxyServerDeployed")!;
    assert.equal(deployed.status === "True", two.status?.readyReplicas === 2, JSON.stringify(two.status));
    await api.apply(Resources.managedProxyConfiguration, mpcBody());
    await waitConditions(
      "back to 1 ready replica",
      (mpc) =>
        cond(mpc, "ProxyServerDeployed")?.message === "1 of 1 proxy-servers ready" &&
        cond(mpc, "ProxyServerDeployed")?.status === "True",
    );

    const events = (await api.list(Resources.event, { namespace: "default" })).items as (KubeObject & {
      reason?: string;
      involvedObject?: { name?: string };
    })[];
    assert.ok(
      events.some((e) => e.reason === "CertificateIssued" && e.involvedObject?.name === NAME),
      "CertificateIssued events reach the API",
    );
    // A status write that lost a race with the manager's own previous write (409 Conflict) is
    // re-read and retried quietly: no warnings about it (pino: warn is level 40).
    const conflicts = m.logs.filter((l) => l.level >= 40 && /409|Conflict|has been modified/.test(JSON.stringify(l)));
    assert.deepEqual(conflicts, [], "no warnings about conflicts");
  });

  test("certificates: Go's Secret names, trust split by role, entrypoint in the agent-server SANs", async () => {
    const get = (name: string, ns = SERVER_NS): Promise<Secret> => api.get<Secret>(Resources.secret, name, ns);
    const serverCa = new X509Certificate(pem(await get("proxy-server-ca"), "ca.crt"));
    const client = await get("proxy-client");
    const clientCert = new X509Certificate(pem(client, "tls.crt"));
    assert.ok(pem(client, "tls.key").includes("PRIVATE KEY"));
    const clientCa = new X509Certificate(pem(await get("cluster-proxy-signer-client", MANAGER_NS), "ca.crt"));
    const agentCa = new X509Certificate(pem(await get("cluster-proxy-signer-agent", MANAGER_NS), "ca.crt"));
    assert.ok(clientCert.checkIssued(clientCa), "the client certificate comes from the client CA");
    assert.ok(!clientCert.checkIssued(agentCa) && !clientCert.checkIssued(serverCa), "and from no other");
    const agentServer = await get("agent-server");
    const agentServerCert = new X509Certificate(pem(agentServer, "tls.crt"));
    assert.ok(agentServerCert.checkIssued(serverCa));
    const lbIp = ((await getMpc())?.status?.entrypoint ?? "").split(":")[0]!;
    assert.match(lbIp, LB_POOL);
    assert.ok((agentServerCert.subjectAltName ?? "").includes(`IP Address:${lbIp}`), agentServerCert.subjectAltName);
    // The agent port trusts only the agent CA, the client doors only the client CA.
    assert.equal(new X509Certificate(pem(agentServer, "agent-ca.crt")).fingerprint256, agentCa.fingerprint256);
    assert.equal(
      new X509Certificate(pem(await get("proxy-server"), "client-ca.crt")).fingerprint256,
      clientCa.fingerprint256,
    );
    // CA Secrets are owned by nothing.
    assert.equal((await get("cluster-proxy-signer", MANAGER_NS)).metadata.ownerReferences, undefined);
    // The gateway: served by the serving CA; its identity from the fourth CA, which nothing else uses.
    const gatewayCa = await get("cluster-proxy-signer-gateway", MANAGER_NS);
    assert.equal(gatewayCa.metadata.ownerReferences, undefined);
    const gatewayCaCert = new X509Certificate(pem(gatewayCa, "ca.crt"));
    const gwServing = new X509Certificate(pem(await get("cluster-proxy-gateway-serving"), "tls.crt"));
    assert.ok(gwServing.checkIssued(serverCa));
    assert.ok(
      (gwServing.subjectAltName ?? "").includes(`DNS:cluster-proxy-addon-user.${SERVER_NS}.svc`),
      gwServing.subjectAltName,
    );
    const identity = await get("cluster-proxy-gateway-identity");
    const identityCert = new X509Certificate(pem(identity, "tls.crt"));
    assert.ok(identityCert.checkIssued(gatewayCaCert));
    assert.ok(
      !identityCert.checkIssued(clientCa) && !identityCert.checkIssued(agentCa) && !identityCert.checkIssued(serverCa),
    );
    assert.equal(new X509Certificate(pem(identity, "agent-ca.crt")).fingerprint256, agentCa.fingerprint256);
    assert.ok(!agentServerCert.checkIssued(gatewayCaCert) && !clientCert.checkIssued(gatewayCaCert));
  });

  test("LoadBalancer entrypoint: a hostname-only ingress is used, and the Service's annotations follow the configuration", async () => {
    lbAnnotations = [{ key: LB_INGRESS_ANNOTATION, value: "hostname" }];
    await api.apply(Resources.managedProxyConfiguration, mpcBody());
    const hostnameOnly = await waitConditions("an entrypoint from the LoadBalancer's hostname", (m) =>
      /^10-200-30-\d+\.lb\.cpenv\.test:8091$/.test(m.status?.entrypoint ?? ""),
    );
    const host = hostnameOnly.status!.entrypoint!.split(":")[0]!;
    await waitFor("the agent-server certificate to name the LoadBalancer's hostname", 60_000, async () => {
      const secret = await api.get<Secret>(Resources.secret, "agent-server", SERVER_NS);
      return (new X509Certificate(pem(secret, "tls.crt")).subjectAltName ?? "").includes(`DNS:${host}`);
    });
    const lb = await api.get(Resources.service, "proxy-agent-entrypoint", SERVER_NS);
    assert.equal(
      lb.metadata.annotations?.["example.com/load-balancer-tier"],
      undefined,
      "a removed annotation is removed",
    );
    assert.equal(lb.metadata.annotations?.[LB_INGRESS_ANNOTATION], "hostname");
    lbAnnotations = [];
    await api.apply(Resources.managedProxyConfiguration, mpcBody());
    await waitConditions("back to the ingress IP", (m) => /^10\.200\.30\.\d+:8091$/.test(m.status?.entrypoint ?? ""));
  });

  test("drift is repaired: a deleted Service comes back, an edited Deployment is put back", async () => {
    await api.delete(Resources.service, "proxy-entrypoint", SERVER_NS);
    await waitFor(
      "the Service to come back",
      60_000,
      () => api.tryGet(Resources.service, "proxy-entrypoint", SERVER_NS),
      250,
    );
    await api.request(
      "PATCH",
      KubeApi.objectPath(Resources.deployment, NAME, SERVER_NS),
      { spec: { template: { spec: { containers: [{ name: "proxy-server", image: "someone/else:1" }] } } } },
      "application/strategic-merge-patch+json",
    );
    await waitFor(
      "the Deployment's image to be put back",
      60_000,
      async () => {
        const d = await api.get<KubeObject & { spec: { template: { spec: { containers: { image: string }[] } } } }>(
          Resources.deployment,
          NAME,
          SERVER_NS,
        );
        return d.spec.template.spec.containers[0]!.image.includes("cluster-proxy:dev");
      },
      250,
    );
  });

  test("deleting and re-creating the configuration keeps the CA; a lost CA is reported loudly", async () => {
    const caBefore = pem(await api.get<Secret>(Resources.secret, "cluster-proxy-signer", MANAGER_NS), "ca.crt");
    await api.delete(Resources.managedProxyConfiguration, NAME);
    await waitFor(
      "the Deployment to be garbage-collected",
      90_000,
      async () => !(await api.tryGet(Resources.deployment, NAME, SERVER_NS)),
      500,
    );
    await api.create(Resources.managedProxyConfiguration, mpcBody());
    const again = await waitConditions(
      "conditions after re-creating",
      (m) => cond(m, "ProxyServerDeployed")?.status === "True" && cond(m, "SignerCAConsistent")?.status === "True",
    );
    assert.ok(again);
    assert.equal(
      pem(await api.get<Secret>(Resources.secret, "cluster-proxy-signer", MANAGER_NS), "ca.crt"),
      caBefore,
      "same CA",
    );
    assert.equal(
      pem(await api.get<Secret>(Resources.secret, "proxy-server-ca", SERVER_NS), "ca.crt").trim(),
      caBefore.trim(),
    );

    // Losing the CA Secret (a restore without it) makes a new CA, and the status says so.
    await api.delete(Resources.secret, "cluster-proxy-signer", MANAGER_NS);
    const replaced = await waitConditions(
      "SignerCAConsistent False",
      (m) => cond(m, "SignerCAConsistent")?.status === "False",
    );
    assert.equal(cond(replaced, "SignerCAConsistent")?.reason, "SignerCAReplaced");
    assert.match(cond(replaced, "SignerCAConsistent")?.message ?? "", /restore that Secret from a backup/);
  });

  test("a forced leaf rotation reaches the proxy-server without a restart, and an established tunnel keeps transferring byte-exact", async () => {
    const mpc = await getMpc();
    const [entryHost, entryPort] = (mpc?.status?.entrypoint ?? "").split(/:(?=\d+$)/) as [string, string];
    const files = join(dir, "tunnel");
    mkdirSync(files, { recursive: true });
    const write = (name: string, text: string): string => {
      writeFileSync(join(files, name), text, { mode: 0o600 });
      return join(files, name);
    };
    // An agent for mc1 with a certificate from the agent CA (what OCM registration delivers in part 2).
    const agentCaSecret = await api.get<Secret>(Resources.secret, "cluster-proxy-signer-agent", MANAGER_NS);
    const agentCert = await issueCertificate(
      { certPem: pem(agentCaSecret, "ca.crt"), keyPem: pem(agentCaSecret, "ca.key") },
      { commonName: "mc1-agent", uris: [agentClusterUri("mc1")], usage: "client" },
    );
    const servingBundle = write(
      "server-ca.crt",
      pem(await api.get<Secret>(Resources.secret, "proxy-server-ca", SERVER_NS), "ca.crt"),
    );
    const client = await api.get<Secret>(Resources.secret, "proxy-client", SERVER_NS);
    write("ca.crt", pem(await api.get<Secret>(Resources.secret, "proxy-server-ca", SERVER_NS), "ca.crt"));
    write("tls.crt", pem(client, "tls.crt"));
    write("tls.key", pem(client, "tls.key"));
    const cli = join(repoRoot, "packages", "cli", "dist", "main.js");
    const echo = spawnIn("mc1", process.execPath, [
      "-e",
      'require("net").createServer((s) => { s.on("error", () => {}); s.pipe(s); }).listen(17777, "127.0.0.1")',
    ]);
    const agent = spawnIn("mc1", process.execPath, [
      ...NODE_FLAGS,
      cli,
      "agent",
      `--proxy-server-host=${entryHost}`,
      `--proxy-server-port=${entryPort}`,
      `--ca-cert=${servingBundle}`,
      `--agent-cert=${write("agent.crt", agentCert.certPem)}`,
      `--agent-key=${write("agent.key", agentCert.keyPem)}`,
      "--cluster-name=mc1",
      "--health-server-port=18093",
      "--admin-server-port=18094",
    ]);
    children.push(echo, agent);
    const servername = `proxy-entrypoint.${SERVER_NS}.svc`;
    const probe = (args: string[], timeoutMs: number): { ok?: boolean; fingerprint?: string; error?: string } => {
      const out = env.exec(
        "lab",
        process.execPath,
        ["--conditions=source", "--import", "tsx", join(repoRoot, "test", "addon-manager", "tunnel-probe.ts"), ...args],
        { timeoutMs, allowFail: true },
      ).stdout;
      return JSON.parse(out.trim().split("\n").at(-1) || "{}") as {
        ok?: boolean;
        fingerprint?: string;
        error?: string;
      };
    };
    const pods = await serverPods();
    assert.equal(pods.length, 1, JSON.stringify(pods));
    const front = `${pods[0]!.ip}:8090`; // the client door of the proxy-server pod, from the lab
    let first: unknown;
    try {
      await waitFor(
        "a first transfer through the tunnel",
        90_000,
        () => {
          const r = probe(["transfer", front, servername, files, "127.0.0.1.mc1:17777", "1"], 60_000);
          first = r;
          return r.ok;
        },
        1000,
      );
    } catch (err) {
      throw new Error(`${errorMessage(err)}\nlast probe: ${JSON.stringify(first)}\nagent: ${output.get(agent)}`, {
        cause: err,
      });
    }
    const fingerprint = (address: string): string | undefined =>
      probe(["cert", address, servername, servingBundle], 30_000).fingerprint;
    const before = { client: fingerprint(front), agent: fingerprint(`${entryHost}:${entryPort}`) };
    assert.ok(before.client && before.agent, JSON.stringify(before));

    // A long transfer over one tunnel stream, started before the rotation and still running after it.
    const transfer = spawnIn("lab", process.execPath, [
      "--conditions=source",
      "--import",
      "tsx",
      join(repoRoot, "test", "addon-manager", "tunnel-probe.ts"),
      "transfer",
      front,
      servername,
      files,
      "127.0.0.1.mc1:17777",
      "40",
    ]);
    children.push(transfer);
    let transferOut = "";
    transfer.stdout!.on("data", (d: Buffer) => (transferOut += d.toString()));
    // Force the rotation of both serving certificates (an annotation that no longer matches re-issues).
    for (const secret of ["proxy-server", "agent-server"])
      await api.request(
        "PATCH",
        KubeApi.objectPath(Resources.secret, secret, SERVER_NS),
        { metadata: { annotations: { "proxy.open-cluster-management.io/certificate-request-hash": "rotate-now" } } },
        "application/merge-patch+json",
      );
    await waitFor(
      "both front doors to present the new certificates",
      120_000,
      () => {
        const now = { client: fingerprint(front), agent: fingerprint(`${entryHost}:${entryPort}`) };
        return now.client && now.agent && now.client !== before.client && now.agent !== before.agent;
      },
      2000,
    );
    const [code] = (await once(transfer, "exit")) as [number];
    const result = JSON.parse(transferOut.trim().split("\n").at(-1) || "{}") as {
      ok?: boolean;
      sent?: number;
      error?: string;
    };
    assert.equal(code, 0);
    assert.ok(result.ok, `transfer across the rotation: ${transferOut}`);
    assert.ok((result.sent ?? 0) > 10 * 1024 * 1024, `a real transfer: ${transferOut}`);
    assert.deepEqual(await serverPods(), pods, "the proxy-server pod and process were not restarted");
  });

  test("two managers: one leads; when it is killed the other takes over within the lease time", async () => {
    const b = start("manager-b");
    await b.waitForLog("addon manager started", 30_000);
    const lease = async (): Promise<string | undefined> =>
      (
        (await api.get(Resources.lease, "cluster-proxy-addon-manager", MANAGER_NS)) as {
          spec?: { holderIdentity?: string };
        }
      ).spec?.holderIdentity;
    assert.equal(await lease(), "manager-a");
    assert.equal(await b.health("/readyz"), 200, "a standby is ready");
    assert.equal(
      b.logs.some((l) => l.msg === "became leader"),
      false,
    );
    const a = managers.find((m) => m.name === "manager-a")!;
    a.kill("SIGKILL");
    const killedAt = Date.now();
    await b.waitForLog("became leader", 30_000);
    const tookMs = Date.now() - killedAt;
    assert.ok(tookMs < 6_000 + 5_000, `took over after ${tookMs} ms (lease 6 s)`);
    assert.equal(await lease(), "manager-b");
    // The new leader acts: a deleted Service comes back.
    await api.delete(Resources.service, "proxy-entrypoint", SERVER_NS);
    await waitFor(
      "the Service to come back under the new leader",
      60_000,
      () => api.tryGet(Resources.service, "proxy-entrypoint", SERVER_NS),
      250,
    );
    // SIGTERM releases the lease at once.
    await b.stop();
    assert.equal(await b.exited, 0);
    assert.ok(!(await lease()), "the lease has no holder after SIGTERM");
  });
});
