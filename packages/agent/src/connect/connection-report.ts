/**
 * What a proxy-agent tells its own cluster about its connection to the proxy-servers: one Deployment
 * condition ({@link AGENT_CONNECTION_CONDITION}), its message bounded and stripped of secrets.
 * Design: docs/design/addon-manager.md#what-the-agents-report-the-reason-in-the-agents-own-words
 */
import { AGENT_CONNECTION_CONDITION, AGENT_CONNECTION_MESSAGE_MAX, AgentConnectionReason } from "@cluster-proxy/api";

/** The agent's connection state as it reports it. */
export interface ConnectionState {
  /** Who reports (the pod name: the agent ID). */
  agent: string;
  /** Proxy-servers connected now. */
  connected: number;
  /** Proxy-servers the servers announced (at least 1). */
  known: number;
  /** The last failed connection attempt's error (cleared by nothing: it is "the last one"). */
  lastError?: string;
  /** How the agent reaches the proxy-servers, when not directly (e.g. "through the hub kube-apiserver"). */
  path?: string;
}

/** The condition as written into the Deployment's status (times are added by the writer). */
export interface ConnectionCondition {
  type: typeof AGENT_CONNECTION_CONDITION;
  status: "True" | "False";
  reason: string;
  message: string;
}

/**
 * Make an error text fit to leave the cluster: no credentials in URLs (`scheme://user:pass@` ->
 * `scheme://***@`), no bearer tokens, no control characters, at most `max` characters.
 */
export function safeErrorText(text: string, max = AGENT_CONNECTION_MESSAGE_MAX): string {
  const cleaned = text
    // eslint-disable-next-line no-control-regex
    .replace(/[\u0000-\u001f\u007f]+/g, " ")
    .replace(/\b([a-z][a-z0-9+.-]*:\/\/)[^\s/@]*@/gi, "$1***@")
    .replace(/\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+/gi, "$1 ***")
    .replace(/\s+/g, " ")
    .trim();
  return cleaned.length <= max ? cleaned : `${cleaned.slice(0, Math.max(0, max - 1))}…`;
}

/** The condition for a connection state. */
export function connectionCondition(state: ConnectionState): ConnectionCondition {
  const known = Math.max(1, state.known);
  const head =
    `${state.agent}: connected to ${Math.min(state.connected, known)} of ${known} proxy-server${known === 1 ? "" : "s"}` +
    (state.path ? ` ${state.path}` : "");
  if (state.connected >= known)
    return {
      type: AGENT_CONNECTION_CONDITION,
      status: "True",
      reason: AgentConnectionReason.connected,
      message: safeErrorText(head),
    };
  return {
    type: AGENT_CONNECTION_CONDITION,
    status: "False",
    reason: state.connected > 0 ? AgentConnectionReason.partial : AgentConnectionReason.disconnected,
    message: safeErrorText(state.lastError ? `${head}; last error: ${state.lastError}` : head),
  };
}
