/**
 * The hub objects of one ManagedProxyConfiguration, as pure data: the namespace, the proxy-servers'
 * ServiceAccount, Services, Deployment and PodDisruptionBudget. Secrets are the certificate
 * reconciler's. Nothing here reads the cluster, so rendering is unit-tested without one.
 */
import {
  AGENT_UPGRADE_PORT,
  argsFor,
  CONNECT_DOOR_PORT,
  MPC_API_VERSION,
  PROXY_SERVER_COMPONENT,
  serverOptionsSchema,
  type ArgsOf,
  MPC_KIND,
  type ManagedProxyConfiguration,
  type ManagedProxyConfigurationSpec,
} from "@cluster-proxy/api";
import type { KubeObject, ResourceRef } from "@cluster-proxy/kube";
import { Resources } from "./resources.js";
import { contentHash } from "./content-hash.js";
import { COMPONENT_LABEL, CONFIGURATION_LABEL, ownedLabels, SPEC_HASH_ANNOTATION } from "./labels.js";
import { TICKET_KEYS_FILE, ticketKeysSecretName } from "./ticket-keys-secret.js";

/** Where the certificate Secrets are mounted in a proxy-server pod. */
export const MOUNTS = {
  proxyServer: "/etc/cluster-proxy/proxy-server",
  agentServer: "/etc/cluster-proxy/agent-server",
  /** The TLS session ticket keys every replica shares (ticket-keys-secret.ts). */
  ticketKeys: "/etc/cluster-proxy/tls-ticket-keys",
};
/** Keys of the trust bundles in the serving Secrets (beside tls.crt / tls.key). */
export const CLIENT_CA_KEY = "client-ca.crt";
export const AGENT_CA_KEY = "agent-ca.crt";
export const SERVICE_ACCOUNT = "cluster-proxy";

export interface RenderedObject {
  resource: ResourceRef;
  object: KubeObject;
}

const DEFAULT_RESOURCES = { requests: { cpu: "100m", memory: "128Mi" }, limits: { memory: "1Gi" } };

export function ownerReference(
  mpc: ManagedProxyConfiguration,
): NonNullable<KubeObject["metadata"]["ownerReferences"]>[number] {
  return {
    apiVersion: MPC_API_VERSION,
    kind: MPC_KIND,
    name: mpc.metadata.name,
    uid: mpc.metadata.uid ?? "",
    controller: true,
    blockOwnerDeletion: true,
  };
}

/** Labels of the proxy-server pods of `name` (the Go addon's component label plus ours). */
export function serverPodLabels(name: string): Record<string, string> {
  return { [COMPONENT_LABEL]: PROXY_SERVER_COMPONENT, [CONFIGURATION_LABEL]: name };
}

function withHash(obj: KubeObject): KubeObject {
  const hash = contentHash({ ...obj, metadata: { ...obj.metadata, annotations: undefined } });
  obj.metadata.annotations = { ...(obj.metadata.annotations ?? {}), [SPEC_HASH_ANNOTATION]: hash };
  return obj;
}

/**
 * Keepalive of the tunnels the manager deploys, on both ends: a ping every 5 s, a peer that does
 * not answer within 5 s is gone (the Go defaults, 1h, notice a silently vanished peer after hours).
 * Flags of both the server's and the agent's schema.
 */
export const FAST_KEEPALIVE = { "keepalive-time": 5_000, "keepalive-timeout": 5_000 } as const;

/**
 * How long a proxy-server that got SIGTERM lets its open tunnels finish (--graceful-shutdown-timeout),
 * after it turned not ready and sent GOAWAY to clients and agents.
 */
export const SERVER_DRAIN_TIMEOUT_MS = 30_000;
/**
 * How long a proxy-server that got SIGTERM keeps serving, not ready, before that drain
 * (--shutdown-delay): the Service may still send new connections for a moment.
 */
