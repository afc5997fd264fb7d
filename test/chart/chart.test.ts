/**
 * The Helm chart offline (helm lint and helm template; no cluster): it lints strictly, renders what
 * the values ask for, refuses an unknown or mistyped value naming it, and grants no wildcard.
 * test/chart/helm.test.ts installs it on the test environment's hub.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadAllYaml } from "@kubernetes/client-node";
import { SHUTDOWN_GRACE_MS } from "@cluster-proxy/gateway";
import { CHART, helm } from "../infra/chart.js";

interface Obj {
  kind: string;
  metadata: { name: string; namespace?: string };
  spec?: Record<string, unknown>;
  rules?: { apiGroups?: string[]; resources?: string[]; verbs?: string[]; resourceNames?: string[] }[];
}

function render(...set: string[]): Obj[] {
  const r = helm(["template", "cluster-proxy", CHART, "-n", "open-cluster-management-addon", ...set]);
  assert.equal(r.status, 0, r.stderr);
  // A JSON round trip turns client-node's model classes into plain objects.
  return (JSON.parse(JSON.stringify(loadAllYaml(r.stdout))) as (Obj | null)[]).filter((o): o is Obj => o !== null);
}
const find = (objs: Obj[], kind: string, name: string): Obj => {
  const o = objs.find((x) => x.kind === kind && x.metadata.name === name);
  assert.ok(o, `${kind} ${name} rendered`);
  return o;
};

describe("the Helm chart (helm lint, helm template)", { timeout: 20 * 60_000 }, () => {
  test("helm lint --strict passes", () => {
    const r = helm(["lint", "--strict", CHART, "--set", "proxyServer.entrypointAddress=proxy.example.com"]);
    assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/);
  });

  test("an unknown or mistyped value fails, naming it (install and upgrade validate the same schema)", () => {
    const typo = helm(["lint", "--strict", CHART, "--set", "proxyServer.entrypointAdress=proxy.example.com"]);
    assert.notEqual(typo.status, 0);
    assert.match(
      `${typo.stdout}${typo.stderr}`,
      /at '\/proxyServer': additional properties 'entrypointAdress' not allowed/,
    );
    const dir = mkdtempSync(join(tmpdir(), "cp-chart-"));
    try {
      const bad = join(dir, "bad.yaml");
      writeFileSync(
        bad,
        'replicas: 2.5\nproxyServer:\n  port: 70000\n  replicas: "3"\naddonManager:\n  logLevel: verbose\n',
      );
      const r = helm(["template", "cluster-proxy", CHART, "-f", bad]);
      assert.notEqual(r.status, 0);
      for (const want of [
        /at '\/replicas': got number, want integer/,
        /at '\/proxyServer\/port': maximum: got 70,000, want 65,535/,
        /at '\/proxyServer\/replicas': got string, want integer/,
        /at '\/addonManager\/logLevel': value must be one of 'debug', 'info', 'warn', 'error'/,
      ])
        assert.match(r.stderr, want);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("entrypointAddress gives a Hostname entrypoint, entrypointLoadBalancer a LoadBalancer one, neither PortForward", () => {
    const spec = (objs: Obj[]): { proxyServer: Record<string, unknown> } =>
      find(objs, "ManagedProxyConfiguration", "cluster-proxy").spec as { proxyServer: Record<string, unknown> };
    const host = spec(
      render("--set", "proxyServer.entrypointAddress=proxy.example.com", "--set", "proxyServer.port=443"),
    );
    assert.deepEqual(host.proxyServer.entrypoint, {
      type: "Hostname",
      hostname: { value: "proxy.example.com" },
      port: 443,
    });
    assert.equal(host.proxyServer.namespace, "open-cluster-management-addon");
    assert.equal(host.proxyServer.image, "localhost/cluster-proxy:0.1.0");
    const lb = spec(render("--set", "proxyServer.entrypointLoadBalancer=true"));
    assert.deepEqual(lb.proxyServer.entrypoint, { type: "LoadBalancerService", loadBalancerService: {}, port: 8091 });
    assert.deepEqual(spec(render()).proxyServer.entrypoint, { type: "PortForward", port: 8091 });
  });

  test("installByPlacement: the chart's Placement over global by default, or the one named; global stays bound", () => {
    const objs = render();
    const placement = find(objs, "Placement", "cluster-proxy").spec;
    assert.deepEqual(placement?.clusterSets, ["global"]);
    // A cluster labelled proxy.open-cluster-management.io/install=false is left out.
    assert.deepEqual(placement?.predicates, [
      {
        requiredClusterSelector: {
          labelSelector: {
            matchExpressions: [
              { key: "proxy.open-cluster-management.io/install", operator: "NotIn", values: ["false"] },
            ],
          },
        },
      },
    ]);
    assert.equal(find(objs, "ManagedClusterSetBinding", "global").spec?.clusterSet, "global");
    const cma = (o: Obj[]): unknown =>
      (find(o, "ClusterManagementAddOn", "cluster-proxy").spec as { installStrategy: unknown }).installStrategy;
    assert.deepEqual(cma(objs), {
      type: "Placements",
      placements: [{ name: "cluster-proxy", namespace: "open-cluster-management-addon" }],
    });
    const own = render(
      "--set",
      "installByPlacement.placementName=prod",
      "--set",
      "installByPlacement.placementNamespace=fleet",
    );
    assert.ok(!own.some((o) => o.kind === "Placement"));
    // Kept: a Placement of yours in the release namespace selects from global too, and switching
    // between the chart's Placement and yours never deletes the binding under the one in use.
    assert.equal(find(own, "ManagedClusterSetBinding", "global").metadata.namespace, "open-cluster-management-addon");
    assert.deepEqual(cma(own), { type: "Placements", placements: [{ name: "prod", namespace: "fleet" }] });
  });

  test("RBAC: no wildcard; secrets never deleted; CSR signing only for the addon's signer; the agents' tunnel role", () => {
    const objs = render();
    const tunnel = find(objs, "ClusterRole", "open-cluster-management:cluster-proxy:agent-tunnel");
    assert.deepEqual(tunnel.rules, [
      { apiGroups: [""], resources: ["pods/proxy"], verbs: ["get"] },
      { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"] },
    ]);
    const rules = objs
      .filter((o) => (o.kind === "ClusterRole" || o.kind === "Role") && o !== tunnel)
      .flatMap((o) => o.rules ?? []);
    assert.ok(rules.length > 10);
    for (const r of rules) {
      for (const field of [r.apiGroups, r.resources, r.verbs]) assert.ok(!field?.includes("*"), JSON.stringify(r));
    }
    const secrets = rules.filter((r) => r.resources?.includes("secrets"));
    assert.deepEqual(
      secrets.flatMap((r) => r.verbs),
      ["get", "list", "watch", "create", "update", "patch"],
    );
    const signers = rules.filter((r) => r.resources?.includes("signers"));
    assert.deepEqual(
      signers.map((r) => [r.resourceNames, r.verbs]),
      [
        [["open-cluster-management.io/proxy-agent-signer"], ["approve", "sign"]],
        [["kubernetes.io/kube-apiserver-client"], ["approve"]],
      ],
    );
    // It binds the tunnel role without holding its rights.
    const clusterRoles = rules.filter((r) => r.resources?.includes("clusterroles"));
    assert.deepEqual(
      clusterRoles.map((r) => [r.resourceNames, r.verbs]),
      [[["open-cluster-management:cluster-proxy:agent-tunnel"], ["get", "bind"]]],
    );
    assert.ok(!rules.some((r) => r.resources?.includes("pods/proxy") || r.resources?.includes("endpointslices")));
    const pods = rules.filter((r) => r.resources?.includes("pods"));
    assert.deepEqual(
      pods.flatMap((r) => r.verbs),
      ["get", "list", "watch"],
    );
  });

  test("clusterProfile.enabled: the manager's --cluster-profiles and only read + status rights on ClusterProfiles", () => {
    const rulesOf = (objs: Obj[]) =>
      find(objs, "ClusterRole", "cluster-proxy-addon-manager").rules!.filter((r) =>
        r.apiGroups?.includes("multicluster.x-k8s.io"),
      );
    const argsOf = (objs: Obj[]): string[] =>
      (
        find(objs, "Deployment", "cluster-proxy-addon-manager").spec as {
          template: { spec: { containers: { args: string[] }[] } };
        }
      ).template.spec.containers[0]!.args;
    const off = render();
    assert.deepEqual(rulesOf(off), []);
    assert.ok(!argsOf(off).some((a) => a.startsWith("--cluster-profile")));
    const on = render("--set", "clusterProfile.enabled=true");
    assert.ok(argsOf(on).includes("--cluster-profiles=true"));
    assert.deepEqual(rulesOf(on), [
      { apiGroups: ["multicluster.x-k8s.io"], resources: ["clusterprofiles"], verbs: ["get", "list", "watch"] },
      { apiGroups: ["multicluster.x-k8s.io"], resources: ["clusterprofiles/status"], verbs: ["update", "patch"] },
    ]);
  });

  test("the addon manager: leader election, probes, resources, restricted security context", () => {
    const d = find(render(), "Deployment", "cluster-proxy-addon-manager").spec as {
      template: { spec: { securityContext: Record<string, unknown>; containers: Record<string, unknown>[] } };
    };
    const pod = d.template.spec;
    const c = pod.containers[0]!;
    assert.deepEqual(c.command, ["cluster-proxy", "addon-manager"]);
    assert.ok((c.args as string[]).includes("--leader-elect=true"));
    // The agents get the gateway's impersonation prefix through the manager: one value, no drift.
    assert.ok((c.args as string[]).includes("--gateway-impersonation-prefix=cluster:hub:"));
    assert.ok(c.livenessProbe && c.readinessProbe && c.resources);
    assert.equal(pod.securityContext.runAsNonRoot, true);
    assert.deepEqual(c.securityContext, {
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ["ALL"] },
    });
  });

  test("the aggregated path: the APIService for the gateway's Service (caBundle left to the manager), the gateway reading the hub's requestheader settings, the manager patching that one APIService; off with gateway.aggregatedApi.enabled=false", () => {
    const objs = render();
    const apiService = find(objs, "APIService", "v1alpha1.gateway.proxy.open-cluster-management.io") as Obj & {
      spec: Record<string, unknown>;
    };
    assert.deepEqual(apiService.spec, {
      group: "gateway.proxy.open-cluster-management.io",
      version: "v1alpha1",
      service: { namespace: "open-cluster-management-addon", name: "cluster-proxy-addon-user", port: 9092 },
      groupPriorityMinimum: 1000,
      versionPriority: 15,
    });
    const reader = find(objs, "RoleBinding", "cluster-proxy-addon-user-extension-auth") as Obj & {
      roleRef: { kind: string; name: string };
      subjects: unknown;
    };
    assert.equal(reader.metadata.namespace, "kube-system");
    assert.deepEqual(reader.roleRef, {
      apiGroup: "rbac.authorization.k8s.io",
      kind: "Role",
      name: "extension-apiserver-authentication-reader",
    });
    assert.deepEqual(find(objs, "ClusterRole", "cluster-proxy-addon-manager-apiservice").rules, [
      {
        apiGroups: ["apiregistration.k8s.io"],
        resources: ["apiservices"],
        resourceNames: ["v1alpha1.gateway.proxy.open-cluster-management.io"],
        verbs: ["get", "patch"],
      },
    ]);
    // The hub's check is only the door (every authenticated user); the gateway's per-cluster check decides.
    assert.deepEqual(find(objs, "ClusterRole", "cluster-proxy-gateway-door").rules, [
      {
        apiGroups: ["gateway.proxy.open-cluster-management.io"],
        resources: ["clusters/proxy"],
        verbs: ["get", "create", "update", "patch", "delete"],
      },
    ]);
    assert.deepEqual(
      (find(objs, "ClusterRoleBinding", "cluster-proxy-gateway-door") as Obj & { subjects: unknown }).subjects,
      [{ apiGroup: "rbac.authorization.k8s.io", kind: "Group", name: "system:authenticated" }],
    );
    const off = render("--set", "gateway.aggregatedApi.enabled=false");
    assert.equal(
      off.filter(
        (o) =>
          o.kind === "APIService" ||
          o.metadata.name.endsWith("-apiservice") ||
          o.metadata.name === "cluster-proxy-gateway-door",
      ).length,
      0,
    );
    assert.equal(off.filter((o) => o.metadata.name === "cluster-proxy-addon-user-extension-auth").length, 0);
    const args = (
      find(off, "Deployment", "cluster-proxy-addon-user").spec as {
        template: { spec: { containers: { args: string[] }[] } };
      }
    ).template.spec.containers[0]!.args;
    assert.ok(args.includes("--front-proxy-authentication=false"));
  });

  test("the gateway: Deployment and Service cluster-proxy-addon-user with the contract's flags and the manager's Secrets, least-privilege RBAC, off with gateway.enabled=false", () => {
    const objs = render();
    type Container = {
      command: string[];
      args: string[];
      ports: { name: string; containerPort: number }[];
      readinessProbe: { httpGet: { path: string; port: string } };
      livenessProbe: { httpGet: { path: string; port: string } };
      volumeMounts: { name: string; mountPath: string }[];
      securityContext: unknown;
    };
    type Pod = {
      serviceAccountName: string;
      terminationGracePeriodSeconds: number;
      containers: Container[];
      volumes: { name: string; secret?: { secretName: string }; configMap?: { name: string } }[];
    };
    const deployment = find(objs, "Deployment", "cluster-proxy-addon-user").spec as {
      replicas: number;
      strategy: unknown;
      template: { spec: Pod };
    };
    assert.equal(deployment.replicas, 2);
    const pod = deployment.template.spec;
    assert.equal(pod.serviceAccountName, "cluster-proxy-addon-user");
    const c = pod.containers[0]!;
    assert.deepEqual(c.command, ["cluster-proxy", "gateway"]);
    assert.deepEqual(c.args, [
      "--port=9092",
      "--health-port=9093",
      "--shutdown-delay=5s",
      "--serving-cert=/etc/gateway/serving/tls.crt",
      "--serving-key=/etc/gateway/serving/tls.key",
      "--proxy-server-host=proxy-entrypoint.open-cluster-management-addon.svc",
      "--proxy-server-port=8090",
      "--proxy-ca=/etc/gateway/serving/ca.crt",
      "--proxy-cert=/etc/gateway/proxy-client/tls.crt",
      "--proxy-key=/etc/gateway/proxy-client/tls.key",
      "--identity-cert=/etc/gateway/identity/tls.crt",
      "--identity-key=/etc/gateway/identity/tls.key",
      "--agent-ca=/etc/gateway/identity/agent-ca.crt",
      "--namespace=$(POD_NAMESPACE)",
      "--impersonation-prefix=cluster:hub:",
      "--passthrough-unrecognized-tokens=false",
      "--accept-hub-api-audience=true",
      "--front-proxy-authentication=true",
    ]);
    const narrowed = find(
      render(
        "--set",
        "gateway.acceptHubApiAudience=false",
        "--set",
        "gateway.allowedUpgradeOrigins={https://a.example,https://b.example:8443}",
      ),
      "Deployment",
      "cluster-proxy-addon-user",
    ).spec as { template: { spec: Pod } };
    assert.deepEqual(narrowed.template.spec.containers[0]!.args.slice(-3), [
      "--accept-hub-api-audience=false",
      "--front-proxy-authentication=true",
      "--allowed-upgrade-origins=https://a.example,https://b.example:8443",
    ]);
    // Every file a flag names is in a mounted volume of the Secret that holds it.
    const mounts = Object.fromEntries(c.volumeMounts.map((m) => [m.mountPath, m.name]));
    const secretOf = (volume: string): string | undefined =>
      pod.volumes.find((v) => v.name === volume)?.secret?.secretName;
    assert.equal(secretOf(mounts["/etc/gateway/serving"]!), "cluster-proxy-gateway-serving");
    assert.equal(secretOf(mounts["/etc/gateway/proxy-client"]!), "proxy-client");
    assert.equal(secretOf(mounts["/etc/gateway/identity"]!), "cluster-proxy-gateway-identity");
    assert.deepEqual(c.readinessProbe.httpGet, { path: "/readyz", port: "health" });
    assert.deepEqual(c.livenessProbe.httpGet, { path: "/healthz", port: "health" });
    // SIGTERM: not ready, --shutdown-delay (5s) still serving, then requests in flight get the
    // shutdown grace; SIGKILL only after it.
    assert.deepEqual(deployment.strategy, { type: "RollingUpdate", rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } });
    assert.ok(pod.terminationGracePeriodSeconds * 1000 >= 5_000 + SHUTDOWN_GRACE_MS + 10_000, "delay + grace + room");
    assert.deepEqual(
      c.ports.map((p) => [p.name, p.containerPort]),
      [
        ["https", 9092],
        ["health", 9093],
      ],
    );
    assert.deepEqual(c.securityContext, {
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ["ALL"] },
    });
    const service = find(objs, "Service", "cluster-proxy-addon-user").spec as {
      ports: { port: number; targetPort: number }[];
      selector: Record<string, string>;
    };
    assert.deepEqual(
      service.ports.map((p) => [p.port, p.targetPort]),
      [[9092, 9092]],
    );
    assert.equal(service.selector["app.kubernetes.io/component"], "gateway");
    assert.equal((service as { type?: string }).type, "ClusterIP");
    const exposed = find(
      render(
        "--set",
        "gateway.service.type=LoadBalancer",
        "--set-string",
        "gateway.service.annotations.service\\.beta\\.kubernetes\\.io/aws-load-balancer-internal=true",
      ),
      "Service",
      "cluster-proxy-addon-user",
    ) as Obj & { spec: { type: string }; metadata: { annotations?: Record<string, string> } };
    assert.equal(exposed.spec.type, "LoadBalancer");
    assert.deepEqual(exposed.metadata.annotations, { "service.beta.kubernetes.io/aws-load-balancer-internal": "true" });
    const allowlist = find(objs, "ConfigMap", "cluster-proxy-exposed-services") as Obj & { data: { services: string } };
    assert.equal(allowlist.data.services.trim(), "[]");

    // Least privilege: authenticate, authorize, know the clusters, read this addon's
    // ManagedClusterAddOns by name (the fleet view); its allowlist and Events in its namespace.
    assert.deepEqual(find(objs, "ClusterRole", "cluster-proxy-addon-user").rules, [
      { apiGroups: ["authentication.k8s.io"], resources: ["tokenreviews"], verbs: ["create"] },
      { apiGroups: ["authorization.k8s.io"], resources: ["subjectaccessreviews"], verbs: ["create"] },
      {
        apiGroups: ["cluster.open-cluster-management.io"],
        resources: ["managedclusters"],
        verbs: ["get", "list", "watch"],
      },
      {
        apiGroups: ["addon.open-cluster-management.io"],
        resources: ["managedclusteraddons"],
        resourceNames: ["cluster-proxy"],
        verbs: ["list", "watch"],
      },
    ]);
    const role = find(objs, "Role", "cluster-proxy-addon-user");
    assert.equal(role.metadata.namespace, "open-cluster-management-addon");
    assert.deepEqual(role.rules, [
      {
        apiGroups: [""],
        resources: ["configmaps"],
        resourceNames: ["cluster-proxy-exposed-services"],
        verbs: ["get", "list", "watch"],
      },
      { apiGroups: [""], resources: ["events"], verbs: ["create", "patch"] },
    ]);
    for (const kind of ["ClusterRoleBinding", "RoleBinding"]) {
      const b = find(objs, kind, "cluster-proxy-addon-user") as Obj & { subjects: unknown; roleRef: { name: string } };
      assert.equal(b.roleRef.name, "cluster-proxy-addon-user");
      assert.deepEqual(b.subjects, [
        { kind: "ServiceAccount", name: "cluster-proxy-addon-user", namespace: "open-cluster-management-addon" },
      ]);
    }
    find(objs, "ServiceAccount", "cluster-proxy-addon-user");

    // Off: none of it.
    const off = render("--set", "gateway.enabled=false");
    assert.deepEqual(
      off.filter(
        (o) =>
          o.metadata.name.startsWith("cluster-proxy-addon-user") ||
          o.metadata.name === "cluster-proxy-exposed-services",
      ),
      [],
    );
  });

  test("gateway values: OIDC flags (and its CA ConfigMap mounted) only with an issuer, log level, allowlist, extra arguments last", () => {
    const dir = mkdtempSync(join(tmpdir(), "cp-chart-"));
    try {
      const values = join(dir, "gateway.yaml");
      writeFileSync(
        values,
        [
          "gateway:",
          "  replicas: 3",
          "  logLevel: debug",
          "  impersonationPrefix: 'hub:'",
          "  passthroughUnrecognizedTokens: true",
          "  oidc:",
          "    issuerURL: https://idp.example.com",
          "    clientID: cluster-proxy",
          "    usernamePrefix: 'oidc:'",
          "    groupsClaim: groups",
          "    groupsPrefix: 'oidc:'",
          "    caConfigMap: idp-ca",
          "  exposedServices:",
          "    - {cluster: mc1, namespace: web, name: frontend, port: 8080}",
          "  additionalArgs: [--dial-timeout=5s]",
          "",
        ].join("\n"),
      );
      const objs = render("-f", values);
      const pod = (
        find(objs, "Deployment", "cluster-proxy-addon-user").spec as {
          replicas: number;
          template: {
            spec: {
              containers: { args: string[]; volumeMounts: { name: string; mountPath: string }[] }[];
              volumes: { name: string; configMap?: { name: string } }[];
            };
          };
        }
      ).template.spec;
      const args = pod.containers[0]!.args;
      for (const want of [
        "--impersonation-prefix=hub:",
        "--passthrough-unrecognized-tokens=true",
        "--log-level=debug",
        "--oidc-issuer-url=https://idp.example.com",
        "--oidc-client-id=cluster-proxy",
        "--oidc-username-claim=sub",
        "--oidc-username-prefix=oidc:",
        "--oidc-groups-claim=groups",
        "--oidc-groups-prefix=oidc:",
        "--oidc-ca-file=/etc/gateway/oidc-ca/ca.crt",
      ])
        assert.ok(args.includes(want), `${want} in ${args.join(" ")}`);
      assert.equal(args.at(-1), "--dial-timeout=5s");
      const manager = (
        find(objs, "Deployment", "cluster-proxy-addon-manager").spec as {
          template: { spec: { containers: { args: string[] }[] } };
        }
      ).template.spec.containers[0]!.args;
      assert.ok(manager.includes("--gateway-impersonation-prefix=hub:"), manager.join(" "));
      assert.equal(pod.volumes.find((v) => v.name === "oidc-ca")?.configMap?.name, "idp-ca");
      assert.ok(pod.containers[0]!.volumeMounts.some((m) => m.mountPath === "/etc/gateway/oidc-ca"));
      const allowlist = find(objs, "ConfigMap", "cluster-proxy-exposed-services") as Obj & {
        data: { services: string };
      };
      assert.deepEqual(loadAllYaml(allowlist.data.services), [
        [{ cluster: "mc1", namespace: "web", name: "frontend", port: 8080 }],
      ]);
      // No issuer: no OIDC flag at all (the CA ConfigMap is not mounted either).
      const plain = (
        find(render("--set", "gateway.oidc.caConfigMap=idp-ca"), "Deployment", "cluster-proxy-addon-user").spec as {
          template: { spec: { containers: { args: string[] }[]; volumes: { name: string }[] } };
        }
      ).template.spec;
      assert.ok(!plain.containers[0]!.args.some((a) => a.startsWith("--oidc-")));
      assert.ok(!plain.volumes.some((v) => v.name === "oidc-ca"));
      const bad = helm(["template", "cluster-proxy", CHART, "--set", "gateway.oidc.issuerURL=http://idp.example.com"]);
      assert.notEqual(bad.status, 0);
      assert.match(bad.stderr, /gateway\/oidc\/issuerURL/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
