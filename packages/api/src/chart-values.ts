/**
 * The values of the Helm chart `charts/cluster-proxy` as a JSON Schema (draft-07), built from the CRD's
 * and the addon manager's schemas; `values.yaml`, `values.schema.json` and the README table come from it.
 * Design: docs/design/architecture.md#the-helm-charts-values
 */
import { addonManagerOptionSpecs } from "./addon-manager-options.js";
import { type JsonSchemaProps, managedProxyConfigurationSchema } from "./managed-proxy-configuration.js";
import { type OptionSpec, formatDuration } from "./options.js";

/** A JSON Schema (draft-07) node as values.schema.json holds it. */
export interface ValuesSchema {
  $schema?: string;
  title?: string;
  description?: string;
  type?: "object" | "array" | "string" | "integer" | "boolean" | "number";
  properties?: Record<string, ValuesSchema>;
  additionalProperties?: boolean | ValuesSchema;
  required?: readonly string[];
  items?: ValuesSchema;
  enum?: readonly unknown[];
  default?: unknown;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
}

/** The ManagedProxyConfiguration `spec` field at `path` (dot-separated, under `spec`). */
function crdField(path: string): JsonSchemaProps {
  let node: JsonSchemaProps | undefined = managedProxyConfigurationSchema.properties?.spec;
  for (const part of path.split(".")) node = node?.properties?.[part];
  if (!node) throw new Error(`chart values: no field spec.${path} in the ManagedProxyConfiguration schema`);
  return node;
}

/**
 * A CRD schema as a values schema: the Kubernetes extensions (CEL, list types, int32 formats) are
 * dropped and every object with fixed properties refuses unknown keys (a typo fails install).
 */
function fromCrd(node: JsonSchemaProps, overrides: Partial<ValuesSchema> = {}): ValuesSchema {
  const out: ValuesSchema = {};
  if (node.description) out.description = node.description;
  if (node.type) out.type = node.type;
  if (node.properties) {
    out.properties = Object.fromEntries(Object.entries(node.properties).map(([k, v]) => [k, fromCrd(v)]));
    out.additionalProperties = false;
  } else if (node.additionalProperties) {
    out.additionalProperties = fromCrd(node.additionalProperties);
  }
  if (node.required) out.required = node.required;
  if (node.items) out.items = fromCrd(node.items);
  for (const k of ["enum", "default", "minimum", "maximum", "minLength", "maxLength", "pattern"] as const) {
    if (node[k] !== undefined) (out as Record<string, unknown>)[k] = node[k];
  }
  return { ...out, ...overrides };
}

/** The addon manager flag `--<flag>` as a value (durations as Go duration strings). */
function fromFlag(flag: string): ValuesSchema {
  const spec: OptionSpec | undefined = addonManagerOptionSpecs.find((s) => s.flag === flag);
  if (!spec) throw new Error(`chart values: the addon manager has no flag --${flag}`);
  const text = `${spec.description} (addon manager --${flag}).`;
  switch (spec.kind) {
    case "boolean":
      return { type: "boolean", description: text, default: spec.default };
    case "duration":
      return {
        type: "string",
        description: text,
        default: formatDuration(spec.default as number),
        pattern: "^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$",
      };
    default:
      return {
        type: "string",
        description: text,
        default: spec.default,
        ...(spec.choices ? { enum: spec.choices } : {}),
      };
  }
}

const DNS_LABEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
const str = (description: string, dflt: string, extra: Partial<ValuesSchema> = {}): ValuesSchema => ({
  type: "string",
  description,
  default: dflt,
  ...extra,
});
const obj = (description: string, properties: Record<string, ValuesSchema>): ValuesSchema => ({
  type: "object",
  description,
  properties,
  additionalProperties: false,
});
/** core/v1 ResourceRequirements, as the CRD's `proxyServer.resources` (quantities are strings). */
const resources = (description: string, dflt: Record<string, Record<string, string>>): ValuesSchema =>
  fromCrd(crdField("proxyServer.resources"), { description, default: dflt });

const placement = crdField("proxyServer.nodePlacement");

const bool = (description: string, dflt: boolean): ValuesSchema => ({ type: "boolean", description, default: dflt });

/**
 * `gateway.*`: the gateway Deployment and Service `cluster-proxy-addon-user` (port 9092), through
 * which hub users reach managed clusters as themselves (docs/design/gateway.md).
 */
