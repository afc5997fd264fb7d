/**
 * The `ManagedProxyConfiguration` API (`proxy.open-cluster-management.io/v1alpha1`): its OpenAPI schema
 * with defaults and CEL rules, the CRD generated from it, and the TypeScript types the manager reads.
 * Design: docs/design/addon-manager.md#the-managedproxyconfiguration-api
 */
import { AGENT_DOOR_PORT, GRPC_DOOR_PORT, HEALTH_DOOR_PORT } from "./hub-names.js";

export const MPC_GROUP = "proxy.open-cluster-management.io";
export const MPC_VERSION = "v1alpha1";
export const MPC_KIND = "ManagedProxyConfiguration";
export const MPC_PLURAL = "managedproxyconfigurations";
export const MPC_API_VERSION = `${MPC_GROUP}/${MPC_VERSION}`;

/** Condition types of `status.conditions` (the first four are the Go addon's names). */
export const MpcConditions = {
  /** True only when every desired proxy-server replica is ready. */
  ProxyServerDeployed: "ProxyServerDeployed",
  ProxyServerSecretSigned: "ProxyServerSecretSigned",
  AgentServerSecretSigned: "AgentServerSecretSigned",
  ProxyClientSecretSigned: "ProxyClientSecretSigned",
  /** The gateway's serving certificate (`cluster-proxy-gateway-serving`) is issued. */
  GatewayServingSecretSigned: "GatewayServingSecretSigned",
  /** The gateway's identity towards the agents (`cluster-proxy-gateway-identity`, gateway CA) is issued. */
  GatewayIdentitySecretSigned: "GatewayIdentitySecretSigned",
  /** True when agents have an address to dial (for a LoadBalancer: an ingress is assigned). */
  EntrypointReady: "EntrypointReady",
  /** False when the signer CA was re-created while certificates of an earlier CA are still out there. */
  SignerCAConsistent: "SignerCAConsistent",
} as const;

/** An OpenAPI v3 schema as Kubernetes accepts it in a CRD (structural, with CEL rules). */
export interface JsonSchemaProps {
  type?: "object" | "array" | "string" | "integer" | "boolean" | "number";
  description?: string;
  properties?: Record<string, JsonSchemaProps>;
  required?: readonly string[];
  items?: JsonSchemaProps;
  additionalProperties?: JsonSchemaProps;
  default?: unknown;
  enum?: readonly string[];
  format?: string;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  maxItems?: number;
  pattern?: string;
  "x-kubernetes-validations"?: readonly { rule: string; message: string; fieldPath?: string; reason?: string }[];
  "x-kubernetes-list-type"?: "atomic" | "set" | "map";
  "x-kubernetes-list-map-keys"?: readonly string[];
  "x-kubernetes-map-type"?: "atomic" | "granular";
  "x-kubernetes-preserve-unknown-fields"?: boolean;
}

/**
 * The TypeScript type of the values a schema admits. `"stored"`: once the apiserver (or
 * `withSchemaDefaults`) filled in the defaults, a property is present when the schema requires it or
 * gives it a default. `"partial"`: any part of such a value, every property optional (what
 * `defaultedSpec` completes). The API's types below are derived with it: the schema is their only source.
 */
export type SchemaValue<S, Mode extends "stored" | "partial" = "stored"> = S extends { enum: readonly (infer E)[] }
  ? E
  : S extends { type: "string" }
    ? string
    : S extends { type: "integer" | "number" }
      ? number
      : S extends { type: "boolean" }
        ? boolean
        : S extends { type: "array"; items: infer I }
          ? SchemaValue<I, Mode>[]
          : S extends { type: "object"; properties: infer P }
            ? ObjectValue<P, Mode extends "stored" ? PresentKeys<S, P> : never, Mode>
            : S extends { type: "object"; additionalProperties: infer A }
              ? Record<string, SchemaValue<A, Mode>>
              : S extends { type: "object" }
                ? Record<string, unknown>
                : unknown;

