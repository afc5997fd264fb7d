/**
 * The `Available` condition of a ManagedClusterAddOn `cluster-proxy`, from the hub's tunnel probes
 * through every ready replica and from what the agents report about themselves.
 * Design: docs/design/addon-manager.md#health-available-from-tunnel-probes-through-the-proxy-server-replicas
 */
import { ADDON_NAME, ADDON_NAME_LABEL, TunnelHealthReason, formatTunnelHealth } from "@cluster-proxy/api";
import type { ConditionInput } from "@cluster-proxy/kube";
import type { ClusterProbes } from "./tunnel-prober.js";

/** Feedback names the agent ManifestWork asks for (agent-manifests.ts) beside the well-known ones. */
export const AGENT_CONNECTED_FEEDBACK = "AgentConnected";
export const AGENT_CONNECTION_MESSAGE_FEEDBACK = "AgentConnectionMessage";

/** What the work agent reports about the agent Deployment. */
export interface AgentFeedback {
  readyReplicas?: number;
  replicas?: number;
  /** Status of the agents' `ProxyAgentConnected` condition ("True"/"False"), when written. */
  connected?: string;
  /** Its message: the last writer's pod name, server count and last error. */
  message?: string;
}

/** A feedback value as the ManifestWork status carries it. */
export interface FeedbackValue {
  name: string;
  fieldValue?: { type?: string; integer?: number; string?: string; boolean?: boolean };
}

/** Read {@link AgentFeedback} from the feedback values of the agent Deployment (undefined: none yet). */
export function agentFeedback(values: readonly FeedbackValue[] | undefined): AgentFeedback | undefined {
  if (!values?.length) return undefined;
  const byName = new Map(values.map((v) => [v.name, v.fieldValue]));
  const feedback: AgentFeedback = {};
  const ready = byName.get("ReadyReplicas")?.integer;
  const replicas = byName.get("Replicas")?.integer;
  const connected = byName.get(AGENT_CONNECTED_FEEDBACK)?.string;
  const message = byName.get(AGENT_CONNECTION_MESSAGE_FEEDBACK)?.string;
  if (ready !== undefined) feedback.readyReplicas = ready;
  if (replicas !== undefined) feedback.replicas = replicas;
  if (connected) feedback.connected = connected;
  if (message) feedback.message = message;
  return feedback;
}

/** What OCM says about the agent's certificate, and the CSRs of the addon for the cluster. */
export interface CertificateState {
  /** The ManagedClusterAddOn's `ClusterCertificateRotated` condition (OCM's registration agent), when written. */
  rotated?: { status: string; reason?: string; message?: string };
  /** CSRs of the addon for the cluster on the hub, when known. */
  csrs?: number;
  /** The limit of those at which OCM's registration agent stops requesting. */
  csrLimit: number;
  /** The Secret the agent pods mount their certificate from. */
  agentSecret: string;
}

/** How long Available is held True while the proxy-servers are being replaced (see the module comment). */
export const REPLICA_CHANGE_GRACE_MS = 30_000;

export interface AvailabilityInput {
  cluster: string;
  /** False when probing is disabled (--tunnel-probe-interval=0). */
  probing: boolean;
  /** The prober's last picture of the cluster (undefined: not probed yet). */
  picture: ClusterProbes | undefined;
  /** The cluster's ManagedProxyConfiguration, when it exists. */
  configuration?: { name: string; serverNamespace: string; agentReplicas?: number };
  agent?: AgentFeedback;
  /** What OCM says about the agent's certificate (its note completes every message). */
  certificate?: CertificateState;
  /** The prober's clock now (the clock of `picture.lastPass.at`). */
  now?: number;
  /** Default {@link REPLICA_CHANGE_GRACE_MS}. */
  changeGraceMs?: number;
}

/** The `Available` condition, and when to look again (a held condition ends by time, not by an event). */
export interface Availability {
  condition: ConditionInput;
  recheckAfterMs?: number;
}

/** The `Available` condition and when to re-evaluate it (see the module comment). */
export function availability(input: AvailabilityInput): Availability {
  const { picture } = input;
  const lastPass = picture?.lastPass;
  if (picture?.probes !== undefined && !picture.probes.some((p) => p.ok) && lastPass && input.now !== undefined) {
    const left = lastPass.at + (input.changeGraceMs ?? REPLICA_CHANGE_GRACE_MS) - input.now;
    const names = picture.probes.map((p) => p.server).sort();
    const changed = names.length !== lastPass.replicas.length || names.some((n, i) => n !== lastPass.replicas[i]);
    if (changed && left > 0)
      return {
        condition: {
          type: "Available",
          status: "True",
          reason: TunnelHealthReason.changing,
          message: `${formatTunnelHealth(picture.probes)}; the proxy-servers are being replaced: the tunnel worked through ${lastPass.replicas.join(", ")} moments ago and the agents are moving to the new replicas (Available is kept for up to ${Math.round((input.changeGraceMs ?? REPLICA_CHANGE_GRACE_MS) / 1000)} s)${certificateNote(input, true)}`,
        },
        recheckAfterMs: Math.ceil(left) + 100,
      };
  }
  return { condition: availableCondition(input) };
}