export const SERVER_SHUTDOWN_DELAY_MS = 5_000;
/**
 * How long a proxy-server replica that just got ready lets a dial for a cluster whose agent has
 * not found it yet wait for that agent (--warm-up-dial-wait), instead of answering No agent
 * available: agents reach a new replica within their reconnect backoff (at most --sync-interval-cap,
 * 10 s, plus jitter) through the hub, and behind a Service within a few of their 1 s sync rounds.
 */
export const SERVER_WARM_UP_DIAL_WAIT_MS = 20_000;
/** The proxy-server pods' terminationGracePeriodSeconds: the delay and the drain plus 15 s to close. */
export const SERVER_TERMINATION_GRACE_SECONDS = (SERVER_SHUTDOWN_DELAY_MS + SERVER_DRAIN_TIMEOUT_MS) / 1000 + 15;

/** The proxy-server's option values for `spec`, keyed by flag (before `additionalArgs`), in command-line order. */
export function serverArgValues(spec: ManagedProxyConfigurationSpec): ArgsOf<typeof serverOptionsSchema> {
  const p = spec.deploy.ports;
  return {
    // gRPC (konnectivity clients) on --server-port and the HTTP CONNECT door, which the manager's
    // tunnel probes use, on --http-connect-port.
    mode: "both",
    "server-port": p.proxyServer,
    "agent-port": p.agentServer,
    "health-port": p.healthServer,
    "admin-port": p.adminServer,
    "http-connect-port": CONNECT_DOOR_PORT,
    "server-cert": `${MOUNTS.proxyServer}/tls.crt`,
    "server-key": `${MOUNTS.proxyServer}/tls.key`,
    "server-ca-cert": `${MOUNTS.proxyServer}/${CLIENT_CA_KEY}`,
    "cluster-cert": `${MOUNTS.agentServer}/tls.crt`,
    "cluster-key": `${MOUNTS.agentServer}/tls.key`,
    "cluster-ca-cert": `${MOUNTS.agentServer}/${AGENT_CA_KEY}`,
    // TLS 1.3 resumption: the keys the manager rotates, the same in every replica.
    "tls-session-ticket-key-file": `${MOUNTS.ticketKeys}/${TICKET_KEYS_FILE}`,
    "server-count": spec.proxyServer.replicas,
    "proxy-strategies": ["destHost"],
    // An agent behind a network that silently drops its packets is let go within 10 s, so the
    // tunnel probes see "no agent" and the agent's next connection is the only one.
    ...FAST_KEEPALIVE,
    // SIGTERM: keep serving while the Service stops sending clients here, then drain.
    "shutdown-delay": SERVER_SHUTDOWN_DELAY_MS,
    "graceful-shutdown-timeout": SERVER_DRAIN_TIMEOUT_MS,
    // Through the hub (PortForward) agents connect to a starting replica, which waits for them
    // (the 30 s default at most). Any other entrypoint is a Service that sends agents only to ready
    // pods: waiting for agents there would only delay every replica by the whole timeout.
    "ready-after-agents-timeout": usesPortForward(spec) ? undefined : 1_000,
    // Ready is not "every cluster's agent is here": a client's dial that comes first waits for it.
    "warm-up-dial-wait": SERVER_WARM_UP_DIAL_WAIT_MS,
    // Entrypoint PortForward: agents come through the hub kube-apiserver's pods/<pod>:<port>/proxy.
    "agent-upgrade-port": usesPortForward(spec) ? AGENT_UPGRADE_PORT : undefined,
  };
}

/** The proxy-server command line for `spec` (before `additionalArgs`), rendered from the server's option schema. */
export function serverArgs(spec: ManagedProxyConfigurationSpec): string[] {
  return argsFor(serverOptionsSchema, serverArgValues(spec));
}

/** Whether agents reach the proxy-servers through the hub kube-apiserver (docs/design/portforward.md). */
export function usesPortForward(spec: ManagedProxyConfigurationSpec): boolean {
  return spec.proxyServer.entrypoint?.type === "PortForward";
}