/** The properties of an object schema that are present once defaulted: required or with a default. */
type PresentKeys<S, P> = {
  [K in keyof P]: K extends (S extends { required: readonly (infer R)[] } ? R : never)
    ? K
    : P[K] extends { default: unknown }
      ? K
      : never;
}[keyof P];

type ObjectValue<P, Present extends keyof P, Mode extends "stored" | "partial"> = {
  -readonly [K in Present]: SchemaValue<P[K], Mode>;
} & { -readonly [K in Exclude<keyof P, Present>]?: SchemaValue<P[K], Mode> } extends infer O
  ? { [K in keyof O]: O[K] }
  : never;

// --- small builders, so the schema below reads like the API ------------------------------------
// Each keeps its arguments' literal types (`const` type parameters), so that `SchemaValue` can
// derive the TypeScript types from the schema itself.

type SchemaExtra = Omit<JsonSchemaProps, "type" | "description" | "properties" | "items">;

const str = <const X extends SchemaExtra = object>(
  description: string,
  extra?: X,
): { type: "string"; description: string } & NoInfer<X> =>
  Object.assign({}, { type: "string" as const, description }, extra);
const int32 = <const X extends SchemaExtra = object>(
  description: string,
  extra?: X,
): { type: "integer"; format: "int32"; description: string } & NoInfer<X> =>
  Object.assign({}, { type: "integer" as const, format: "int32" as const, description }, extra);
const obj = <const P extends Record<string, JsonSchemaProps>, const X extends SchemaExtra = object>(
  description: string,
  properties: P,
  extra?: X,
): { type: "object"; description: string; properties: P } & NoInfer<X> =>
  Object.assign({}, { type: "object" as const, description, properties }, extra);
const list = <const I extends JsonSchemaProps, const X extends SchemaExtra = object>(
  description: string,
  items: I,
  extra?: X,
): { type: "array"; description: string; items: I } & NoInfer<X> =>
  Object.assign({}, { type: "array" as const, description, items }, extra);
const port = <const D extends number>(description: string, dflt: D) =>
  int32(description, { default: dflt, minimum: 1, maximum: 65535 });
const stringMap = (description: string) =>
  ({ type: "object", description, additionalProperties: { type: "string" } }) as const;

const DNS_LABEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
const DNS_SUBDOMAIN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/** A DNS name (any case, as agents resolve it), an IPv4 address, or an IPv6 address (hex digits and colons). */
const HOST_OR_IP =
  "^([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?([.][a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*[.]?|[0-9a-fA-F.]*:[0-9a-fA-F:.]*)$";

const tolerations = list(
  "Tolerations of the pods (core/v1 Toleration).",
  obj("A toleration.", {
    key: str("Taint key the toleration applies to; empty matches all keys."),
    operator: str("Exists or Equal (default Equal).", { enum: ["Exists", "Equal"] }),
    value: str("Taint value the toleration matches."),
    effect: str("Taint effect to match; empty matches all effects.", {
      enum: ["NoSchedule", "PreferNoSchedule", "NoExecute"],
    }),
    tolerationSeconds: { type: "integer", format: "int64", description: "How long a NoExecute taint is tolerated." },
  }),
);

const nodePlacement = (what: string) =>
  obj(`Which nodes the ${what} run on.`, {
    nodeSelector: stringMap("Node labels the pods must match."),
    tolerations,
  });

const resourceRequirements = obj("Compute resources of the proxy-server container (core/v1 ResourceRequirements).", {
  limits: { ...stringMap("Maximum resources, e.g. cpu: 1, memory: 512Mi."), additionalProperties: { type: "string" } },
  requests: {
    ...stringMap("Requested resources, e.g. cpu: 100m, memory: 128Mi."),
    additionalProperties: { type: "string" },
  },
});