function gatewayValues(): ValuesSchema {
  return obj(
    "The gateway (Deployment and Service `cluster-proxy-addon-user`, port 9092): hub users reach managed clusters through it as themselves, impersonated by the agents, so each cluster's RBAC decides (docs/design/gateway.md; `cluster-proxy kubeconfig --gateway` writes a kubeconfig for it).",
    {
      enabled: bool("Run the gateway.", true),
      replicas: { type: "integer", description: "Gateway replicas (stateless).", default: 2, minimum: 1, maximum: 20 },
      resources: resources("Compute resources of each gateway.", {
        requests: { cpu: "50m", memory: "96Mi" },
        limits: { memory: "384Mi" },
      }),
      logLevel: str("Log level of the gateway (--log-level); empty: the gateway's default.", "", {
        enum: ["", "debug", "info", "warn", "error"],
      }),
      oidc: obj(
        "Authenticate OIDC ID tokens besides hub tokens (the gateway's --oidc-* flags); off while issuerURL is empty.",
        {
          issuerURL: str("The OIDC issuer URL (https; --oidc-issuer-url).", "", { pattern: "^(https://.*)?$" }),
          clientID: str("The audience ID tokens must carry (--oidc-client-id).", ""),
          usernameClaim: str("The claim that names the user (--oidc-username-claim).", "sub"),
          usernamePrefix: str("Prefix of OIDC user names (--oidc-username-prefix).", ""),
          groupsClaim: str("The claim listing the user's groups (--oidc-groups-claim); empty: none.", ""),
          groupsPrefix: str("Prefix of OIDC group names (--oidc-groups-prefix).", ""),
          caConfigMap: str(
            "A ConfigMap in the release namespace whose key ca.crt verifies the issuer (mounted, --oidc-ca-file); empty: the system roots.",
            "",
          ),
        },
      ),
      passthroughUnrecognizedTokens: bool(
        "Forward a bearer token the hub does not recognise unchanged to the managed cluster, which authenticates it itself (--passthrough-unrecognized-tokens).",
        false,
      ),
      acceptHubApiAudience: bool(
        "Also accept hub tokens for the hub apiserver's own audience (kubectl create token, pods' tokens), not only tokens for the gateway's audience cluster-proxy-gateway that cluster-proxy credential requests (--accept-hub-api-audience). False: no hub API credential works at the gateway.",
        true,
      ),
      service: obj(
        "The gateway's own Service cluster-proxy-addon-user (port 9092), for clients that do not go through the hub apiserver.",
        {
          type: str(
            "ClusterIP (inside the hub), or LoadBalancer / NodePort to expose the gateway's port directly; the chart's notes then print the kubeconfig command for its address.",
            "ClusterIP",
            { enum: ["ClusterIP", "LoadBalancer", "NodePort"] },
          ),
          annotations: {
            type: "object",
            description: "Annotations of the Service (e.g. a cloud's load balancer settings: internal, source ranges).",
            default: {},
            additionalProperties: { type: "string" },
          },
        },
      ),
      aggregatedApi: obj(
        "The gateway as an aggregated API of the hub apiserver (docs/design/gateway.md, the aggregated path): users reach https://<hub>/apis/gateway.proxy.open-cluster-management.io/v1alpha1/clusters/<cluster>/proxy/ with their own hub kubeconfig.",
        {
          enabled: bool(
            "Register the APIService v1alpha1.gateway.proxy.open-cluster-management.io (its CA bundle is the addon manager's) and let the gateway read kube-system/extension-apiserver-authentication (--front-proxy-authentication).",
            true,
          ),
        },
      ),
      allowedUpgradeOrigins: {
        type: "array",
        description:
          "Browser origins (https://host[:port]) whose pages may open WebSocket exec, attach and port-forward through the gateway (--allowed-upgrade-origins); empty: none (kubectl sends no Origin and is not affected).",
        default: [],
        items: { type: "string", pattern: "^https?://[^/?#]+$" },
      },
      impersonationPrefix: str(
        "Prefix of the user and group names the agents impersonate, so hub identities never collide with a cluster's own (the gateway's --impersonation-prefix; the addon manager renders it into every agent, which serves only impersonations carrying it). Not empty.",
        "cluster:hub:",
        { minLength: 1 },
      ),
      exposedServices: {
        type: "array",
        description:
          "Services of managed clusters reachable through the gateway (`.../services/<svc>/proxy-service`), in the gateway's allowlist format; rendered into ConfigMap cluster-proxy-exposed-services, key services.",
        default: [],
        items: { type: "object" },
      },
      additionalArgs: {
        type: "array",
        description: "Extra gateway command-line arguments, appended last.",
        default: [],
        items: { type: "string" },
      },
    },
  );
}

