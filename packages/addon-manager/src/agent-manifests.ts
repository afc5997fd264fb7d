/**
 * The ManifestWork that installs the proxy-agent into one managed cluster (`addon-cluster-proxy-deploy-0`),
 * its manifests in apply order, and its spec hash.
 * Design: docs/design/addon-manager.md#the-agents-manifestwork
 */
import { createHash } from "node:crypto";
import {
  ADDON_NAME,
  ADDON_NAME_LABEL,
  AGENT_CONNECTION_CONDITION,
  agentOptionsSchema,
  argsFor,
  type ArgsOf,
  type ManagedProxyConfiguration,
  type NodePlacement,
} from "@cluster-proxy/api";
import { AGENT_CONNECTED_FEEDBACK, AGENT_CONNECTION_MESSAGE_FEEDBACK } from "./addon-availability.js";
import { AGENT_SIGNER } from "./csr-signer.js";
import type { KubeObject, OwnerReference } from "@cluster-proxy/kube";
import { FAST_KEEPALIVE, usesPortForward } from "./render-proxy-server.js";
import { contentHash } from "./content-hash.js";

export const DEPLOY_WORK_NAME = `addon-${ADDON_NAME}-deploy-0`;
export const DEFAULT_AGENT_NAMESPACE = "open-cluster-management-cluster-proxy";
export const AGENT_DEPLOYMENT = "cluster-proxy-proxy-agent";
export const AGENT_CONTAINER = "proxy-agent";
export const AGENT_SERVICE_ACCOUNT = "cluster-proxy";
/** The Role (and RoleBinding) letting the agents write their connection state into their Deployment. */
export const AGENT_STATUS_ROLE = "cluster-proxy-agent-status";
export const AGENT_CA_SECRET = "cluster-proxy-ca";
/** The gateway CA bundle: the agent's gateway endpoint accepts client certificates of this CA only. */
export const AGENT_GATEWAY_CA_SECRET = "cluster-proxy-gateway-ca";
/** Where the agent mounts {@link AGENT_GATEWAY_CA_SECRET}. */
export const AGENT_GATEWAY_CA_MOUNT = "/etc/gateway-ca";
/** The ClusterRole (and its ClusterRoleBinding) letting the agent impersonate the gateway's callers. */
export const IMPERSONATOR_CLUSTER_ROLE = "open-cluster-management:cluster-proxy:impersonator";
/**
 * Its rules: `impersonate` on every kind of identity a request can carry, nothing else. Extras are
 * checked as `userextras/<key>` and keys have slashes (a ServiceAccount token's
 * `authentication.kubernetes.io/credential-id`); RBAC has no prefix wildcard for them (a rule matches
 * a resource exactly, all with `*`, or one subresource of any resource), so the group's resources
 * are `*`: with the verb `impersonate` that is
 * `uids` and every `userextras/<key>`, the only impersonable resources of `authentication.k8s.io`.
 */
export const IMPERSONATOR_RULES = [
  { apiGroups: [""], resources: ["users", "groups", "serviceaccounts"], verbs: ["impersonate"] },
  { apiGroups: ["authentication.k8s.io"], resources: ["*"], verbs: ["impersonate"] },
];
/** Pod annotation recording which gateway CA bundle the agents were started with. */
export const GATEWAY_CA_HASH_ANNOTATION = "proxy.open-cluster-management.io/gateway-ca-bundle-hash";
/** The CA bundle of an https:// forward proxy (AddOnDeploymentConfig proxyConfig.caBundle). */
export const PROXY_CA_SECRET = "cluster-proxy-forward-proxy-ca";
/** Requests when no AddOnDeploymentConfig sets resources (measured idle: ~60 MiB RSS, ~0 CPU). */
export const DEFAULT_AGENT_RESOURCES = { requests: { cpu: "20m", memory: "96Mi" } };
/** Where OCM's registration agent writes the certificate our signer issued (ocm-addon-contract §3e). */
export const AGENT_CERT_SECRET = `${ADDON_NAME}-${AGENT_SIGNER.replace("/", "-")}-client-cert`;
/** The Secret OCM's registration agent writes for the kube-apiserver-client registration (PortForward). */
export const HUB_KUBECONFIG_SECRET = `${ADDON_NAME}-hub-kubeconfig`;
/** Where the agent mounts it (its kubeconfig names tls.crt / tls.key relative to itself). */
const HUB_KUBECONFIG_MOUNT = "/etc/hub";
export const AGENT_HEALTH_PORT = 8093;
/** The annotation acknowledging which configs (by spec hash) a work was rendered from. */
const CONFIG_SPEC_HASH_ANNOTATION = "open-cluster-management.io/config-spec-hash";