const conditionSchema = obj(
  "A condition (metav1.Condition).",
  {
    type: str("Condition type.", { maxLength: 316 }),
    status: str("True, False or Unknown.", { enum: ["True", "False", "Unknown"] }),
    observedGeneration: {
      type: "integer",
      format: "int64",
      minimum: 0,
      description: "Generation the condition is about.",
    },
    lastTransitionTime: str("When the status last changed.", { format: "date-time" }),
    reason: str("Machine-readable reason, CamelCase.", { maxLength: 1024, minLength: 1 }),
    message: str("Human-readable details.", { maxLength: 32768 }),
  },
  { required: ["type", "status", "lastTransitionTime", "reason", "message"] },
);

/** `spec` of a ManagedProxyConfiguration. */
const specSchema = obj(
  "How the proxy-servers on the hub and the proxy-agents in the managed clusters are run and how they authenticate each other.",
  {
    authentication: obj(
      "How the certificates between proxy-servers, agents and hub clients are signed and where they are stored.",
      {
        signer: obj(
          "Who signs the proxy-servers' serving certificates.",
          {
            type: str(
              "SelfSigned: the addon manager creates the CA and keeps it in a Secret that outlives this object. Provided: the CA in `provided.secretName` signs the serving certificates. (CertManager is refused: not implemented.)",
              { enum: ["SelfSigned", "Provided", "CertManager"], default: "SelfSigned" },
            ),
            selfSigned: obj("Details of self-signed certificates.", {
              additionalSANs: list("Extra DNS names or IP addresses for the serving certificates.", { type: "string" }),
            }),
            provided: obj(
              "The CA you supply (type Provided): a Secret with `tls.crt` and `tls.key` (or `ca.crt` and `ca.key`), in the addon manager's signer namespace unless `namespace` is set.",
              {
                secretName: str("Name of the Secret holding the CA certificate and key.", { pattern: DNS_SUBDOMAIN }),
                namespace: str("Namespace of that Secret (default: the addon manager's --signer-secret-namespace).", {
                  pattern: DNS_LABEL,
                }),
              },
              { required: ["secretName"] },
            ),
          },
          {
            // The apiserver checks a default against the object's CEL rules without nested defaults.
            default: { type: "SelfSigned" },
            "x-kubernetes-validations": [
              {
                rule: "self.type != 'CertManager'",
                message: "signer type CertManager is not supported: use SelfSigned or Provided",
                fieldPath: ".type",
              },
              {
                rule: "self.type != 'Provided' || has(self.provided)",
                message: "signer type Provided needs provided.secretName: the Secret with your CA",
                fieldPath: ".provided",
              },
              {
                rule: "!has(self.provided) || self.type == 'Provided'",
                message: "provided is only valid with signer type Provided",
                fieldPath: ".provided",
              },
            ],
          },
        ),
        dump: obj(
          "Where the signed certificates are stored.",
          {
            secrets: obj(
              "Names of the Secrets, in the proxy-servers' namespace.",
              {
                signingProxyServerSecretName: str(
                  "Secret with the serving certificate of the client front doors (tls.crt, tls.key).",
                  { default: "proxy-server", pattern: DNS_SUBDOMAIN },
                ),
                signingProxyClientSecretName: str("Secret with a hub client certificate (tls.crt, tls.key).", {
                  default: "proxy-client",
                  pattern: DNS_SUBDOMAIN,
                }),
                signingAgentServerSecretName: str(
                  "Secret with the serving certificate of the agent port (tls.crt, tls.key).",
                  { default: "agent-server", pattern: DNS_SUBDOMAIN },
                ),
              },
              { default: {} },
            ),
          },
          { default: {} },
        ),
      },
      { default: {} },
    ),
    proxyServer: obj(
      "The proxy-servers on the hub.",
      {
        image: str("Container image of the proxy-servers.", { minLength: 1 }),
        imagePullPolicy: str("Image pull policy (default IfNotPresent).", {
          enum: ["Always", "IfNotPresent", "Never"],
          default: "IfNotPresent",
        }),
        replicas: int32("Number of proxy-servers; also their --server-count, so agents connect to every one.", {
          default: 3,
          minimum: 1,
          maximum: 100,
        }),
        inClusterServiceName: str("Name of the ClusterIP Service in front of the proxy-servers.", {
          default: "proxy-entrypoint",
          pattern: DNS_LABEL,
          maxLength: 63,
        }),
        namespace: str("Namespace of the proxy-servers and their Secrets.", {
          default: "open-cluster-management-cluster-proxy",
          pattern: DNS_LABEL,
          maxLength: 63,
        }),
        entrypoint: obj(
          "How agents reach the proxy-servers. Without it, agents dial the in-cluster Service name (only agents inside the hub cluster can).",
          {
            type: str(
              "Hostname, LoadBalancerService or PortForward (agents reach the proxy-servers through the hub kube-apiserver with their OCM hub credentials; see docs/design/portforward.md).",
              {
                enum: ["Hostname", "LoadBalancerService", "PortForward"],
              },
            ),
            hostname: obj(
              "Type Hostname: agents dial this name (it is added to the agent-server certificate).",
              { value: str("DNS name or IP address.", { minLength: 1, maxLength: 253 }) },
              {
                required: ["value"],
                "x-kubernetes-validations": [
                  {
                    rule: `self.value.matches('${HOST_OR_IP}')`,
                    message:
                      "hostname.value must be a DNS name or an IP address (letters, digits, '-', '.'; ':' in IPv6)",
                    fieldPath: ".value",
                  },
                ],
              },
            ),
            loadBalancerService: obj(
              "Type LoadBalancerService: a Service of type LoadBalancer in the proxy-servers' namespace; agents dial its ingress IP or hostname.",
              {
                name: str("Name of the Service.", { default: "proxy-agent-entrypoint", pattern: DNS_LABEL }),
                annotations: list(
                  "Annotations of the Service (for example a cloud's internal-LB annotation); kept in step with this list.",
                  obj(
                    "An annotation.",
                    { key: str("Annotation key.", { minLength: 1 }), value: str("Annotation value.") },
                    { required: ["key"] },
                  ),
                ),
              },
            ),
            port: int32("Port agents dial at the entrypoint.", {
              default: AGENT_DOOR_PORT,
              minimum: 1,
              maximum: 65535,
            }),
          },
          {
            required: ["type"],
            "x-kubernetes-validations": [
              {
                rule: "(self.type == 'Hostname') == has(self.hostname)",
                message: "entrypoint type Hostname needs hostname.value, and hostname is only valid with type Hostname",
                fieldPath: ".hostname",
              },
              {
                rule: "!has(self.loadBalancerService) || self.type == 'LoadBalancerService'",
                message: "loadBalancerService is only valid with entrypoint type LoadBalancerService",
                fieldPath: ".loadBalancerService",
              },
            ],
          },
        ),
        additionalArgs: list("Extra proxy-server command-line arguments, appended last.", { type: "string" }),
        nodePlacement: nodePlacement("proxy-servers"),
        resources: resourceRequirements,
        imagePullSecrets: list("Names of Secrets to pull the proxy-server image with.", { type: "string" }),
      },
      { required: ["image"] },
    ),
    proxyAgent: obj(
      "The proxy-agents installed into the managed clusters.",
      {
        image: str("Container image of the proxy-agents.", { minLength: 1 }),
        replicas: int32("Agent replicas per managed cluster.", { default: 3, minimum: 1, maximum: 100 }),
        additionalArgs: list("Extra proxy-agent command-line arguments, appended last.", { type: "string" }),
        imagePullSecrets: list("Names of Secrets to pull the agent image with.", { type: "string" }),
        agentNodePlacements: {
          type: "object",
          description: "Node placement of the agents, by managed cluster name.",
          additionalProperties: nodePlacement("agents of that cluster"),
        },
        additionalServiceProxyArgs: list("Not supported (the Go addon's service-proxy); refused when set.", {
          type: "string",
        }),
        additionalServiceCAConfigMap: str("Not supported (the Go addon's service-proxy); refused when set."),
      },
      {
        required: ["image"],
        "x-kubernetes-validations": [
          {
            rule: "!has(self.additionalServiceProxyArgs) || size(self.additionalServiceProxyArgs) == 0",
            message:
              "additionalServiceProxyArgs is not supported: cluster-proxy has no service-proxy; reach services as <host>.<cluster>:<port> through the proxy-server",
            fieldPath: ".additionalServiceProxyArgs",
          },
          {
            rule: "!has(self.additionalServiceCAConfigMap) || self.additionalServiceCAConfigMap == ''",
            message:
              "additionalServiceCAConfigMap is not supported: cluster-proxy has no service-proxy; clients verify services' own certificates end to end",
            fieldPath: ".additionalServiceCAConfigMap",
          },
        ],
      },
    ),
    deploy: obj(
      "Ports of the proxy-servers.",
      {
        ports: obj(
          "Listening ports.",
          {
            proxyServer: port("Client front door (gRPC ProxyService).", GRPC_DOOR_PORT),
            agentServer: port("Agent port (agents' tunnels).", AGENT_DOOR_PORT),
            healthServer: port("Health port (/healthz, /readyz, /metrics).", HEALTH_DOOR_PORT),
            adminServer: port("Admin port (loopback only).", 8095),
          },
          {
            default: {
              proxyServer: GRPC_DOOR_PORT,
              agentServer: AGENT_DOOR_PORT,
              healthServer: HEALTH_DOOR_PORT,
              adminServer: 8095,
            },
            "x-kubernetes-validations": [
              {
                rule: "self.proxyServer != self.agentServer && self.proxyServer != self.healthServer && self.proxyServer != self.adminServer && self.agentServer != self.healthServer && self.agentServer != self.adminServer && self.healthServer != self.adminServer",
                message: "proxyServer, agentServer, healthServer and adminServer must be four different ports",
              },
            ],
          },
        ),
      },
      { default: {} },
    ),
    userServer: obj(
      "Not supported (the Go addon's user-server); refused when set.",
      { additionalSANs: list("Not supported.", { type: "string" }) },
      {
        "x-kubernetes-validations": [
          {
            rule: "false",
            message:
              "userServer is not supported: hub clients use the proxy-server's gRPC and HTTP CONNECT front doors with the proxy-client certificate",
          },
        ],
      },
    ),
  },
  { required: ["authentication", "proxyServer", "proxyAgent"] },
);

