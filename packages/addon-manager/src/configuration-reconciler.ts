/**
 * The level-based reconciler of one ManagedProxyConfiguration: read the world, compute the desired hub
 * objects and certificates, apply the difference, write an honest status, say when to look again.
 * Design: docs/design/addon-manager.md#shape
 */
import { isIP } from "node:net";
import {
  AGENT_UPGRADE_PORT,
  GATEWAY_AGENT_CA_KEY,
  GATEWAY_CA_SUFFIX,
  GATEWAY_IDENTITY_CN,
  GATEWAY_IDENTITY_SECRET,
  GATEWAY_SERVICE,
  GATEWAY_SERVING_SECRET,
  gatewayServiceNames,
  MpcConditions,
  SERVER_CA_AGENT_CA_KEY,
  SERVER_CA_SECRET,
  configurationProblems,
  type ManagedProxyConfiguration,
} from "@cluster-proxy/api";
import {
  ensureCa,
  fingerprintOf,
  issueLeaf,
  leafRenewal,
  recordReplacedCa,
  splitPem,
  unb64,
  b64,
  type LeafPolicy,
  type LeafRequest,
  type SecretObject,
  type SignerRole,
  type SigningCa,
} from "./certificate-authority.js";
import {
  KubeApiError,
  TerminalError,
  type ConditionInput,
  type EventRecorder,
  type KubeApi,
  type KubeObject,
  type ControllerSpec,
  type ReconcileResult,
} from "@cluster-proxy/kube";
import { INVALID_CONFIGURATION, writeConfigurationStatus } from "./configuration-status.js";
import { Resources } from "./resources.js";
import { publishGatewayApiServiceCa } from "./gateway-api-service.js";
import { CONFIGURATION_LABEL } from "./labels.js";
import { realClock, type Clock, type Logger } from "@cluster-proxy/kit";
import {
  AGENT_CA_KEY,
  AGENT_TUNNEL_BINDING,
  AGENT_TUNNEL_CLUSTER_ROLE,
  AGENT_TUNNEL_RULES,
  CLIENT_CA_KEY,
  usesPortForward,
  ownerReference,
  renderProxyServer,
  type RenderedObject,
} from "./render-proxy-server.js";
import { ownedLabels } from "./labels.js";
import { errorMessage } from "@cluster-proxy/errors";
import {
  TICKET_KEYS_FILE,
  TICKET_KEYS_ROTATED_AT,
  planTicketKeys,
  ticketKeysOf,
  ticketKeysSecretName,
} from "./ticket-keys-secret.js";

export interface ReconcilerOptions {
  signerNamespace: string;
  signerName: string;
  caValidityMs: number;
  leaf: LeafPolicy;
  resyncMs: number;
  /** How often the proxy-servers' TLS session ticket key is replaced (default TICKET_KEY_ROTATION_MS). */
  ticketKeyRotationMs?: number;
}

/** One leaf certificate: its Secret, request, CA, the trust bundle beside it, its condition. */
interface LeafPlan {
  secret: string;
  request: LeafRequest;
  ca: SigningCa;
  bundleKey?: string;
  bundle?: SigningCa;
  condition: string;
}

/** Workloads are applied last, so their Secret volumes exist when the pods start. */
const isWorkload = (r: RenderedObject): boolean =>
  r.resource === Resources.deployment || r.resource === Resources.podDisruptionBudget;

/** The status a reconcile writes. */
type MpcStatus = NonNullable<ManagedProxyConfiguration["status"]>;

/** The manager's CAs, one per role. */
type Cas = Record<SignerRole, SigningCa>;

interface DeploymentStatus extends KubeObject {
  spec?: { replicas?: number };
  status?: { readyReplicas?: number; updatedReplicas?: number; observedGeneration?: number };
}

interface ServiceObject extends KubeObject {
  status?: { loadBalancer?: { ingress?: { ip?: string; hostname?: string }[] } };
}

/** Reads cached objects (from the manager's watches) instead of asking the apiserver. */
export interface ObjectCache {
  /** The configuration `name` with the schema's defaults filled in (`managedProxyConfigurationFromApi`). */
  configuration(name: string): ManagedProxyConfiguration | undefined;
  owned(resource: "deployment" | "service" | "podDisruptionBudget", configuration: string): KubeObject[];
}

