import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  AGENT_UPGRADE_PORT,
  defaultedSpec,
  resolveOptions,
  serverOptionsSchema,
  type ManagedProxyConfiguration,
  type PartialManagedProxyConfigurationSpec,
} from "@cluster-proxy/api";
import { rawFlags } from "./testing/raw-flags.js";
import { MOUNTS, renderProxyServer, serverArgs, serverArgValues, type RenderedObject } from "./render-proxy-server.js";
import { TICKET_KEYS_FILE, ticketKeysSecretName } from "./ticket-keys-secret.js";
import type { KubeObject } from "@cluster-proxy/kube";

function mpc(spec: PartialManagedProxyConfigurationSpec): ManagedProxyConfiguration {
  return {
    apiVersion: "proxy.open-cluster-management.io/v1alpha1",
    kind: "ManagedProxyConfiguration",
    metadata: { name: "cluster-proxy", uid: "u-1", generation: 1 },
    spec: defaultedSpec({ proxyAgent: { image: "agent" }, ...spec }),
  };
}

const find = (objs: RenderedObject[], kind: string, name?: string): KubeObject | undefined =>
  objs.find((o) => o.resource.kind === kind && (!name || o.object.metadata.name === name))?.object;

type Container = {
  args: string[];
  command: string[];
  readinessProbe: unknown;
  livenessProbe: unknown;
  securityContext: Record<string, unknown>;
  volumeMounts?: { name: string; mountPath: string }[];
};
type DeploymentSpec = {
  replicas: number;
  strategy: unknown;
  template: {
    spec: {
      containers: Container[];
      volumes?: { name: string; secret?: unknown }[];
      nodeSelector?: unknown;
      tolerations?: unknown;
      securityContext: Record<string, unknown>;
      terminationGracePeriodSeconds: number;
    };
  };
};