const statusSchema = obj("What the addon manager observed and did.", {
  lastObservedGeneration: { type: "integer", format: "int64", description: "The generation last reconciled." },
  conditions: list("Conditions; see the README for each type.", conditionSchema, {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
  }),
  replicas: int32("Desired proxy-server replicas."),
  readyReplicas: int32("Ready proxy-server replicas."),
  entrypoint: str("host:port agents dial (empty while a LoadBalancer has no ingress)."),
  caExpiry: str("When the serving CA expires.", { format: "date-time" }),
});

/** The full OpenAPI schema of the object. */
export const managedProxyConfigurationSchema: JsonSchemaProps = obj(
  "Configures the cluster-proxy addon: proxy-servers on the hub, agents in the managed clusters, and their certificates.",
  {
    apiVersion: { type: "string" },
    kind: { type: "string" },
    metadata: { type: "object" },
    spec: specSchema,
    status: statusSchema,
  },
  { required: ["spec"] },
);

/** A Kubernetes CustomResourceDefinition object (apiextensions.k8s.io/v1). */
export interface CustomResourceDefinition {
  apiVersion: "apiextensions.k8s.io/v1";
  kind: "CustomResourceDefinition";
  metadata: { name: string; labels?: Record<string, string> };
  spec: Record<string, unknown>;
}

