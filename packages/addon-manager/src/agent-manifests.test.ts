import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, test } from "node:test";
import {
  addonManagerOptionsSchema,
  agentOptionsSchema,
  argsFor,
  defaultedSpec,
  gatewayOptionsSchema,
  MPC_API_VERSION,
  MPC_KIND,
  resolveOptions,
  withDefaults,
  type ManagedProxyConfiguration,
} from "@cluster-proxy/api";
import {
  agentArgValues,
  AGENT_CERT_SECRET,
  GATEWAY_CA_HASH_ANNOTATION,
  PROXY_CA_SECRET,
  goJson,
  mirroredImage,
  renderAgentWork,
  specHash,
} from "./agent-manifests.js";
import type { KubeObject } from "@cluster-proxy/kube";
import { rawFlags } from "./testing/raw-flags.js";

const mpc = (agent: Record<string, unknown> = {}): ManagedProxyConfiguration => ({
  apiVersion: MPC_API_VERSION,
  kind: MPC_KIND,
  metadata: { name: "cluster-proxy" },
  spec: defaultedSpec({
    proxyServer: { image: "s" },
    proxyAgent: { image: "quay.io/open-cluster-management/cluster-proxy:v1", replicas: 2, ...agent },
    authentication: {},
  }),
});

type Dep = KubeObject & {
  spec: {
    replicas: number;
    template: {
      metadata: { annotations?: Record<string, string> };
      spec: {
        nodeSelector?: Record<string, string>;
        containers: {
          image: string;
          command: string[];
          args: string[];
          resources?: unknown;
          volumeMounts: { name: string; mountPath: string }[];
        }[];
        volumes: { secret: { secretName: string } }[];
      };
    };
  };
};
const deployment = (work: KubeObject): Dep =>
  (work.spec as { workload: { manifests: KubeObject[] } }).workload.manifests.find(
    (m) => m.kind === "Deployment",
  ) as Dep;
const c0 = (dep: Dep): Dep["spec"]["template"]["spec"]["containers"][number] => dep.spec.template.spec.containers[0]!;
const owner = {
  apiVersion: "addon.open-cluster-management.io/v1alpha1",
  kind: "ManagedClusterAddOn",
  name: "cluster-proxy",
  uid: "u",
};