describe("renderProxyServer", () => {
  const base = {
    proxyServer: { image: "quay.io/x/cluster-proxy:1", replicas: 3 },
  } satisfies PartialManagedProxyConfigurationSpec;

  it("runs the server with --server-count = replicas and the deploy ports", () => {
    const objs = renderProxyServer(
      mpc({
        ...base,
        deploy: { ports: { proxyServer: 9000, agentServer: 9001, healthServer: 9002, adminServer: 9005 } },
        proxyServer: { ...base.proxyServer, additionalArgs: ["--keepalive-time=30s"] },
      }),
    );
    const dep = find(objs, "Deployment")!;
    const spec = dep.spec as DeploymentSpec;
    assert.equal(spec.replicas, 3);
    const c = spec.template.spec.containers[0]!;
    for (const a of [
      "--server-count=3",
      "--server-port=9000",
      "--agent-port=9001",
      "--health-port=9002",
      "--admin-port=9005",
      "--proxy-strategies=destHost",
      "--warm-up-dial-wait=20s",
    ])
      assert.ok(c.args.includes(a), a);
    assert.equal(c.args.at(-1), "--keepalive-time=30s", "additionalArgs come last");
    // Ready = /readyz (an agent connected, or --ready-after-agents-timeout; never while draining).
    assert.deepEqual(c.readinessProbe, {
      httpGet: { path: "/readyz", port: 9002 },
      periodSeconds: 2,
      failureThreshold: 2,
    });
    assert.deepEqual((c.livenessProbe as { httpGet: unknown }).httpGet, { path: "/healthz", port: 9002 });
    const svc = find(objs, "Service", "proxy-entrypoint")!;
    assert.deepEqual(
      (svc.spec as { ports: { name: string; port: number }[] }).ports.map((p) => [p.name, p.port]),
      [
        ["proxy-server", 9000],
        ["agent-server", 9001],
        ["http-connect", 8093],
      ],
    );
  });

  it("rolls out without dropping below the desired replicas, hardened, with a PDB and anti-affinity", () => {
    const objs = renderProxyServer(mpc(base));
    const spec = find(objs, "Deployment")!.spec as DeploymentSpec;
    assert.deepEqual(spec.strategy, { type: "RollingUpdate", rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } });
    const c = spec.template.spec.containers[0]!;
    // SIGTERM drains for --graceful-shutdown-timeout, then closes: before the kubelet's SIGKILL.
    const drain = resolveOptions(serverOptionsSchema, rawFlags(c.args)).gracefulShutdownTimeout;
    assert.equal(drain, 30_000);
    // Agents behind a Service reach only ready pods: the server does not wait for them.
    assert.equal(resolveOptions(serverOptionsSchema, rawFlags(c.args)).readyAfterAgentsTimeout, 1_000);
    assert.ok(spec.template.spec.terminationGracePeriodSeconds * 1000 >= drain + 10_000);
    assert.equal(c.securityContext.allowPrivilegeEscalation, false);
    assert.equal(c.securityContext.readOnlyRootFilesystem, true);
    assert.deepEqual(c.securityContext.capabilities, { drop: ["ALL"] });
    assert.equal(spec.template.spec.securityContext.runAsNonRoot, true);
    assert.ok(find(objs, "PodDisruptionBudget"));
    assert.ok(JSON.stringify(spec.template.spec).includes("podAntiAffinity"));
    // One replica: no PDB (it would block every node drain).
    assert.equal(
      find(renderProxyServer(mpc({ proxyServer: { ...base.proxyServer, replicas: 1 } })), "PodDisruptionBudget"),
      undefined,
    );
  });

  it("owns what it renders except the namespace, and hashes each object's spec", () => {
    for (const { object } of renderProxyServer(mpc(base))) {
      const isNs = object.metadata.name === "open-cluster-management-cluster-proxy" && !object.metadata.namespace;
      assert.equal(Boolean(object.metadata.ownerReferences?.length), !isNs, object.metadata.name);
      assert.match(object.metadata.annotations?.["proxy.open-cluster-management.io/spec-hash"] ?? "", /^[0-9a-f]{16}$/);
    }
  });

  it("copies node placement and renders a LoadBalancer Service with the given annotations", () => {
    const objs = renderProxyServer(
      mpc({
        proxyServer: {
          ...base.proxyServer,
          nodePlacement: { nodeSelector: { role: "infra" }, tolerations: [{ key: "infra", operator: "Exists" }] },
          entrypoint: {
            type: "LoadBalancerService",
            port: 443,
            loadBalancerService: { name: "lb", annotations: [{ key: "example.com/internal", value: "true" }] },
          },
        },
      }),
    );
    const spec = find(objs, "Deployment")!.spec as DeploymentSpec;
    assert.deepEqual(spec.template.spec.nodeSelector, { role: "infra" });
    assert.deepEqual(spec.template.spec.tolerations, [{ key: "infra", operator: "Exists" }]);
    const lb = objs.find((o) => o.object.metadata.name === "lb")!.object;
    assert.equal((lb.spec as { type: string }).type, "LoadBalancer");
    assert.equal(lb.metadata.annotations?.["example.com/internal"], "true");
    assert.deepEqual((lb.spec as { ports: unknown[] }).ports, [
      { name: "agent-server", protocol: "TCP", port: 443, targetPort: 8091 },
    ]);
  });

  it("a changed spec changes the Deployment's hash; the same spec keeps it", () => {
    const hash = (s: PartialManagedProxyConfigurationSpec): string | undefined =>
      find(renderProxyServer(mpc(s)), "Deployment")!.metadata.annotations?.[
        "proxy.open-cluster-management.io/spec-hash"
      ];
    assert.equal(hash(base), hash(base));
    assert.notEqual(hash(base), hash({ proxyServer: { ...base.proxyServer, image: "other" } }));
  });

  it("entrypoint PortForward: the agent upgrade door on 8096 and the RoleBinding of the agents' hub group to the tunnel role, nothing more", () => {
    const objs = renderProxyServer(mpc({ proxyServer: { ...base.proxyServer, entrypoint: { type: "PortForward" } } }));
    const spec = find(objs, "Deployment")!.spec as DeploymentSpec & {
      template: { spec: { containers: { ports: { name: string; containerPort: number }[] }[] } };
    };
    const container = spec.template.spec.containers[0]!;
    assert.ok(container.args.includes("--agent-upgrade-port=8096"), container.args.join(" "));
    // Agents connect to a starting replica through the hub: it waits for them (the default).
    assert.equal(resolveOptions(serverOptionsSchema, rawFlags(container.args)).readyAfterAgentsTimeout, 30_000);
    assert.ok(container.ports.some((p) => p.name === "agent-upgrade" && p.containerPort === 8096));
    const binding = find(objs, "RoleBinding", "cluster-proxy-agent-tunnel")!;
    assert.equal(binding.metadata.namespace, "open-cluster-management-cluster-proxy");
    assert.deepEqual(binding.roleRef, {
      apiGroup: "rbac.authorization.k8s.io",
      kind: "ClusterRole",
      name: "open-cluster-management:cluster-proxy:agent-tunnel",
    });
    assert.deepEqual(binding.subjects, [
      {
        apiGroup: "rbac.authorization.k8s.io",
        kind: "Group",
        name: "system:open-cluster-management:addon:cluster-proxy",
      },
    ]);
    // The door is not on the Service: nothing but the hub apiserver's pods/proxy needs it.
    const service = find(objs, "Service", "proxy-entrypoint")!.spec as { ports: { port: number }[] };
    assert.ok(!service.ports.some((p) => p.port === 8096));
    // Any other entrypoint: no door, no binding.
    const hostname = renderProxyServer(mpc(base));
    assert.ok(
      !(find(hostname, "Deployment")!.spec as DeploymentSpec).template.spec.containers[0]!.args.some((a) =>
        a.startsWith("--agent-upgrade-port"),
      ),
    );
    assert.equal(find(hostname, "RoleBinding"), undefined);
  });
});

