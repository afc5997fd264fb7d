import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  configurationProblems,
  defaultedSpec,
  managedProxyConfigurationCrd,
  managedProxyConfigurationFromApi,
  managedProxyConfigurationSchema,
  schemaReference,
  type Condition,
  type EntrypointType,
  type JsonSchemaProps,
  type ManagedProxyConfigurationSpec,
  type PartialManagedProxyConfigurationSpec,
  type SchemaValue,
} from "./managed-proxy-configuration.js";

/** Compile-time equality of two types: `typecheck` fails when a `holds<Equal<A, B>>()` does not. */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const holds = <T extends true>(): T | undefined => undefined;

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
      versions: { name: string; subresources: unknown; additionalPrinterColumns: { name: string; type: string }[] }[];
    };
    assert.equal(spec.scope, "Cluster");
    assert.equal(spec.versions[0]!.name, "v1alpha1");
    assert.deepEqual(spec.versions[0]!.subresources, { status: {} });
    assert.deepEqual(
      spec.versions[0]!.additionalPrinterColumns.map((c) => c.name),
      ["Entrypoint", "Replicas", "Ready", "CA Expiry", "Age"],
    );
    // A "date" column prints the age since then: "<invalid>" for an expiry in the future.
    const caExpiry = spec.versions[0]!.additionalPrinterColumns.find((c) => c.name === "CA Expiry");
    assert.equal(caExpiry?.type, "string");
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
      "userServer",
      "additionalServiceProxyArgs",
      "additionalServiceCAConfigMap",
    ])
      assert.match(messages, new RegExp(`${unsupported}.* not supported`), unsupported);
    assert.match(messages, /Hostname needs hostname\.value/);
  });

  it("fills the Go addon's defaults", () => {
    const spec = defaultedSpec({ proxyServer: { image: "s" }, proxyAgent: { image: "a" } });
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
    assert.equal(defaultedSpec({ proxyServer: { image: "s", replicas: 1 } }).proxyServer.replicas, 1);
  });

  it("refuses an entrypoint hostname that is neither a DNS name nor an IP address", () => {
    const entrypoint =
      managedProxyConfigurationSchema.properties!.spec!.properties!.proxyServer!.properties!.entrypoint!;
    const rule = entrypoint.properties!.hostname!["x-kubernetes-validations"]![0]!;
    const pattern = /^self\.value\.matches\('(.*)'\)$/.exec(rule.rule)?.[1];
    assert.ok(pattern, rule.rule);
    const re = new RegExp(pattern);
    for (const ok of ["proxy.hub.example", "Proxy.Hub.Example.", "10.0.0.7", "fd00::1", "::ffff:10.0.0.1", "localhost"])
      assert.match(ok, re, ok);
    for (const bad of ["not a host!", "-a.example", "a..example", "a_b.example", "http://a.example", "a.example:8091"])
      assert.doesNotMatch(bad, re, bad);
    assert.equal(rule.fieldPath, ".value");
  });

  it("managedProxyConfigurationFromApi fills the defaults of an object as the chart writes it", () => {
    const stored = {
      apiVersion: "proxy.open-cluster-management.io/v1alpha1",
      kind: "ManagedProxyConfiguration",
      metadata: { name: "cluster-proxy", resourceVersion: "7", labels: { a: "b" } },
      spec: {
        authentication: { signer: { type: "SelfSigned" } },
        proxyServer: { image: "s", namespace: "open-cluster-management-addon" },
        proxyAgent: { image: "a" },
      },
      status: { caExpiry: "2030-01-01T00:00:00Z" },
    };
    const mpc = managedProxyConfigurationFromApi(stored);
    assert.equal(mpc.spec.authentication.dump.secrets.signingProxyClientSecretName, "proxy-client");
    assert.equal(mpc.spec.proxyServer.inClusterServiceName, "proxy-entrypoint");
    assert.equal(mpc.spec.proxyServer.namespace, "open-cluster-management-addon");
    assert.deepEqual(mpc.status, stored.status);
    assert.deepEqual(mpc.metadata, stored.metadata);
    assert.equal(stored.spec.authentication.signer.type, "SelfSigned", "the stored object is not changed");
    assert.equal("dump" in stored.spec.authentication, false);
  });

  it("configurationProblems: what the CRD refuses, for objects a CRD without the rules let in", () => {
    const spec = (over: Record<string, unknown>): Parameters<typeof configurationProblems>[0] =>
      defaultedSpec({ proxyServer: { image: "s" }, proxyAgent: { image: "a" }, ...over });
    assert.deepEqual(configurationProblems(spec({})), []);
    const server = (entrypoint: unknown): Parameters<typeof configurationProblems>[0] =>
      spec({ proxyServer: { image: "s", entrypoint } });
    assert.deepEqual(configurationProblems(server({ type: "Hostname", hostname: { value: "proxy.example" } })), []);
    const one = (s: Parameters<typeof configurationProblems>[0]): string => {
      const p = configurationProblems(s);
      assert.equal(p.length, 1, p.join("\n"));
      return p[0]!;
    };
    assert.match(
      one(spec({ authentication: { signer: { type: "CertManager" } } })),
      /^spec\.authentication\.signer\.type: signer type CertManager is not supported/,
    );
    assert.deepEqual(configurationProblems(server({ type: "PortForward" })), []);
    assert.match(
      one(server({ type: "Hostname" })),
      /^spec\.proxyServer\.entrypoint\.hostname: .*needs hostname\.value/,
    );
    assert.match(
      one(server({ type: "Hostname", hostname: { value: "not a host!" } })),
      /^spec\.proxyServer\.entrypoint\.hostname\.value: hostname\.value must be a DNS name or an IP address/,
    );
    assert.match(
      one(server({ type: "LoadBalancerService", loadBalancerService: {}, hostname: { value: "proxy.example" } })),
      /^spec\.proxyServer\.entrypoint\.hostname: /,
    );
    assert.match(one(spec({ userServer: {} })), /^spec\.userServer: userServer is not supported/);
    assert.match(
      one(spec({ proxyAgent: { image: "a", additionalServiceProxyArgs: ["--x"] } })),
      /^spec\.proxyAgent\.additionalServiceProxyArgs: /,
    );
  });
});