/** The `configurations` controller's reconciler, keyed by configuration name. */
export class ConfigurationReconciler implements ControllerSpec<string> {
  readonly what = "reconcile";
  /** Its leaf certificates are issued and renewed on the same clock. */
  private readonly leaf: LeafPolicy;

  constructor(
    private readonly api: KubeApi,
    private readonly cache: ObjectCache,
    private readonly events: EventRecorder,
    private readonly options: ReconcilerOptions,
    private readonly logger: Logger,
    /** What "now" is for certificates, ticket keys and conditions. */
    private readonly clock: Clock = realClock,
  ) {
    this.leaf = { ...options.leaf, clock };
  }

  logFields(name: string): Record<string, unknown> {
    return { configuration: name };
  }

  /**
   * One pass over the configuration `name`, as named steps in apply order: refuse an invalid
   * spec, the CAs, the access objects, the entrypoint, the leaf certificates, the workloads (and
   * stale objects gone), the published serving CA bundle, the servers' readiness, the status.
   */
  async reconcile(name: string): Promise<ReconcileResult> {
    const mpc = this.cache.configuration(name);
    if (!mpc || mpc.metadata.deletionTimestamp) return; // owned objects go with it (ownerReferences)
    const conditions: ConditionInput[] = [];
    const status: MpcStatus = {};
    await this.refuseInvalid(mpc, conditions, status);
    const cas = await this.signers(mpc, conditions, status);
    status.caExpiry = cas.serving.notAfter.toISOString().replace(/\.\d+Z$/, "Z");
    const rendered = renderProxyServer(mpc);
    await this.applyAccessObjects(mpc, rendered);
    // Where agents dial.
    const entry = await this.entrypoint(mpc);
    conditions.push(entry.condition);
    if (entry.address) status.entrypoint = entry.address;
    let recheckMs = this.options.resyncMs;
    for (const leaf of this.leafPlan(mpc, cas, entry.host)) {
      const issued = await this.ensureLeaf(mpc, leaf);
      conditions.push(issued.condition);
      recheckMs = Math.min(recheckMs, issued.recheckMs);
    }
    recheckMs = Math.min(recheckMs, await this.ensureTicketKeys(mpc));
    for (const r of rendered.filter(isWorkload)) await this.api.apply(r.resource, r.object);
    await this.deleteStale(name, rendered);
    conditions.push(await this.publishServingCa(mpc, cas));
    await publishGatewayApiServiceCa(this.api, mpc.spec.proxyServer.namespace, cas.serving.bundlePem, this.logger);
    conditions.push(this.serversDeployed(mpc, status));
    await this.writeStatus(mpc, conditions, status);
    return { requeueAfterMs: Math.max(1000, recheckMs) };
  }

  /** What the CRD refuses but an older CRD let in: refused here too, deploying nothing (a terminal error). */
  private async refuseInvalid(
    mpc: ManagedProxyConfiguration,
    conditions: ConditionInput[],
    status: MpcStatus,
  ): Promise<void> {
    const problems = configurationProblems(mpc.spec);
    if (problems.length === 0) return;
    conditions.push({
      type: MpcConditions.ProxyServerDeployed,
      status: "False",
      reason: INVALID_CONFIGURATION,
      message: `refused: ${problems.join("; ")}`,
    });
    await this.writeStatus(mpc, conditions, status);
    // Recorded in the condition; a retry cannot mend the spec, a change of it queues it again.
    throw new TerminalError(`ManagedProxyConfiguration ${mpc.metadata.name} refused: ${problems.join("; ")}`);
  }

  /** The CAs; when one is unavailable every certificate condition says why (and the error is retried). */
  private async signers(mpc: ManagedProxyConfiguration, conditions: ConditionInput[], status: MpcStatus): Promise<Cas> {
    try {
      return await this.ensureCas(mpc);
    } catch (err) {
      const message = errorMessage(err);
      for (const type of [
        MpcConditions.ProxyServerSecretSigned,
        MpcConditions.AgentServerSecretSigned,
        MpcConditions.ProxyClientSecretSigned,
        MpcConditions.GatewayServingSecretSigned,
        MpcConditions.GatewayIdentitySecretSigned,
      ])
        conditions.push({ type, status: "False", reason: "SignerUnavailable", message });
      await this.writeStatus(mpc, conditions, status);
      throw err;
    }
  }