/** The CRD `managedproxyconfigurations.proxy.open-cluster-management.io`, generated from the schema above. */
export function managedProxyConfigurationCrd(): CustomResourceDefinition {
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: `${MPC_PLURAL}.${MPC_GROUP}`, labels: { "app.kubernetes.io/part-of": "cluster-proxy" } },
    spec: {
      group: MPC_GROUP,
      names: {
        kind: MPC_KIND,
        listKind: `${MPC_KIND}List`,
        plural: MPC_PLURAL,
        singular: "managedproxyconfiguration",
        shortNames: ["mpc"],
      },
      scope: "Cluster",
      versions: [
        {
          name: MPC_VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: [
            { name: "Entrypoint", type: "string", jsonPath: ".status.entrypoint" },
            { name: "Replicas", type: "integer", jsonPath: ".spec.proxyServer.replicas" },
            { name: "Ready", type: "integer", jsonPath: ".status.readyReplicas" },
            // "string", not "date": kubectl prints a date column as the age since then, "<invalid>" for a future time.
            { name: "CA Expiry", type: "string", jsonPath: ".status.caExpiry" },
            { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" },
          ],
          schema: { openAPIV3Schema: managedProxyConfigurationSchema },
        },
      ],
    },
  };
}

// --- types, derived from the schema ------------------------------------------------------------