/**
 * The ClusterRole of the agents' hub identity with entrypoint PortForward (the chart ships it; the
 * manager creates it when missing and binds it, never holding these rights itself):
 * - `get` on `pods/proxy`: the upgrade GET through `pods/<pod>:<port>/proxy` (an upgrade is
 *   authorized as the request's verb; pods/proxy has no "create on upgrade" rule, unlike
 *   exec/attach/portforward);
 * - `list`/`watch` on `endpointslices`: the ready proxy-server pods (EndpointSlice names are
 *   generated, so resourceNames cannot narrow it; the RoleBinding confines it to one namespace).
 */
export const AGENT_TUNNEL_CLUSTER_ROLE = "open-cluster-management:cluster-proxy:agent-tunnel";
export const AGENT_TUNNEL_RULES = [
  { apiGroups: [""], resources: ["pods/proxy"], verbs: ["get"] },
  { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"] },
];
/** The RoleBinding (in the proxy-servers' namespace) of that ClusterRole to the agents' hub group. */
export const AGENT_TUNNEL_BINDING = "cluster-proxy-agent-tunnel";
/**
 * The group of every cluster-proxy agent's hub identity (the kube-apiserver-client registration's
 * subject; our manager approves such CSRs only from a cluster's own registration agent).
 */
export const AGENT_HUB_GROUP = "system:open-cluster-management:addon:cluster-proxy";

/** Every hub object of `mpc` except Secrets, in apply order. */
export function renderProxyServer(mpc: ManagedProxyConfiguration): RenderedObject[] {
  const spec = mpc.spec;
  const name = mpc.metadata.name;
  const ns = spec.proxyServer.namespace;
  const labels = ownedLabels(name);
  const owner = [ownerReference(mpc)];
  const podLabels = serverPodLabels(name);
  const ports = spec.deploy.ports;
  const meta = (objName: string): KubeObject["metadata"] => ({
    name: objName,
    namespace: ns,
    labels,
    ownerReferences: owner,
  });
  const out: RenderedObject[] = [];

  // The namespace is not owned: it may hold the CA Secrets and other things an operator put there.
  out.push({
    resource: Resources.namespace,
    object: { metadata: { name: ns, labels: { "app.kubernetes.io/part-of": "cluster-proxy" } } },
  });
  out.push({
    resource: Resources.serviceAccount,
    object: { metadata: meta(SERVICE_ACCOUNT), automountServiceAccountToken: false },
  });
  if (usesPortForward(spec)) {
    out.push({
      resource: Resources.roleBinding,
      object: {
        metadata: meta(AGENT_TUNNEL_BINDING),
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: AGENT_TUNNEL_CLUSTER_ROLE },
        subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "Group", name: AGENT_HUB_GROUP }],
      },
    });
  }
  out.push({
    resource: Resources.service,
    object: {
      metadata: meta(spec.proxyServer.inClusterServiceName),
      spec: {
        type: "ClusterIP",
        selector: podLabels,
        ports: [
          { name: "proxy-server", protocol: "TCP", port: ports.proxyServer, targetPort: ports.proxyServer },
          { name: "agent-server", protocol: "TCP", port: ports.agentServer, targetPort: ports.agentServer },
          { name: "http-connect", protocol: "TCP", port: CONNECT_DOOR_PORT, targetPort: CONNECT_DOOR_PORT },
        ],
      },
    },
  });
  const entry = spec.proxyServer.entrypoint;
  if (entry?.type === "LoadBalancerService") {
    const lb = entry.loadBalancerService ?? { name: "proxy-agent-entrypoint" };
    const annotations = Object.fromEntries((lb.annotations ?? []).map((a) => [a.key, a.value ?? ""]));
    out.push({
      resource: Resources.service,
      object: {
        metadata: { ...meta(lb.name), annotations },
        spec: {
          type: "LoadBalancer",
          selector: podLabels,
          ports: [{ name: "agent-server", protocol: "TCP", port: entry.port, targetPort: ports.agentServer }],
        },
      },
    });
  }
  const replicas = spec.proxyServer.replicas;
  const placement = spec.proxyServer.nodePlacement ?? {};
  out.push({
    resource: Resources.deployment,
    object: {
      metadata: meta(name),
      spec: {
        replicas,
        selector: { matchLabels: podLabels },
        // Never fewer ready servers than agents are connected to: a new pod must be ready first.
        strategy: { type: "RollingUpdate", rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
        template: {
          metadata: { labels: podLabels },
          spec: {
            serviceAccountName: SERVICE_ACCOUNT,
            automountServiceAccountToken: false,
            securityContext: {
              runAsNonRoot: true,
              runAsUser: 65532,
              runAsGroup: 65532,
              seccompProfile: { type: "RuntimeDefault" },
            },
            ...(placement.nodeSelector ? { nodeSelector: placement.nodeSelector } : {}),
            ...(placement.tolerations ? { tolerations: placement.tolerations } : {}),
            ...(spec.proxyServer.imagePullSecrets?.length
              ? { imagePullSecrets: spec.proxyServer.imagePullSecrets.map((n) => ({ name: n })) }
              : {}),
            affinity: {
              podAntiAffinity: {
                preferredDuringSchedulingIgnoredDuringExecution: [
                  {
                    weight: 100,
                    podAffinityTerm: {
                      topologyKey: "kubernetes.io/hostname",
                      labelSelector: { matchLabels: podLabels },
                    },
                  },
                ],
              },
            },
            terminationGracePeriodSeconds: SERVER_TERMINATION_GRACE_SECONDS,
            containers: [
              {
                name: "proxy-server",
                image: spec.proxyServer.image,
                imagePullPolicy: spec.proxyServer.imagePullPolicy,
                command: ["cluster-proxy", "server"],
                args: [...serverArgs(spec), ...(spec.proxyServer.additionalArgs ?? [])],
                ports: [
                  { name: "proxy-server", containerPort: ports.proxyServer, protocol: "TCP" },
                  { name: "agent-server", containerPort: ports.agentServer, protocol: "TCP" },
                  { name: "http-connect", containerPort: CONNECT_DOOR_PORT, protocol: "TCP" },
                  { name: "health", containerPort: ports.healthServer, protocol: "TCP" },
                  ...(usesPortForward(spec)
                    ? [{ name: "agent-upgrade", containerPort: AGENT_UPGRADE_PORT, protocol: "TCP" }]
                    : []),
                ],
                // Ready = /readyz: an agent is connected, or --ready-after-agents-timeout (30 s) has
                // passed without one (a hub without clusters, agents that reach only ready pods);
                // never while draining.
                readinessProbe: {
                  httpGet: { path: "/readyz", port: ports.healthServer },
                  periodSeconds: 2,
                  failureThreshold: 2,
                },
                livenessProbe: {
                  httpGet: { path: "/healthz", port: ports.healthServer },
                  initialDelaySeconds: 10,
                  periodSeconds: 10,
                  failureThreshold: 3,
                },
                resources: spec.proxyServer.resources ?? DEFAULT_RESOURCES,
                securityContext: {
                  allowPrivilegeEscalation: false,
                  readOnlyRootFilesystem: true,
                  runAsNonRoot: true,
                  capabilities: { drop: ["ALL"] },
                },
                volumeMounts: [
                  { name: "proxy-server-certs", mountPath: MOUNTS.proxyServer, readOnly: true },
                  { name: "agent-server-certs", mountPath: MOUNTS.agentServer, readOnly: true },
                  { name: "tls-ticket-keys", mountPath: MOUNTS.ticketKeys, readOnly: true },
                ],
              },
            ],
            volumes: [
              {
                name: "proxy-server-certs",
                secret: { secretName: spec.authentication.dump.secrets.signingProxyServerSecretName },
              },
              {
                name: "agent-server-certs",
                secret: { secretName: spec.authentication.dump.secrets.signingAgentServerSecretName },
              },
              { name: "tls-ticket-keys", secret: { secretName: ticketKeysSecretName(name) } },
            ],
          },
        },
      },
    },
  });
  if (replicas > 1) {
    out.push({
      resource: Resources.podDisruptionBudget,
      object: { metadata: meta(name), spec: { maxUnavailable: 1, selector: { matchLabels: podLabels } } },
    });
  }
  for (const r of out) withHash(r.object);
  return out;
}