/** The parts of an AddOnDeploymentConfig spec the agent honours. */
export interface AddOnDeploymentConfigSpec {
  nodePlacement?: NodePlacement;
  registries?: { mirror: string; source: string }[];
  agentInstallNamespace?: string;
  resourceRequirements?: {
    containerID: string;
    resources: { limits?: Record<string, string>; requests?: Record<string, string> };
  }[];
  proxyConfig?: { httpProxy?: string; httpsProxy?: string; noProxy?: string; caBundle?: string };
  customizedVariables?: { name: string; value: string }[];
}

export interface AgentRenderInput {
  cluster: string;
  namespace: string;
  mpc: ManagedProxyConfiguration;
  /** host:port from the configuration's status.entrypoint. */
  entrypoint: string;
  /** PEM of the serving CA bundle the agents verify the proxy-servers with. */
  servingCaPem: string;
  /**
   * PEM of the gateway CA bundle (`cluster-proxy-gateway-identity` `ca.crt`): enables the agent's
   * gateway endpoint. Absent (not issued yet): no endpoint and no impersonation right.
   */
  gatewayCaPem?: string;
  /** The gateway's `--impersonation-prefix`, for the agents' `--gateway-impersonation-prefix` (absent: the agent's default). */
  gatewayImpersonationPrefix?: string;
  adc?: AddOnDeploymentConfigSpec;
  owner: OwnerReference;
  /** The config-spec-hash map (omitted when empty). */
  configHashes: Record<string, string>;
}

/** `<kind>:<name>:<container>` against an ADC containerID whose parts may be `*`. */
function containerIdMatches(id: string, kind: string, name: string, container: string): boolean {
  const parts = id.split(":");
  if (parts.length !== 3) return false;
  return [kind, name, container].every((v, i) => {
    const p = parts[i]!;
    if (p === "*" || p === "") return true;
    try {
      return new RegExp(`^(?:${p})$`).test(v);
    } catch {
      return p === v;
    }
  });
}

/** The image after the ADC's registry mirrors (the first whose source prefixes it). */
export function mirroredImage(image: string, registries: AddOnDeploymentConfigSpec["registries"]): string {
  for (const r of registries ?? [])
    if (r.source && image.startsWith(r.source)) return r.mirror + image.slice(r.source.length);
  return image;
}

/** What the agent's command line depends on. */
export interface AgentArgsInput {
  /** The entrypoint's host (an IPv6 address without brackets) and port. */
  host: string;
  port: number;
  cluster: string;
  /** The agent's namespace in the managed cluster. */
  namespace: string;
  mpc: ManagedProxyConfiguration;
  /** Whether the CA bundle of an https:// forward proxy is mounted. */
  forwardProxyCa: boolean;
  /** Whether the gateway CA bundle is mounted (the agent's gateway endpoint is on). */
  gatewayCa: boolean;
  /** The gateway's impersonation prefix (with the endpoint on; absent: the agent's default). */
  gatewayImpersonationPrefix?: string;
}

/** The agent's option values, keyed by flag (before `additionalArgs`), in command-line order. */
/**
 * How long an agent that got SIGTERM keeps serving what is open (--drain-grace-period): DRAIN to
 * the proxy-servers, GOAWAY to the gateway, then exit once idle or after this.
 */
export const AGENT_DRAIN_GRACE_MS = 30_000;
/** The agent pods' terminationGracePeriodSeconds: the drain grace period plus 15 s to close. */
export const AGENT_TERMINATION_GRACE_SECONDS = AGENT_DRAIN_GRACE_MS / 1000 + 15;