  /** The agents' tunnel RoleBinding (PortForward) or its removal, then every rendered object but the workloads. */
  private async applyAccessObjects(mpc: ManagedProxyConfiguration, rendered: RenderedObject[]): Promise<void> {
    const ns = mpc.spec.proxyServer.namespace;
    if (usesPortForward(mpc.spec)) await this.ensureAgentTunnelRole();
    // Not PortForward (any more): the agents' hub identity gets nothing here. A manager without
    // the right to delete RoleBindings (an older chart's) could not have made one either.
    else
      await this.api.delete(Resources.roleBinding, AGENT_TUNNEL_BINDING, ns).catch((err: unknown) => {
        if (!(err instanceof KubeApiError && err.status === 403)) throw err;
      });
    for (const r of rendered.filter((r) => !isWorkload(r))) await this.api.apply(r.resource, r.object);
  }

  /** The leaf certificates of `mpc`: which Secret, for which names, signed by which CA, with which bundle. */
  private leafPlan(mpc: ManagedProxyConfiguration, cas: Cas, entryHost: string | undefined): LeafPlan[] {
    const spec = mpc.spec;
    const ns = spec.proxyServer.namespace;
    const svc = spec.proxyServer.inClusterServiceName;
    const hubNames = ["localhost", svc, `${svc}.${ns}`, `${svc}.${ns}.svc`, `${svc}.${ns}.svc.cluster.local`];
    const extra = spec.authentication.signer.selfSigned?.additionalSANs ?? [];
    const servingNames = splitNames([...hubNames, "127.0.0.1", ...extra]);
    const agentNames = splitNames([...hubNames, "127.0.0.1", ...extra, ...(entryHost ? [entryHost] : [])]);
    const secrets = spec.authentication.dump.secrets;
    return [
      {
        secret: secrets.signingProxyServerSecretName,
        request: { commonName: `${svc}.${ns}.svc`, ...servingNames, usage: "server" },
        ca: cas.serving,
        bundleKey: CLIENT_CA_KEY,
        bundle: cas.client,
        condition: MpcConditions.ProxyServerSecretSigned,
      },
      {
        secret: secrets.signingAgentServerSecretName,
        request: { commonName: entryHost ?? `${svc}.${ns}.svc`, ...agentNames, usage: "server" },
        ca: cas.serving,
        bundleKey: AGENT_CA_KEY,
        bundle: cas.agent,
        condition: MpcConditions.AgentServerSecretSigned,
      },
      {
        secret: secrets.signingProxyClientSecretName,
        request: {
          commonName: "open-cluster-management:cluster-proxy:proxy-client",
          dnsNames: [],
          ipAddresses: [],
          usage: "client",
        },
        ca: cas.client,
        condition: MpcConditions.ProxyClientSecretSigned,
      },
      // The gateway (chart Deployment `cluster-proxy-addon-user`): hub users verify it with the
      // serving CA; agents' gateway endpoints accept its identity (gateway CA) and nothing else,
      // and it checks their endpoints against the agent CA bundle.
      {
        secret: GATEWAY_SERVING_SECRET,
        request: {
          commonName: `${GATEWAY_SERVICE}.${ns}.svc`,
          ...splitNames([...gatewayServiceNames(ns), ...extra]),
          usage: "server",
        },
        ca: cas.serving,
        condition: MpcConditions.GatewayServingSecretSigned,
      },
      {
        secret: GATEWAY_IDENTITY_SECRET,
        request: { commonName: GATEWAY_IDENTITY_CN, dnsNames: [], ipAddresses: [], usage: "client" },
        ca: cas.gateway,
        bundleKey: GATEWAY_AGENT_CA_KEY,
        bundle: cas.agent,
        condition: MpcConditions.GatewayIdentitySecretSigned,
      },
    ];
  }