/** The `Available` condition from the probes alone (no grace for a changing set of replicas). */
export function availableCondition(input: AvailabilityInput): ConditionInput {
  const { cluster, picture } = input;
  if (!picture || picture.probes === undefined)
    return {
      type: "Available",
      status: "Unknown",
      reason: "NoProbeResult",
      message: `${
        !input.probing
          ? "tunnel probing is disabled (--tunnel-probe-interval=0)"
          : `the tunnel to ${cluster} has not been probed yet${picture ? `: ${picture.error}` : ""}`
      }${certificateNote(input, false)}`,
    };
  if (picture.probes.length === 0)
    return {
      type: "Available",
      status: "False",
      reason: TunnelHealthReason.noServer,
      message: `no proxy-server replica of ${input.configuration?.name ?? "the configuration"} is ready in namespace ${input.configuration?.serverNamespace ?? ""}${agentNote(input)}${certificateNote(input, false)}`,
    };
  const message = formatTunnelHealth(picture.probes);
  if (picture.probes.some((p) => p.ok))
    return {
      type: "Available",
      status: "True",
      reason: TunnelHealthReason.available,
      message: `${message}${certificateNote(input, true)}`,
    };
  return {
    type: "Available",
    status: "False",
    reason: certificateReason(input) ?? TunnelHealthReason.unavailable,
    message: `${message}${agentNote(input)}${certificateNote(input, false)}`,
  };
}

/**
 * The reason of a False `Available` when the agent's certificate is what stops it (see
 * {@link certificateNote}): not while an agent is ready or reports its own state (it runs, so it
 * has a certificate, and its own error is the cause).
 */
function certificateReason({ certificate, agent }: AvailabilityInput): string | undefined {
  if (!certificate || (agent?.readyReplicas ?? 0) > 0 || agent?.message) return undefined;
  if (certificate.rotated?.status === "False") return TunnelHealthReason.certificateNotIssued;
  if (!certificate.rotated) return TunnelHealthReason.certificatePending;
  return undefined;
}

/**
 * What stops the agent's certificate, in words (docs/design/addon-manager.md, "Health"):
 * `ClusterCertificateRotated=False` with OCM's reason and message (and, when OCM stopped
 * requesting for too many CSRs, how many exist and how to clear them; while the tunnel does not
 * work, that agent pods cannot start without their certificate Secret); while the tunnel does not
 * work and OCM has not written that condition yet, that the agent pods wait for their certificate
 * Secret. Empty when there is nothing to say.
 */
function certificateNote({ cluster, certificate }: AvailabilityInput, tunnelWorks: boolean): string {
  if (!certificate) return "";
  const { rotated, csrs, csrLimit, agentSecret } = certificate;
  const count =
    csrs !== undefined
      ? ` (${csrs} certificate request${csrs === 1 ? "" : "s"} of the addon for ${cluster} on the hub; OCM's registration agent stops requesting at ${csrLimit})`
      : "";
  if (rotated?.status === "False") {
    const tooMany = /too many csr/i.test(rotated.message ?? "")
      ? `; delete them (kubectl delete csr -l open-cluster-management.io/cluster-name=${cluster},${ADDON_NAME_LABEL}=${ADDON_NAME}) or wait for kube-controller-manager to remove issued ones after an hour`
      : "";
    return `; the agent's certificate is not being issued: ClusterCertificateRotated=False (${rotated.reason ?? "no reason"}): ${rotated.message ?? ""}${count}${tooMany}${tunnelWorks ? "" : `; agent pods without Secret ${agentSecret} cannot start`}`;
  }
  if (!rotated && !tunnelWorks)
    return `; no certificate issued to the agent yet (OCM's registration agent has not reported ClusterCertificateRotated): its pods cannot start without Secret ${agentSecret}${count}`;
  return "";
}

/** "; agent Deployment in mc1: 0 of 3 ready; agents report: <pod>: connected to 0 of 1 ...; last error: ..." */
function agentNote({ cluster, configuration, agent }: AvailabilityInput): string {
  if (!agent) return "";
  let note = "";
  if (agent.readyReplicas !== undefined || agent.replicas !== undefined) {
    const desired = configuration?.agentReplicas ?? agent.replicas ?? 0;
    note += `; agent Deployment in ${cluster}: ${agent.readyReplicas ?? 0} of ${desired} ready`;
  }
  if (agent.message) note += `; agents report: ${agent.message}`;
  return note;
}