export type ManagedProxyConfigurationSpec = SchemaValue<typeof specSchema>;
/** Any part of a spec, as written before defaults (what `defaultedSpec` completes). */
export type PartialManagedProxyConfigurationSpec = SchemaValue<typeof specSchema, "partial">;
export type ManagedProxyConfigurationStatus = SchemaValue<typeof statusSchema>;
export type Condition = SchemaValue<typeof conditionSchema>;
export type NodePlacement = SchemaValue<ReturnType<typeof nodePlacement>>;
export type EntrypointType = NonNullable<ManagedProxyConfigurationSpec["proxyServer"]["entrypoint"]>["type"];

export interface ManagedProxyConfiguration {
  apiVersion: typeof MPC_API_VERSION;
  kind: typeof MPC_KIND;
  metadata: {
    name: string;
    uid?: string;
    generation?: number;
    resourceVersion?: string;
    deletionTimestamp?: string;
    creationTimestamp?: string;
  };
  spec: ManagedProxyConfigurationSpec;
  status?: ManagedProxyConfigurationStatus;
}

/**
 * Fill in the schema's defaults, as the apiserver does for stored objects (objects stored before a
 * default existed, or built in tests, get the same values). Returns a new object.
 */
export function withSchemaDefaults<T>(value: T, schema: JsonSchemaProps = specSchema): T {
  if (schema.type !== "object" || value === null || typeof value !== "object" || Array.isArray(value)) return value;
  const out: Record<string, unknown> = { ...(value as Record<string, unknown>) };
  for (const [key, sub] of Object.entries(schema.properties ?? {})) {
    if (out[key] === undefined && sub.default !== undefined) out[key] = structuredClone(sub.default);
    if (out[key] !== undefined) out[key] = withSchemaDefaults(out[key], sub);
  }
  if (schema.additionalProperties?.type === "object") {
    for (const [key, v] of Object.entries(out)) out[key] = withSchemaDefaults(v, schema.additionalProperties);
  }
  return out as T;
}

/** A spec with every default filled in. */
export function defaultedSpec(spec: PartialManagedProxyConfigurationSpec | undefined): ManagedProxyConfigurationSpec {
  return withSchemaDefaults((spec ?? {}) as ManagedProxyConfigurationSpec, specSchema);
}

/**
 * A ManagedProxyConfiguration as read from the API (a GET, a list or a watch event), with every
 * default of the schema filled in: the one place the addon manager and the CLI read it through.
 * The apiserver defaults what it stores only when the installed CRD carries the defaults (a CRD
 * from an older release or from the Go addon does not), so nothing downstream may rely on it.
 * Returns a new object; `status` and `metadata` are kept as they are.
 */