  /**
   * The proxy-servers' TLS session ticket keys Secret: created, or rotated once its current key is
   * a period old (ticket-keys-secret.ts); resolves with the time until the next rotation.
   */
  private async ensureTicketKeys(mpc: ManagedProxyConfiguration): Promise<number> {
    const name = mpc.metadata.name;
    const ns = mpc.spec.proxyServer.namespace;
    const secretName = ticketKeysSecretName(name);
    const existing = await this.api.tryGet<SecretObject>(Resources.secret, secretName, ns);
    const now = this.clock.now();
    const plan = planTicketKeys(ticketKeysOf(existing), now, this.options.ticketKeyRotationMs);
    if (!plan.change && existing) return plan.recheckMs;
    await this.api.apply(Resources.secret, {
      metadata: {
        name: secretName,
        namespace: ns,
        labels: ownedLabels(name),
        annotations: { [TICKET_KEYS_ROTATED_AT]: plan.rotatedAt.toISOString() },
        ownerReferences: [ownerReference(mpc)],
      },
      type: "Opaque",
      data: { [TICKET_KEYS_FILE]: b64(plan.file) },
    });
    if (plan.change)
      this.logger.info(
        { configuration: name, secret: `${ns}/${secretName}`, change: plan.change },
        "TLS session ticket keys of the proxy-servers " + plan.change,
      );
    return plan.recheckMs;
  }

  /**
   * Issue `leaf` when missing, changed, from another CA or due, and apply its Secret: its
   * condition, and when to look again.
   */
  private async ensureLeaf(
    mpc: ManagedProxyConfiguration,
    leaf: LeafPlan,
  ): Promise<{ condition: ConditionInput; recheckMs: number }> {
    const name = mpc.metadata.name;
    const ns = mpc.spec.proxyServer.namespace;
    let recheckMs = this.options.resyncMs;
    const existing = await this.api.tryGet<SecretObject>(Resources.secret, leaf.secret, ns);
    const due = leafRenewal(existing, leaf.request, leaf.ca, this.leaf);
    let data = { "tls.crt": existing?.data?.["tls.crt"] ?? "", "tls.key": existing?.data?.["tls.key"] ?? "" };
    let annotations: Record<string, string>;
    let notAfter = due.notAfter;
    if (due.reason) {
      const issued = await issueLeaf(leaf.request, leaf.ca, this.leaf);
      data = issued.data as typeof data;
      annotations = issued.annotations;
      notAfter = issued.notAfter;
      this.logger.info(
        { configuration: name, secret: `${ns}/${leaf.secret}`, why: due.reason },
        "issued a certificate",
      );
      void this.events.record(
        mpc,
        "Normal",
        "CertificateIssued",
        `Issued ${ns}/${leaf.secret} (${due.reason}), valid until ${issued.notAfter.toISOString()}`,
      );
      recheckMs = Math.min(recheckMs, this.options.leaf.refreshAfterMs);
    } else {
      recheckMs = Math.min(recheckMs, due.recheckInMs);
      annotations = Object.fromEntries(
        Object.entries(existing?.metadata.annotations ?? {}).filter(([k]) =>
          k.startsWith("proxy.open-cluster-management.io/"),
        ),
      );
    }
    const fullData: Record<string, string> = { ...data, "ca.crt": b64(leaf.ca.bundlePem) };
    if (leaf.bundleKey && leaf.bundle) fullData[leaf.bundleKey] = b64(leaf.bundle.bundlePem);
    await this.api.apply(Resources.secret, {
      metadata: {
        name: leaf.secret,
        namespace: ns,
        labels: ownedLabels(name),
        annotations,
        ownerReferences: [ownerReference(mpc)],
      },
      type: "kubernetes.io/tls",
      data: fullData,
    });
    return {
      condition: {
        type: leaf.condition,
        status: "True",
        reason: "Signed",
        message: `Expiry:${notAfter?.toISOString() ?? "unknown"}`,
      },
      recheckMs,
    };
  }