describe("the agent's ManifestWork", () => {
  test("Go's work name and label, the namespace first, the agent dialling the entrypoint as its cluster", () => {
    const work = renderAgentWork({
      cluster: "1st-cluster",
      namespace: "agents",
      mpc: mpc({
        additionalArgs: ["--keepalive-time=30s"],
        agentNodePlacements: { "1st-cluster": { nodeSelector: { zone: "a" } } },
      }),
      entrypoint: "10.0.0.1:8091",
      servingCaPem: "CA",
      owner,
      configHashes: { "managedproxyconfigurations.proxy.open-cluster-management.io//cluster-proxy": "h" },
    });
    assert.equal(work.metadata.name, "addon-cluster-proxy-deploy-0");
    assert.equal(work.metadata.namespace, "1st-cluster");
    assert.equal(work.metadata.labels?.["open-cluster-management.io/addon-name"], "cluster-proxy");
    assert.equal(
      work.metadata.annotations?.["open-cluster-management.io/config-spec-hash"],
      '{"managedproxyconfigurations.proxy.open-cluster-management.io//cluster-proxy":"h"}',
    );
    const manifests = (work.spec as { workload: { manifests: KubeObject[] } }).workload.manifests;
    assert.equal(manifests[0]!.kind, "Namespace");
    assert.ok(manifests.every((m) => m.kind === "Namespace" || m.metadata.namespace === "agents"));
    assert.ok(
      !manifests.some((m) => /Service$|ClusterRole/.test(m.kind ?? "")),
      "no cluster RBAC, no ExternalName Service",
    );
    // One right: patch the agent Deployment's status (its connection condition), nothing else.
    const role = manifests.find((m) => m.kind === "Role") as KubeObject & { rules: unknown };
    assert.deepEqual(role.rules, [
      {
        apiGroups: ["apps"],
        resources: ["deployments/status"],
        resourceNames: ["cluster-proxy-proxy-agent"],
        verbs: ["patch"],
      },
    ]);
    const binding = manifests.find((m) => m.kind === "RoleBinding") as KubeObject & {
      roleRef: { name: string };
      subjects: unknown;
    };
    assert.equal(binding.roleRef.name, role.metadata.name);
    assert.deepEqual(binding.subjects, [{ kind: "ServiceAccount", name: "cluster-proxy", namespace: "agents" }]);
    const dep = deployment(work);
    assert.ok(c0(dep).args.includes("--status-deployment=agents/cluster-proxy-proxy-agent"));
    assert.equal(
      (dep.spec.template.spec as { automountServiceAccountToken?: boolean }).automountServiceAccountToken,
      true,
    );
    // The work reads the agents' condition back (OCM evaluates the path against the whole object).
    const feedback = (work.spec as { manifestConfigs: { feedbackRules: unknown[]; feedbackScrapeType: string }[] })
      .manifestConfigs[0]!;
    assert.equal(feedback.feedbackScrapeType, "Watch");
    assert.deepEqual(feedback.feedbackRules, [
      { type: "WellKnownStatus" },
      {
        type: "JSONPaths",
        jsonPaths: [
          { name: "AgentConnected", path: '.status.conditions[?(@.type=="ProxyAgentConnected")].status' },
          { name: "AgentConnectionMessage", path: '.status.conditions[?(@.type=="ProxyAgentConnected")].message' },
        ],
      },
    ]);
    assert.equal(dep.spec.replicas, 2);
    const c = dep.spec.template.spec.containers[0]!;
    assert.deepEqual(c.command, ["cluster-proxy", "agent"]);
    for (const a of ["--proxy-server-host=10.0.0.1", "--proxy-server-port=8091", "--cluster-name=1st-cluster"])
      assert.ok(c.args.includes(a), a);
    assert.equal(c.args.at(-1), "--keepalive-time=30s", "additionalArgs last");
    assert.deepEqual(dep.spec.template.spec.nodeSelector, { zone: "a" });
    assert.ok(dep.spec.template.spec.volumes.some((v) => v.secret.secretName === AGENT_CERT_SECRET));
    assert.equal(AGENT_CERT_SECRET, "cluster-proxy-open-cluster-management.io-proxy-agent-signer-client-cert");
  });

  test("AddOnDeploymentConfig: node placement, resources by containerID, registry mirrors", () => {
    const work = renderAgentWork({
      cluster: "mc1",
      namespace: "agents",
      mpc: mpc(),
      entrypoint: "[fd00::1]:8091",
      servingCaPem: "CA",
      owner,
      configHashes: {},
      adc: {
        nodePlacement: { nodeSelector: { pool: "infra" } },
        resourceRequirements: [
          { containerID: "deployments:other:*", resources: { requests: { cpu: "9" } } },
          { containerID: "deployments:*:proxy-agent", resources: { requests: { cpu: "50m" } } },
        ],
        registries: [{ source: "quay.io/open-cluster-management", mirror: "mirror.example/ocm" }],
      },
    });
    assert.equal(work.metadata.annotations, undefined, "no configs: no hash annotation");
    const spec = deployment(work).spec.template.spec;
    assert.deepEqual(spec.nodeSelector, { pool: "infra" });
    assert.deepEqual(spec.containers[0]!.resources, { requests: { cpu: "50m" } });
    assert.equal(spec.containers[0]!.image, "mirror.example/ocm/cluster-proxy:v1");
    assert.ok(spec.containers[0]!.args.includes("--proxy-server-host=fd00::1"));
    assert.equal(mirroredImage("docker.io/x", [{ source: "quay.io", mirror: "m" }]), "docker.io/x");
  });

  test("AddOnDeploymentConfig proxyConfig: proxy variables, the proxy's CA mounted and named by flag; default requests", () => {
    const render = (adc?: Parameters<typeof renderAgentWork>[0]["adc"]): KubeObject[] =>
      (
        renderAgentWork({
          cluster: "mc1",
          namespace: "agents",
          mpc: mpc(),
          entrypoint: "hub.example:8091",
          servingCaPem: "CA",
          owner,
          configHashes: {},
          ...(adc ? { adc } : {}),
        }).spec as { workload: { manifests: KubeObject[] } }
      ).workload.manifests;
    type C = {
      args: string[];
      env: { name: string; value?: string }[];
      resources: unknown;
      volumeMounts: { mountPath: string }[];
    };
    const container = (manifests: KubeObject[]): C =>
      (
        manifests.find((m) => m.kind === "Deployment") as unknown as {
          spec: { template: { spec: { containers: C[] } } };
        }
      ).spec.template.spec.containers[0]!;
    const plain = render();
    assert.deepEqual(container(plain).resources, { requests: { cpu: "20m", memory: "96Mi" } });
    assert.ok(!container(plain).env.some((e) => e.name.endsWith("_PROXY")));
    assert.ok(!plain.some((m) => m.metadata.name === PROXY_CA_SECRET));

    const proxied = render({
      proxyConfig: {
        httpsProxy: "https://proxy.corp:3129",
        noProxy: "10.0.0.0/8",
        caBundle: Buffer.from("PROXY CA PEM").toString("base64"),
      },
    });
    const c = container(proxied);
    assert.deepEqual(
      c.env.filter((e) => e.name.endsWith("_PROXY")),
      [
        { name: "HTTPS_PROXY", value: "https://proxy.corp:3129" },
        { name: "NO_PROXY", value: "10.0.0.0/8" },
      ],
    );
    assert.ok(c.args.includes("--https-proxy-ca-cert=/etc/proxy-ca/ca.crt"));
    assert.ok(c.volumeMounts.some((v) => v.mountPath === "/etc/proxy-ca"));
    const secret = proxied.find((m) => m.metadata.name === PROXY_CA_SECRET) as KubeObject & {
      data: { "ca.crt": string };
    };
    assert.equal(Buffer.from(secret.data["ca.crt"], "base64").toString(), "PROXY CA PEM");
  });

  test("rolls with a surge and no unavailability; the pods' grace period outlasts the agent's drain", () => {
    const work = renderAgentWork({
      cluster: "east",
      namespace: "agents",
      mpc: mpc(),
      entrypoint: "hub.example:8091",
      servingCaPem: "CA",
      owner,
      configHashes: {},
    });
    const dep = deployment(work) as Dep & {
      spec: { strategy: unknown; template: { spec: { terminationGracePeriodSeconds: number } } };
    };
    assert.deepEqual(dep.spec.strategy, { type: "RollingUpdate", rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } });
    const options = resolveOptions(agentOptionsSchema, rawFlags(c0(dep).args));
    assert.equal(options.drainGracePeriod, 30_000);
    // SIGTERM: DRAIN and GOAWAY, then up to the drain grace period, then close: before SIGKILL.
    assert.ok(dep.spec.template.spec.terminationGracePeriodSeconds * 1000 >= options.drainGracePeriod + 10_000);
    // The new replica is ready only once connected to every proxy-server.
    assert.deepEqual((c0(dep) as unknown as { readinessProbe: { httpGet: unknown } }).readinessProbe.httpGet, {
      path: "/readyz",
      port: "health",
    });
  });

  test("spec hashes are Go's: sorted keys, no spaces, HTML characters escaped", () => {
    assert.equal(
      goJson({ b: 1, a: ["<&>", { d: true, c: null }] }),
      '{"a":["\\u003c\\u0026\\u003e",{"c":null,"d":true}],"b":1}',
    );
    const obj = { apiVersion: "x", metadata: { name: "n" }, spec: { z: "1", a: 2 }, status: { q: 1 } };
    assert.equal(specHash(obj), createHash("sha256").update('{"spec":{"a":2,"z":"1"}}').digest("hex"));
  });

  test("entrypoint PortForward: the agent goes through the hub with OCM's hub kubeconfig Secret, mounted whole", () => {
    const pf = mpc();
    pf.spec.proxyServer.entrypoint = { type: "PortForward", port: 8091 };
    const work = renderAgentWork({
      cluster: "mc1",
      namespace: "agents",
      mpc: pf,
      entrypoint: "proxy-entrypoint.open-cluster-management-cluster-proxy.svc:8096",
      servingCaPem: "CA",
      owner,
      configHashes: {},
    });
    const dep = deployment(work);
    const args = c0(dep).args;
    for (const want of [
      "--proxy-server-host=proxy-entrypoint.open-cluster-management-cluster-proxy.svc",
      "--proxy-server-port=8096",
      "--hub-kubeconfig=/etc/hub/kubeconfig",
      "--proxy-server-namespace=open-cluster-management-cluster-proxy",
      "--proxy-server-service=proxy-entrypoint",
    ])
      assert.ok(args.includes(want), `${want} in ${args.join(" ")}`);
    assert.ok(dep.spec.template.spec.volumes.some((v) => v.secret.secretName === "cluster-proxy-hub-kubeconfig"));
    // Without PortForward: no hub kubeconfig.
    const direct = deployment(
      renderAgentWork({
        cluster: "mc1",
        namespace: "agents",
        mpc: mpc(),
        entrypoint: "10.0.0.1:8091",
        servingCaPem: "CA",
        owner,
        configHashes: {},
      }),
    );
    assert.ok(!c0(direct).args.some((a) => a.startsWith("--hub-kubeconfig")));
    assert.ok(!direct.spec.template.spec.volumes.some((v) => v.secret.secretName === "cluster-proxy-hub-kubeconfig"));
  });

  test("gateway CA bundle: Secret cluster-proxy-gateway-ca mounted and named by flag, impersonation and nothing else cluster-wide; a new bundle re-renders", () => {
    const render = (gatewayCaPem?: string): KubeObject =>
      renderAgentWork({
        cluster: "mc1",
        namespace: "agents",
        mpc: mpc(),
        entrypoint: "10.0.0.1:8091",
        servingCaPem: "CA",
        ...(gatewayCaPem !== undefined ? { gatewayCaPem } : {}),
        owner,
        configHashes: {},
      });
    const manifestsOf = (work: KubeObject): KubeObject[] =>
      (work.spec as { workload: { manifests: KubeObject[] } }).workload.manifests;
    const work = render("GATEWAY CA 1");
    const manifests = manifestsOf(work);
    // Cluster-scoped: the Namespace, the impersonator ClusterRole and its binding, nothing more.
    assert.deepEqual(
      manifests.filter((m) => m.metadata.namespace === undefined).map((m) => `${m.kind}/${m.metadata.name}`),
      [
        "Namespace/agents",
        "ClusterRole/open-cluster-management:cluster-proxy:impersonator",
        "ClusterRoleBinding/open-cluster-management:cluster-proxy:impersonator",
      ],
    );
    const role = manifests.find((m) => m.kind === "ClusterRole") as KubeObject & { rules: unknown };
    assert.deepEqual(role.rules, [
      { apiGroups: [""], resources: ["users", "groups", "serviceaccounts"], verbs: ["impersonate"] },
      { apiGroups: ["authentication.k8s.io"], resources: ["*"], verbs: ["impersonate"] },
    ]);
    const binding = manifests.find((m) => m.kind === "ClusterRoleBinding") as KubeObject & {
      roleRef: unknown;
      subjects: unknown;
    };
    assert.deepEqual(binding.roleRef, {
      apiGroup: "rbac.authorization.k8s.io",
      kind: "ClusterRole",
      name: "open-cluster-management:cluster-proxy:impersonator",
    });
    assert.deepEqual(binding.subjects, [{ kind: "ServiceAccount", name: "cluster-proxy", namespace: "agents" }]);
    const secret = manifests.find((m) => m.metadata.name === "cluster-proxy-gateway-ca") as KubeObject & {
      data: Record<string, string>;
    };
    assert.equal(secret.metadata.namespace, "agents");
    assert.deepEqual(Object.keys(secret.data), ["ca.crt"]);
    assert.equal(Buffer.from(secret.data["ca.crt"]!, "base64").toString(), "GATEWAY CA 1");
    // Before the Deployment, so the volume exists when the pods start.
    assert.ok(
      manifests.indexOf(secret) < manifests.findIndex((m) => m.kind === "Deployment"),
      "the Secret precedes the Deployment",
    );
    const dep = deployment(work);
    const c = c0(dep);
    assert.ok(c.args.includes("--gateway-ca-file=/etc/gateway-ca/ca.crt"), c.args.join(" "));
    assert.ok(c.volumeMounts.some((v) => v.name === "gateway-ca" && v.mountPath === "/etc/gateway-ca"));
    assert.ok(dep.spec.template.spec.volumes.some((v) => v.secret.secretName === "cluster-proxy-gateway-ca"));
    // A rotated gateway CA changes the work (the manager re-applies it), the Secret and the pods' record.
    const rotated = render("GATEWAY CA 1\nGATEWAY CA 2");
    const annotation = (w: KubeObject): string | undefined =>
      deployment(w).spec.template.metadata.annotations?.[GATEWAY_CA_HASH_ANNOTATION];
    assert.ok(annotation(work));
    assert.notEqual(annotation(rotated), annotation(work));
    assert.notDeepEqual(manifestsOf(rotated), manifests);
    // No bundle (not issued yet): no endpoint, no impersonation right.
    const without = manifestsOf(render());
    assert.ok(!without.some((m) => /ClusterRole/.test(m.kind ?? "") || m.metadata.name === "cluster-proxy-gateway-ca"));
    assert.ok(!c0(deployment(render())).args.some((a) => a.startsWith("--gateway-ca-file")));
    assert.ok(!c0(deployment(render())).args.some((a) => a.startsWith("--gateway-impersonation-prefix")));
    assert.equal(annotation(render()), undefined);
  });
});