export function agentArgValues(a: AgentArgsInput): ArgsOf<typeof agentOptionsSchema> {
  // Entrypoint PortForward: through the hub kube-apiserver with the addon's hub kubeconfig.
  const throughHub = usesPortForward(a.mpc.spec);
  return {
    "proxy-server-host": a.host,
    "proxy-server-port": a.port,
    "ca-cert": "/etc/ca/ca.crt",
    "agent-cert": "/etc/tls/tls.crt",
    "agent-key": "/etc/tls/tls.key",
    "cluster-name": a.cluster,
    "health-server-port": AGENT_HEALTH_PORT,
    // A hub that silently vanished is noticed within 10 s, and reconnects are retried at least
    // every 3 s, so a cluster is back within seconds of its network.
    ...FAST_KEEPALIVE,
    "sync-interval-cap": 3_000,
    "drain-grace-period": AGENT_DRAIN_GRACE_MS,
    "status-deployment": `${a.namespace}/${AGENT_DEPLOYMENT}`,
    "https-proxy-ca-cert": a.forwardProxyCa ? "/etc/proxy-ca/ca.crt" : undefined,
    "gateway-ca-file": a.gatewayCa ? `${AGENT_GATEWAY_CA_MOUNT}/ca.crt` : undefined,
    "gateway-impersonation-prefix": a.gatewayCa ? a.gatewayImpersonationPrefix : undefined,
    "hub-kubeconfig": throughHub ? `${HUB_KUBECONFIG_MOUNT}/kubeconfig` : undefined,
    "proxy-server-namespace": throughHub ? a.mpc.spec.proxyServer.namespace : undefined,
    "proxy-server-service": throughHub ? a.mpc.spec.proxyServer.inClusterServiceName : undefined,
  };
}