  /** Publish the serving CA bundle where hub clients look for it; notice a replaced CA: the SignerCAConsistent condition. */
  private async publishServingCa(mpc: ManagedProxyConfiguration, cas: Cas): Promise<ConditionInput> {
    const name = mpc.metadata.name;
    const ns = mpc.spec.proxyServer.namespace;
    const published = await this.api.tryGet<SecretObject>(Resources.secret, SERVER_CA_SECRET, ns);
    const before = splitPem(unb64(published?.data?.["ca.crt"]));
    const known = new Set(splitPem(cas.serving.bundlePem).map(fingerprintOf));
    const foreign = before.map(fingerprintOf).filter((f) => !known.has(f));
    if (before.length > 0 && foreign.length === before.length && cas.serving.replaced.length === 0) {
      await recordReplacedCa(this.api, cas.serving, foreign);
      void this.events.record(
        mpc,
        "Warning",
        "SignerCAReplaced",
        `The serving CA in Secret ${cas.serving.secret} is not the one published before (${foreign.join(", ")}): clients and agents holding the old CA bundle cannot verify the proxy-servers until they get the new one`,
      );
    }
    await this.api.apply(Resources.secret, {
      metadata: {
        name: SERVER_CA_SECRET,
        namespace: ns,
        labels: ownedLabels(name),
        ownerReferences: [ownerReference(mpc)],
      },
      type: "Opaque",
      // The agent CA bundle too (public, like the serving one): `cluster-proxy health` verifies the
      // agents' gateway endpoints with it, reading no Secret that holds a key.
      data: { "ca.crt": b64(cas.serving.bundlePem), [SERVER_CA_AGENT_CA_KEY]: b64(cas.agent.bundlePem) },
    });
    return cas.serving.replaced.length > 0
      ? {
          type: MpcConditions.SignerCAConsistent,
          status: "False",
          reason: "SignerCAReplaced",
          message: `The serving CA in Secret ${cas.serving.secret} replaced ${cas.serving.replaced.join(", ")} while its certificates were in use: restore that Secret from a backup to keep the old CA, or remove annotation proxy.open-cluster-management.io/replaced-ca-fingerprints from it once every client and agent has the new bundle`,
        }
      : {
          type: MpcConditions.SignerCAConsistent,
          status: "True",
          reason: "Consistent",
          message: `serving CA ${cas.serving.fingerprint}`,
        };
  }

  /** Servers: ready only when every desired replica is (ProxyServerDeployed; replicas in the status). */
  private serversDeployed(mpc: ManagedProxyConfiguration, status: MpcStatus): ConditionInput {
    const name = mpc.metadata.name;
    const ns = mpc.spec.proxyServer.namespace;
    const spec = mpc.spec;
    const deployment: DeploymentStatus | undefined = this.cache
      .owned("deployment", name)
      .find((d) => d.metadata.name === name);
    const desired = spec.proxyServer.replicas;
    const ready = deployment?.status?.readyReplicas ?? 0;
    status.replicas = desired;
    status.readyReplicas = ready;
    return ready >= desired
      ? {
          type: MpcConditions.ProxyServerDeployed,
          status: "True",
          reason: "AllReplicasReady",
          message: `${ready} of ${desired} proxy-servers ready`,
        }
      : {
          type: MpcConditions.ProxyServerDeployed,
          status: "False",
          reason: "ReplicasNotReady",
          message: `${ready} of ${desired} proxy-servers ready (Deployment ${ns}/${name})`,
        };
  }

  private async ensureCas(mpc: ManagedProxyConfiguration): Promise<Cas> {
    const o = this.options;
    const policy = { caValidityMs: o.caValidityMs, clock: this.clock };
    const signer = mpc.spec.authentication.signer;
    const serving =
      signer.type === "Provided" && signer.provided
        ? await ensureCa(
            this.api,
            "serving",
            signer.provided.namespace ?? o.signerNamespace,
            signer.provided.secretName,
            {
              ...policy,
              create: false,
            },
          )
        : await ensureCa(this.api, "serving", o.signerNamespace, o.signerName, { ...policy, create: true });
    const client = await ensureCa(this.api, "client", o.signerNamespace, `${o.signerName}-client`, {
      ...policy,
      create: true,
    });
    const agent = await ensureCa(this.api, "agent", o.signerNamespace, `${o.signerName}-agent`, {
      ...policy,
      create: true,
    });
    // Always the manager's, also with a Provided serving CA: only the agents' gateway endpoint
    // trusts it, so there is nothing to integrate with (docs/design/pki.md).
    const gateway = await ensureCa(this.api, "gateway", o.signerNamespace, `${o.signerName}${GATEWAY_CA_SUFFIX}`, {
      ...policy,
      create: true,
    });
    return { serving, client, agent, gateway };
  }

  /**
   * The ClusterRole the PortForward RoleBinding refers to: shipped by the chart; created here when
   * missing (a manager run without the chart). Its rules are never changed by the manager.
   */
  private async ensureAgentTunnelRole(): Promise<void> {
    if (await this.api.tryGet(Resources.clusterRole, AGENT_TUNNEL_CLUSTER_ROLE)) return;
    try {
      await this.api.create(Resources.clusterRole, {
        metadata: { name: AGENT_TUNNEL_CLUSTER_ROLE, labels: { "app.kubernetes.io/part-of": "cluster-proxy" } },
        rules: AGENT_TUNNEL_RULES,
      });
    } catch (err) {
      throw new Error(
        `ClusterRole ${AGENT_TUNNEL_CLUSTER_ROLE} (the agents' rights with entrypoint PortForward) is missing and cannot be created: install it from the chart (${errorMessage(err)})`,
        { cause: err },
      );
    }
  }