export function managedProxyConfigurationFromApi(obj: {
  metadata: ManagedProxyConfiguration["metadata"];
  spec?: unknown;
  status?: unknown;
}): ManagedProxyConfiguration {
  const spec = defaultedSpec(obj.spec as PartialManagedProxyConfigurationSpec | undefined);
  const { status, ...rest } = obj;
  return {
    ...rest,
    apiVersion: MPC_API_VERSION,
    kind: MPC_KIND,
    spec,
    ...(status ? { status } : {}),
  };
}

/** The message of the CEL rule of the spec node at `path` whose fieldPath is `fieldPath` ("" for none). */
function ruleMessage(path: readonly string[], fieldPath: string): string {
  let node: JsonSchemaProps | undefined = specSchema;
  for (const key of path) node = node?.properties?.[key];
  const rule = node?.["x-kubernetes-validations"]?.find((r) => (r.fieldPath ?? "") === fieldPath);
  if (!rule) throw new Error(`no rule at spec.${path.join(".")} for "${fieldPath}"`);
  return rule.message;
}

/**
 * What the CRD's CEL rules refuse about what is not implemented (and an entrypoint whose type does
 * not match its sub-object), checked again by the addon manager: a CRD installed by an older chart
 * (helm never upgrades `crds/`) or by the Go addon lets such an object in, and the manager must
 * refuse it rather than ignore it. Each problem names the field, with the CRD's own message.
 */
export function configurationProblems(spec: ManagedProxyConfigurationSpec): string[] {
  const problems: string[] = [];
  const add = (field: string, path: string[], fieldPath: string): void => {
    problems.push(`spec.${field}: ${ruleMessage(path, fieldPath)}`);
  };
  if (spec.authentication.signer.type === "CertManager")
    add("authentication.signer.type", ["authentication", "signer"], ".type");
  const entrypoint = spec.proxyServer.entrypoint;
  if (entrypoint) {
    const at = ["proxyServer", "entrypoint"];
    if ((entrypoint.type === "Hostname") !== (entrypoint.hostname !== undefined))
      add("proxyServer.entrypoint.hostname", at, ".hostname");
    else if (entrypoint.hostname && !new RegExp(HOST_OR_IP).test(entrypoint.hostname.value))
      add("proxyServer.entrypoint.hostname.value", [...at, "hostname"], ".value");
    if (entrypoint.loadBalancerService && entrypoint.type !== "LoadBalancerService")
      add("proxyServer.entrypoint.loadBalancerService", at, ".loadBalancerService");
  }
  if (spec.proxyAgent.additionalServiceProxyArgs?.length)
    add("proxyAgent.additionalServiceProxyArgs", ["proxyAgent"], ".additionalServiceProxyArgs");
  if (spec.proxyAgent.additionalServiceCAConfigMap)
    add("proxyAgent.additionalServiceCAConfigMap", ["proxyAgent"], ".additionalServiceCAConfigMap");
  if (spec.userServer) add("userServer", ["userServer"], "");
  return problems;
}

/** Every field path of the schema with its type, default and description (for the README's reference). */
export function schemaReference(
  schema: JsonSchemaProps = specSchema,
  prefix = "spec",
): { path: string; type: string; default?: string; description: string }[] {
  const rows: { path: string; type: string; default?: string; description: string }[] = [];
  for (const [key, sub] of Object.entries(schema.properties ?? {})) {
    const path = `${prefix}.${key}`;
    const type =
      sub.type === "array" ? `[]${sub.items?.type ?? ""}` : sub.enum ? sub.enum.join(" \\| ") : (sub.type ?? "");
    const dflt =
      sub.default === undefined || (typeof sub.default === "object" && sub.default !== null)
        ? undefined
        : JSON.stringify(sub.default);
    const required = schema.required?.includes(key) ? " Required." : "";
    rows.push({ path, type, ...(dflt ? { default: dflt } : {}), description: (sub.description ?? "") + required });
    if (sub.type === "object" && sub.properties) rows.push(...schemaReference(sub, path));
    if (sub.type === "array" && sub.items?.properties) rows.push(...schemaReference(sub.items, `${path}[]`));
  }
  return rows;
}