describe("the API's TypeScript types come from the schema (SchemaValue)", () => {
  it("a property is present once defaulted when the schema requires it or gives it a default; partial makes all optional", () => {
    type S = {
      type: "object";
      required: readonly ["b"];
      properties: {
        a: { type: "string"; default: "x" };
        b: { type: "integer" };
        c: { type: "string"; enum: readonly ["A", "B"] };
        d: { type: "array"; items: { type: "object"; properties: { e: { type: "boolean" } }; required: ["e"] } };
        m: { type: "object"; additionalProperties: { type: "string" } };
      };
    };
    holds<
      Equal<SchemaValue<S>, { a: string; b: number; c?: "A" | "B"; d?: { e: boolean }[]; m?: Record<string, string> }>
    >();
    holds<
      Equal<
        SchemaValue<S, "partial">,
        { a?: string; b?: number; c?: "A" | "B"; d?: { e?: boolean }[]; m?: Record<string, string> }
      >
    >();
  });

  it("the ManagedProxyConfiguration's types follow its schema's required fields, defaults and enums", () => {
    holds<Equal<ManagedProxyConfigurationSpec["proxyServer"]["replicas"], number>>();
    holds<
      Equal<
        ManagedProxyConfigurationSpec["authentication"]["signer"]["type"],
        "SelfSigned" | "Provided" | "CertManager"
      >
    >();
    holds<Equal<ManagedProxyConfigurationSpec["userServer"], { additionalSANs?: string[] } | undefined>>();
    holds<Equal<EntrypointType, "Hostname" | "LoadBalancerService" | "PortForward">>();
    holds<Equal<Condition["status"], "True" | "False" | "Unknown">>();
    holds<Equal<NonNullable<PartialManagedProxyConfigurationSpec["proxyServer"]>["image"], string | undefined>>();
    // @ts-expect-error -- a stored spec's proxyAgent needs its image (required, no default)
    const agent: ManagedProxyConfigurationSpec["proxyAgent"] = { replicas: 1 };
    const spec = defaultedSpec({ proxyServer: { image: "s" }, proxyAgent: { image: "a" } });
    assert.equal(spec.deploy.ports.agentServer, 8091, "a defaulted field is set at run time as its type says");
    assert.equal(agent.image, undefined);
  });
});