export function renderAgentWork(input: AgentRenderInput): KubeObject {
  const { cluster, namespace, mpc, adc } = input;
  const agent = mpc.spec.proxyAgent;
  const [host, port] = input.entrypoint.split(/:(?=\d+$)/) as [string, string];
  const bareHost = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
  const placement: NodePlacement = {
    ...(agent.agentNodePlacements?.[cluster] ?? {}),
    ...(adc?.nodePlacement ?? {}),
  };
  const resources =
    [...(adc?.resourceRequirements ?? [])]
      .reverse()
      .find((r) => containerIdMatches(r.containerID, "deployments", AGENT_DEPLOYMENT, AGENT_CONTAINER))?.resources ??
    DEFAULT_AGENT_RESOURCES;
  // A forward proxy between the cluster and the hub: the agent honours HTTPS_PROXY / NO_PROXY
  // (the hub connection is TLS); HTTP_PROXY is passed on as given.
  const proxy = adc?.proxyConfig ?? {};
  const proxyEnv = (
    [
      ["HTTP_PROXY", proxy.httpProxy],
      ["HTTPS_PROXY", proxy.httpsProxy],
      ["NO_PROXY", proxy.noProxy],
    ] as const
  )
    .filter(([, v]) => v)
    .map(([name, value]) => ({ name, value: value! }));
  const proxyCa = proxy.caBundle ? Buffer.from(proxy.caBundle, "base64").toString("utf8") : "";
  const labels = { "app.kubernetes.io/name": "cluster-proxy", "app.kubernetes.io/component": "proxy-agent" };
  const caPem = input.servingCaPem;
  const gatewayCaPem = input.gatewayCaPem ?? "";
  const serviceAccount = { kind: "ServiceAccount", name: AGENT_SERVICE_ACCOUNT, namespace };
  // Entrypoint PortForward: through the hub kube-apiserver with the addon's hub kubeconfig (written
  // by OCM's registration agent for the kube-apiserver-client registration).
  const throughHub = usesPortForward(mpc.spec);
  const manifests: KubeObject[] = [
    { apiVersion: "v1", kind: "Namespace", metadata: { name: namespace } },
    { apiVersion: "v1", kind: "ServiceAccount", metadata: { name: AGENT_SERVICE_ACCOUNT, namespace } },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "Role",
      metadata: { name: AGENT_STATUS_ROLE, namespace },
      rules: [
        {
          apiGroups: ["apps"],
          resources: ["deployments/status"],
          resourceNames: [AGENT_DEPLOYMENT],
          verbs: ["patch"],
        },
      ],
    },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: { name: AGENT_STATUS_ROLE, namespace },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: AGENT_STATUS_ROLE },
      subjects: [serviceAccount],
    },
    ...(gatewayCaPem
      ? [
          {
            apiVersion: "rbac.authorization.k8s.io/v1",
            kind: "ClusterRole",
            metadata: { name: IMPERSONATOR_CLUSTER_ROLE },
            rules: IMPERSONATOR_RULES,
          },
          {
            apiVersion: "rbac.authorization.k8s.io/v1",
            kind: "ClusterRoleBinding",
            metadata: { name: IMPERSONATOR_CLUSTER_ROLE },
            roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: IMPERSONATOR_CLUSTER_ROLE },
            subjects: [serviceAccount],
          },
          {
            apiVersion: "v1",
            kind: "Secret",
            metadata: { name: AGENT_GATEWAY_CA_SECRET, namespace },
            type: "Opaque",
            data: { "ca.crt": Buffer.from(gatewayCaPem).toString("base64") },
          },
        ]
      : []),
    {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: AGENT_CA_SECRET, namespace },
      type: "Opaque",
      data: { "ca.crt": Buffer.from(caPem).toString("base64") },
    },
    ...(proxyCa
      ? [
          {
            apiVersion: "v1",
            kind: "Secret",
            metadata: { name: PROXY_CA_SECRET, namespace },
            type: "Opaque",
            data: { "ca.crt": Buffer.from(proxyCa).toString("base64") },
          },
        ]
      : []),
    {
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: AGENT_DEPLOYMENT, namespace, labels },
      spec: {
        replicas: agent.replicas,
        selector: { matchLabels: labels },
        // A new agent replica is ready (connected to every proxy-server) before an old one drains.
        strategy: { type: "RollingUpdate", rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
        template: {
          metadata: {
            labels,
            // A new serving CA bundle restarts nothing (the agent re-reads its files); this records
            // which one the pods were started with.
            annotations: {
              "proxy.open-cluster-management.io/ca-bundle-hash": contentHash(caPem),
              ...(gatewayCaPem ? { [GATEWAY_CA_HASH_ANNOTATION]: contentHash(gatewayCaPem) } : {}),
            },
          },
          spec: {
            serviceAccountName: AGENT_SERVICE_ACCOUNT,
            terminationGracePeriodSeconds: AGENT_TERMINATION_GRACE_SECONDS,
            // The token is for --status-deployment (the Role above) and, with the gateway, for the
            // impersonated requests of the gateway endpoint (the ClusterRole above): nothing else.
            automountServiceAccountToken: true,
            ...(placement.nodeSelector ? { nodeSelector: placement.nodeSelector } : {}),
            ...(placement.tolerations ? { tolerations: placement.tolerations } : {}),
            ...(agent.imagePullSecrets?.length
              ? { imagePullSecrets: agent.imagePullSecrets.map((name) => ({ name })) }
              : {}),
            containers: [
              {
                name: AGENT_CONTAINER,
                image: mirroredImage(agent.image, adc?.registries),
                command: ["cluster-proxy", "agent"],
                args: [
                  ...argsFor(
                    agentOptionsSchema,
                    agentArgValues({
                      host: bareHost,
                      port: Number(port),
                      cluster,
                      namespace,
                      mpc,
                      forwardProxyCa: proxyCa !== "",
                      gatewayCa: gatewayCaPem !== "",
                      ...(input.gatewayImpersonationPrefix
                        ? { gatewayImpersonationPrefix: input.gatewayImpersonationPrefix }
                        : {}),
                    }),
                  ),
                  ...(agent.additionalArgs ?? []),
                ],
                env: [{ name: "PROXY_AGENT_ID", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } }, ...proxyEnv],
                ports: [{ name: "health", containerPort: AGENT_HEALTH_PORT }],
                // Ready = connected to every proxy-server (the agent's /readyz).
                readinessProbe: {
                  httpGet: { path: "/readyz", port: "health" },
                  periodSeconds: 2,
                  failureThreshold: 2,
                },
                livenessProbe: {
                  httpGet: { path: "/healthz", port: "health" },
                  initialDelaySeconds: 10,
                  periodSeconds: 10,
                  failureThreshold: 3,
                },
                resources,
                volumeMounts: [
                  { name: "ca", mountPath: "/etc/ca", readOnly: true },
                  { name: "agent-certificate", mountPath: "/etc/tls", readOnly: true },
                  ...(proxyCa ? [{ name: "proxy-ca", mountPath: "/etc/proxy-ca", readOnly: true }] : []),
                  ...(gatewayCaPem ? [{ name: "gateway-ca", mountPath: AGENT_GATEWAY_CA_MOUNT, readOnly: true }] : []),
                  ...(throughHub ? [{ name: "hub-kubeconfig", mountPath: HUB_KUBECONFIG_MOUNT, readOnly: true }] : []),
                ],
              },
            ],
            volumes: [
              { name: "ca", secret: { secretName: AGENT_CA_SECRET } },
              { name: "agent-certificate", secret: { secretName: AGENT_CERT_SECRET } },
              ...(proxyCa ? [{ name: "proxy-ca", secret: { secretName: PROXY_CA_SECRET } }] : []),
              ...(gatewayCaPem ? [{ name: "gateway-ca", secret: { secretName: AGENT_GATEWAY_CA_SECRET } }] : []),
              ...(throughHub ? [{ name: "hub-kubeconfig", secret: { secretName: HUB_KUBECONFIG_SECRET } }] : []),
            ],
          },
        },
      },
    },
  ];
  return {
    apiVersion: "work.open-cluster-management.io/v1",
    kind: "ManifestWork",
    metadata: {
      name: DEPLOY_WORK_NAME,
      namespace: cluster,
      labels: { [ADDON_NAME_LABEL]: ADDON_NAME },
      ...(Object.keys(input.configHashes).length > 0
        ? { annotations: { [CONFIG_SPEC_HASH_ANNOTATION]: JSON.stringify(sortKeys(input.configHashes)) } }
        : {}),
      ownerReferences: [input.owner],
    },
    spec: {
      workload: { manifests },
      manifestConfigs: [
        {
          resourceIdentifier: { group: "apps", resource: "deployments", name: AGENT_DEPLOYMENT, namespace },
          feedbackRules: [
            { type: "WellKnownStatus" },
            // The agents' own condition. OCM v1.2.1's work agent evaluates the path against the whole
            // object (its own well-known rules read `.status.readyReplicas`) and keeps a string.
            {
              type: "JSONPaths",
              jsonPaths: [
                {
                  name: AGENT_CONNECTED_FEEDBACK,
                  path: `.status.conditions[?(@.type=="${AGENT_CONNECTION_CONDITION}")].status`,
                },
                {
                  name: AGENT_CONNECTION_MESSAGE_FEEDBACK,
                  path: `.status.conditions[?(@.type=="${AGENT_CONNECTION_CONDITION}")].message`,
                },
              ],
            },
          ],
          feedbackScrapeType: "Watch",
        },
      ],
    },
  };
}

function sortKeys(map: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(map).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/**
 * The spec hash OCM compares (`af: utils.GetSpecHash`): SHA-256 of `{"spec": ...}` serialized as
 * Go's encoding/json serializes a map (keys sorted, no whitespace, `<`, `>`, `&`, U+2028 and
 * U+2029 escaped), so a Go manager and this one agree.
 */
export function specHash(obj: { spec?: unknown }): string {
  return createHash("sha256")
    .update(goJson({ spec: obj.spec ?? null }))
    .digest("hex");
}

export function goJson(value: unknown): string {
  if (value === null || value === undefined) return "null";
  if (Array.isArray(value)) return `[${value.map(goJson).join(",")}]`;
  if (typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${goString(k)}:${goJson(v)}`).join(",")}}`;
  }
  if (typeof value === "string") return goString(value);
  return JSON.stringify(value);
}

function goString(s: string): string {
  return JSON.stringify(s)
    .replace(/</g, "\\u003c")
    .replace(/>/g, "\\u003e")
    .replace(/&/g, "\\u0026")
    .replace(/\u2028/g, "\\u2028")
    .replace(/\u2029/g, "\\u2029");
}