describe("the agent's command line comes from the agent's option schema", () => {
  test("it parses back with the agent's own parser to the values rendered, in every combination", () => {
    const keyOf = new Map(agentOptionsSchema.specs.map((s) => [s.flag, s.key]));
    const pf = mpc();
    pf.spec.proxyServer.entrypoint = { type: "PortForward", port: 8091 };
    for (const config of [mpc(), pf]) {
      for (const [forwardProxyCa, gatewayCa] of [
        [false, false],
        [true, false],
        [false, true],
        [true, true],
      ] as const) {
        const values = agentArgValues({
          host: "fd00::1",
          port: 8091,
          cluster: "mc1",
          namespace: "agents",
          mpc: config,
          forwardProxyCa,
          gatewayCa,
          gatewayImpersonationPrefix: "hub:",
        });
        const args = argsFor(agentOptionsSchema, values);
        const parsed: Record<string, unknown> = resolveOptions(agentOptionsSchema, rawFlags(args), {});
        for (const [flag, value] of Object.entries(values)) {
          if (value !== undefined) assert.deepEqual(parsed[keyOf.get(flag)!], value, `--${flag}`);
        }
        assert.equal(parsed["httpsProxyCaCert"] !== "", forwardProxyCa);
        assert.equal(parsed["gatewayCaFile"] !== "", gatewayCa);
        assert.equal(parsed["gatewayImpersonationPrefix"], gatewayCa ? "hub:" : "cluster:hub:");
        assert.equal(parsed["hubKubeconfig"] !== "", config === pf);
      }
    }
  });

  test("the Deployment runs exactly that line, then additionalArgs", () => {
    const config = mpc({ additionalArgs: ["--v=3"] });
    const work = renderAgentWork({
      cluster: "mc1",
      namespace: "agents",
      mpc: config,
      entrypoint: "[fd00::1]:8091",
      servingCaPem: "CA",
      gatewayCaPem: "GW",
      owner,
      configHashes: {},
    });
    const values = agentArgValues({
      host: "fd00::1",
      port: 8091,
      cluster: "mc1",
      namespace: "agents",
      mpc: config,
      forwardProxyCa: false,
      gatewayCa: true,
    });
    assert.deepEqual(c0(deployment(work)).args, [...argsFor(agentOptionsSchema, values), "--v=3"]);
  });
});

describe("the gateway's impersonation prefix reaches the agents", () => {
  test("rendered with the gateway endpoint, exactly as the gateway's flag says", () => {
    const work = renderAgentWork({
      cluster: "mc1",
      namespace: "agents",
      mpc: mpc(),
      entrypoint: "proxy.example.com:8091",
      servingCaPem: "CA",
      gatewayCaPem: "GW",
      gatewayImpersonationPrefix: "hub:",
      owner,
      configHashes: {},
    });
    assert.ok(c0(deployment(work)).args.includes("--gateway-impersonation-prefix=hub:"));
    // The manager's flag and the agent's flag share their default with the gateway's.
    assert.equal(
      withDefaults(addonManagerOptionsSchema, {}).gatewayImpersonationPrefix,
      withDefaults(gatewayOptionsSchema, {}).impersonationPrefix,
    );
  });
});