  private async entrypoint(
    mpc: ManagedProxyConfiguration,
  ): Promise<{ host?: string; address?: string; condition: ConditionInput }> {
    const spec = mpc.spec;
    const entry = spec.proxyServer.entrypoint;
    const type = MpcConditions.EntrypointReady;
    if (!entry) {
      const host = `${spec.proxyServer.inClusterServiceName}.${spec.proxyServer.namespace}.svc`;
      return {
        host,
        address: `${host}:${spec.deploy.ports.agentServer}`,
        condition: {
          type,
          status: "True",
          reason: "InClusterService",
          message: `no entrypoint set: agents dial ${host}:${spec.deploy.ports.agentServer}, which only agents inside the hub cluster can reach`,
        },
      };
    }
    if (entry.type === "PortForward") {
      const host = `${spec.proxyServer.inClusterServiceName}.${spec.proxyServer.namespace}.svc`;
      return {
        host,
        address: `${host}:${AGENT_UPGRADE_PORT}`,
        condition: {
          type,
          status: "True",
          reason: "PortForward",
          message: `agents reach the proxy-servers through the hub kube-apiserver (pods/<pod>:${AGENT_UPGRADE_PORT}/proxy, upgraded; their mTLS runs inside) with their OCM hub credentials: one long-lived apiserver connection per agent and proxy-server replica`,
        },
      };
    }
    if (entry.type === "Hostname" && entry.hostname) {
      const address = `${entry.hostname.value}:${entry.port}`;
      return {
        host: entry.hostname.value,
        address,
        condition: { type, status: "True", reason: "Hostname", message: `agents dial ${address}` },
      };
    }
    const lbName = entry.loadBalancerService?.name ?? "proxy-agent-entrypoint";
    const lb = await this.api.tryGet<ServiceObject>(Resources.service, lbName, spec.proxyServer.namespace);
    const ingress = lb?.status?.loadBalancer?.ingress?.find((i) => i.ip || i.hostname);
    const host = ingress?.ip || ingress?.hostname;
    if (!host)
      return {
        condition: {
          type,
          status: "False",
          reason: "WaitingForLoadBalancer",
          message: `Service ${spec.proxyServer.namespace}/${lbName} has no ingress address yet: agents cannot connect until the load balancer assigns one`,
        },
      };
    const address = `${isIP(host) === 6 ? `[${host}]` : host}:${entry.port}`;
    return {
      host,
      address,
      condition: { type, status: "True", reason: "LoadBalancerReady", message: `agents dial ${address}` },
    };
  }

  /** Delete owned Services and PodDisruptionBudgets that the configuration no longer renders. */
  private async deleteStale(name: string, rendered: RenderedObject[]): Promise<void> {
    const keep = new Set(
      rendered.map((r) => `${r.resource.kind}/${r.object.metadata.namespace}/${r.object.metadata.name}`),
    );
    for (const kind of ["service", "podDisruptionBudget", "deployment"] as const) {
      for (const obj of this.cache.owned(kind, name)) {
        const key = `${Resources[kind].kind}/${obj.metadata.namespace}/${obj.metadata.name}`;
        if (obj.metadata.labels?.[CONFIGURATION_LABEL] === name && !keep.has(key)) {
          this.logger.info(
            { configuration: name, object: key },
            "deleting an object the configuration no longer needs",
          );
          await this.api.delete(Resources[kind], obj.metadata.name, obj.metadata.namespace);
        }
      }
    }
  }

  private async writeStatus(
    mpc: ManagedProxyConfiguration,
    conditions: ConditionInput[],
    status: NonNullable<ManagedProxyConfiguration["status"]>,
  ): Promise<void> {
    const now = new Date(this.clock.now());
    await writeConfigurationStatus(this.api, this.events, mpc, conditions, status, now);
  }
}

function splitNames(names: string[]): { dnsNames: string[]; ipAddresses: string[] } {
  const unique = [...new Set(names.filter((n) => n !== ""))];
  return { dnsNames: unique.filter((n) => isIP(n) === 0), ipAddresses: unique.filter((n) => isIP(n) !== 0) };
}
