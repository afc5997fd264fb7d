/**
 * The agent upgrade door's wire contract, shared by the proxy-server (which serves it) and the
 * agent (which asks for it through the hub kube-apiserver's `pods/<pod>:<port>/proxy`): an HTTP/1.1
 * `GET` with `Connection: Upgrade` and `Upgrade: <AGENT_UPGRADE_PROTOCOL>`, answered
 * `101 Switching Protocols`; then the agent's ordinary mTLS + HTTP/2 tunnel runs over the socket.
 * See docs/design/portforward.md.
 */

/** The `Upgrade` token of the agent upgrade door. */
export const AGENT_UPGRADE_PROTOCOL = "cluster-proxy-agent-tunnel";

/** The proxy-server's agent upgrade door port the addon manager renders (the Service does not expose it). */
export const AGENT_UPGRADE_PORT = 8096;