describe("the proxy-servers' TLS session ticket keys", () => {
  it("every replica mounts the configuration's ticket keys Secret and reads it with --tls-session-ticket-key-file", () => {
    const spec = {
      proxyServer: { image: "quay.io/x/cluster-proxy:1", replicas: 2 },
    } satisfies PartialManagedProxyConfigurationSpec;
    const deployment = find(renderProxyServer(mpc(spec)), "Deployment")!;
    const pod = (deployment.spec as DeploymentSpec).template.spec;
    const container = pod.containers[0]!;
    assert.ok(container.args.includes(`--tls-session-ticket-key-file=${MOUNTS.ticketKeys}/${TICKET_KEYS_FILE}`));
    assert.deepEqual(
      pod.volumes?.find((v) => v.name === "tls-ticket-keys"),
      { name: "tls-ticket-keys", secret: { secretName: ticketKeysSecretName("cluster-proxy") } },
    );
    assert.ok(container.volumeMounts?.some((m) => m.name === "tls-ticket-keys" && m.mountPath === MOUNTS.ticketKeys));
  });
});

describe("the proxy-server's command line comes from the server's option schema", () => {
  it("parses back with the server's own parser to the values rendered, for every entrypoint", () => {
    const keyOf = new Map(serverOptionsSchema.specs.map((s) => [s.flag, s.key]));
    const entrypoints: NonNullable<PartialManagedProxyConfigurationSpec["proxyServer"]>["entrypoint"][] = [
      undefined,
      { type: "PortForward" },
      { type: "LoadBalancerService", port: 8091 },
      { type: "Hostname", hostname: { value: "h.example" }, port: 443 },
    ];
    for (const entrypoint of entrypoints) {
      const spec = mpc({
        proxyServer: { image: "s", replicas: 2, ...(entrypoint ? { entrypoint } : {}) },
      }).spec;
      const values = serverArgValues(spec);
      const parsed: Record<string, unknown> = resolveOptions(serverOptionsSchema, rawFlags(serverArgs(spec)), {});
      for (const [flag, value] of Object.entries(values)) {
        if (value !== undefined) assert.deepEqual(parsed[keyOf.get(flag)!], value, `--${flag}`);
      }
      assert.equal(parsed["mode"], "both");
      assert.equal(parsed["agentUpgradePort"], entrypoint?.type === "PortForward" ? AGENT_UPGRADE_PORT : 0);
    }
  });
});
