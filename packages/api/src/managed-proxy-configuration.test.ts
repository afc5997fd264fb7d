import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  defaultedSpec,
  managedProxyConfigurationCrd,
  managedProxyConfigurationSchema,
  schemaReference,
  type JsonSchemaProps,
} from "./managed-proxy-configuration.js";

/** Every spec field of the Go addon's v1alpha1 (types at the release we replace, plus HEAD's additions). */
const GO_FIELDS = [
  "spec.authentication.signer.type",
  "spec.authentication.signer.selfSigned.additionalSANs",
  "spec.authentication.dump.secrets.signingProxyServerSecretName",
  "spec.authentication.dump.secrets.signingProxyClientSecretName",
  "spec.authentication.dump.secrets.signingAgentServerSecretName",
  "spec.proxyServer.image",
  "spec.proxyServer.replicas",
  "spec.proxyServer.inClusterServiceName",
  "spec.proxyServer.namespace",
  "spec.proxyServer.entrypoint.type",
  "spec.proxyServer.entrypoint.hostname.value",
  "spec.proxyServer.entrypoint.loadBalancerService.name",
  "spec.proxyServer.entrypoint.loadBalancerService.annotations[].key",
  "spec.proxyServer.entrypoint.loadBalancerService.annotations[].value",
  "spec.proxyServer.entrypoint.port",
  "spec.proxyServer.additionalArgs",
  "spec.proxyServer.nodePlacement.nodeSelector",
  "spec.proxyServer.nodePlacement.tolerations",
  "spec.proxyAgent.image",
  "spec.proxyAgent.replicas",
  "spec.proxyAgent.additionalArgs",
  "spec.proxyAgent.imagePullSecrets",
  "spec.proxyAgent.agentNodePlacements",
  "spec.proxyAgent.additionalServiceProxyArgs",
  "spec.proxyAgent.additionalServiceCAConfigMap",
  "spec.deploy.ports.proxyServer",
  "spec.deploy.ports.agentServer",
  "spec.deploy.ports.healthServer",
  "spec.deploy.ports.adminServer",
  "spec.userServer.additionalSANs",
];

function rules(schema: JsonSchemaProps): string[] {
  const own = (schema["x-kubernetes-validations"] ?? []).map((r) => r.message);
  const children = [
    ...Object.values(schema.properties ?? {}),
    ...(schema.items ? [schema.items] : []),
    ...(schema.additionalProperties ? [schema.additionalProperties] : []),
  ];
  return [...own, ...children.flatMap(rules)];
}

describe("ManagedProxyConfiguration schema", () => {
  it("accepts every field of the Go addon's v1alpha1", () => {
    const paths = new Set(schemaReference().map((r) => r.path));
    for (const field of GO_FIELDS) assert.ok(paths.has(field), `missing ${field}`);
  });

  it("generates a cluster-scoped CRD with a status subresource and printer columns", () => {
    const crd = managedProxyConfigurationCrd();
    assert.equal(crd.metadata.name, "managedproxyconfigurations.proxy.open-cluster-management.io");
    const spec = crd.spec as {
      scope: string;
      versions: { name: string; subresources: unknown; additionalPrinterColumns: { name: string }[] }[];
    };
    assert.equal(spec.scope, "Cluster");
    assert.equal(spec.versions[0]!.name, "v1alpha1");
    assert.deepEqual(spec.versions[0]!.subresources, { status: {} });
    assert.deepEqual(
      spec.versions[0]!.additionalPrinterColumns.map((c) => c.name),
      ["Entrypoint", "Replicas", "Ready", "CA Expiry", "Age"],
    );
  });

  it("is structural: every object has a type and no object mixes properties with additionalProperties", () => {
    const walk = (s: JsonSchemaProps, path: string): void => {
      assert.ok(s.type || s["x-kubernetes-preserve-unknown-fields"], `${path} has no type`);
      assert.ok(!(s.properties && s.additionalProperties), `${path} mixes properties and additionalProperties`);
      for (const [k, v] of Object.entries(s.properties ?? {})) walk(v, `${path}.${k}`);
      if (s.items) walk(s.items, `${path}[]`);
      if (s.additionalProperties) walk(s.additionalProperties, `${path}{}`);
    };
    walk(managedProxyConfigurationSchema, "");
  });

  it("an object with CEL rules has a default that already holds every defaulted field (the apiserver checks it so)", () => {
    const walk = (s: JsonSchemaProps, path: string): void => {
      if (s["x-kubernetes-validations"] && s.default !== undefined) {
        for (const [k, v] of Object.entries(s.properties ?? {}))
          if (v.default !== undefined)
            assert.deepEqual((s.default as Record<string, unknown>)[k], v.default, `${path}.default.${k}`);
      }
      for (const [k, v] of Object.entries(s.properties ?? {})) walk(v, `${path}.${k}`);
    };
    walk(managedProxyConfigurationSchema, "");
  });

  it("refuses what is not implemented with a message naming it", () => {
    const messages = rules(managedProxyConfigurationSchema).join("\n");
    for (const unsupported of [
      "CertManager",
      "PortForward",
      "userServer",
      "additionalServiceProxyArgs",
      "additionalServiceCAConfigMap",
    ])
      assert.match(messages, new RegExp(`${unsupported}.* not supported`), unsupported);
    assert.match(messages, /Hostname needs hostname\.value/);
  });

  it("fills the Go addon's defaults", () => {
    const spec = defaultedSpec({ proxyServer: { image: "s" }, proxyAgent: { image: "a" } } as never);
    assert.equal(spec.proxyServer.replicas, 3);
    assert.equal(spec.proxyServer.inClusterServiceName, "proxy-entrypoint");
    assert.equal(spec.proxyServer.namespace, "open-cluster-management-cluster-proxy");
    assert.equal(spec.authentication.signer.type, "SelfSigned");
    assert.deepEqual(spec.authentication.dump.secrets, {
      signingProxyServerSecretName: "proxy-server",
      signingProxyClientSecretName: "proxy-client",
      signingAgentServerSecretName: "agent-server",
    });
    assert.deepEqual(spec.deploy.ports, {
      proxyServer: 8090,
      agentServer: 8091,
      healthServer: 8092,
      adminServer: 8095,
    });
    assert.equal(spec.proxyAgent.replicas, 3);
    // A given value is kept.
    assert.equal(defaultedSpec({ proxyServer: { image: "s", replicas: 1 } } as never).proxyServer.replicas, 1);
  });
});