/** The chart's values schema (values.schema.json). */
export function chartValuesSchema(): ValuesSchema {
  return {
    $schema: "http://json-schema.org/draft-07/schema#",
    title: "Values of the cluster-proxy Helm chart",
    type: "object",
    additionalProperties: false,
    properties: {
      registry: str(
        "Image registry of the cluster-proxy image (`npm run image` builds localhost/cluster-proxy).",
        "localhost",
        {
          minLength: 1,
        },
      ),
      image: str(
        "Image name, under `registry`, of the addon manager, the proxy-servers and the proxy-agents.",
        "cluster-proxy",
        {
          minLength: 1,
        },
      ),
      tag: str("Image tag; empty: the chart's appVersion.", ""),
      imagePullPolicy: fromCrd(crdField("proxyServer.imagePullPolicy"), {
        description: "Image pull policy of the addon manager and the proxy-servers.",
      }),
      imagePullSecrets: fromCrd(crdField("proxyServer.imagePullSecrets"), {
        description: "Names of Secrets to pull the image with (addon manager, proxy-servers and proxy-agents).",
        default: [],
      }),
      replicas: {
        type: "integer",
        description: "Addon manager replicas; with leader election one acts and the others stand by.",
        default: 1,
        minimum: 1,
        maximum: 10,
      },
      spokeAddonNamespace: str(
        "Namespace of the proxy-agents in every managed cluster (AddOnDeploymentConfig agentInstallNamespace).",
        "open-cluster-management-cluster-proxy",
        { pattern: DNS_LABEL, maxLength: 63 },
      ),
      proxyServer: obj("The proxy-servers on the hub (the ManagedProxyConfiguration `cluster-proxy`).", {
        entrypointAddress: str(
          "Hostname or IP address agents dial to reach the proxy-servers (entrypoint type Hostname; added to the agent-server certificate). Empty, and entrypointLoadBalancer false: entrypoint type PortForward, agents reach the proxy-servers through the hub kube-apiserver with their OCM hub credentials (works wherever the clusters are registered; costs one long-lived apiserver connection per agent and proxy-server).",
          "",
          { maxLength: 253 },
        ),
        entrypointLoadBalancer: {
          type: "boolean",
          description:
            "Expose the agent port through a Service of type LoadBalancer and let agents dial its ingress (entrypoint type LoadBalancerService; for large fleets: no apiserver connections). Ignored when entrypointAddress is set.",
          default: false,
        },
        port: fromCrd(crdField("proxyServer.entrypoint.port")),
        replicas: fromCrd(crdField("proxyServer.replicas")),
        resources: resources("Compute resources of each proxy-server (spec.proxyServer.resources).", {
          requests: { cpu: "100m", memory: "128Mi" },
          limits: { memory: "512Mi" },
        }),
        nodeSelector: fromCrd(placement.properties!.nodeSelector!, { default: {} }),
        tolerations: fromCrd(placement.properties!.tolerations!, { default: [] }),
        additionalArgs: fromCrd(crdField("proxyServer.additionalArgs"), { default: [] }),
        additionalSANs: fromCrd(crdField("authentication.signer.selfSigned.additionalSANs"), { default: [] }),
      }),
      proxyAgent: obj("The proxy-agents in the managed clusters.", {
        replicas: fromCrd(crdField("proxyAgent.replicas")),
        additionalArgs: fromCrd(crdField("proxyAgent.additionalArgs"), { default: [] }),
      }),
      installByPlacement: obj(
        "Which managed clusters get an agent. Empty placementName: the chart's Placement `cluster-proxy` selects every cluster of the ManagedClusterSet `global` but those labelled `proxy.open-cluster-management.io/install=false`. The chart binds `global` to the release namespace (ManagedClusterSetBinding `global`) either way, so a Placement of yours there selects from it too.",
        {
          placementName: str("An existing Placement to install by instead of the chart's.", ""),
          placementNamespace: str("Namespace of that Placement (default: the release namespace).", ""),
        },
      ),
      clusterProfile: obj(
        "SIG-Multicluster ClusterProfiles (docs/guides/cluster-profile.md): the addon manager keeps the access provider `cluster-proxy` (the gateway's address and serving CA bundle) on the ClusterProfile of every cluster with the addon, for consumers with the `cluster-proxy credential` exec plugin.",
        {
          enabled: {
            type: "boolean",
            description:
              "Publish the access provider (addon manager --cluster-profiles, with the rights to read ClusterProfiles and write their status). Needs the ClusterProfile API (OCM's ClusterProfile feature gate).",
            default: false,
          },
        },
      ),
      gateway: gatewayValues(),
      addonManager: obj("The addon manager Deployment (`<release>-addon-manager`).", {
        logLevel: fromFlag("log-level"),
        leaderElect: fromFlag("leader-elect"),
        certValidity: fromFlag("cert-validity"),
        resources: resources("Compute resources of the addon manager.", {
          requests: { cpu: "50m", memory: "96Mi" },
          limits: { memory: "384Mi" },
        }),
        nodeSelector: fromCrd(placement.properties!.nodeSelector!, {
          description: "Node labels the addon manager's pods must match.",
          default: {},
        }),
        tolerations: fromCrd(placement.properties!.tolerations!, {
          description: "Tolerations of the addon manager's pods (core/v1 Toleration).",
          default: [],
        }),
      }),
    },
  };
}
