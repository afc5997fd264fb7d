/**
 * The agent service: `/AgentService/Connect` streams from proxy-agents. Validates the metadata
 * as the Go server does (errors end the call with UNKNOWN and the message), flushes the
 * `serverid` / `servercount` response headers at once (Go agents block on them), registers the
 * stream in every strategy and relays its packets until it ends. With `--agent-identity=certificate`
 * an agent whose identifiers its certificate does not grant is refused with PERMISSION_DENIED
 * (see agent-identity.ts), logged once at warn and counted.
 */
import { DEFAULT_AGENT_IDENTITY_NAMESPACE, type AgentIdentityMode } from "@cluster-proxy/api";
import { FLOW_CONTROL_METADATA, IdentifiersError, Metadata, parseAgentIdentifiers } from "@cluster-proxy/protocol";
import { GrpcStatus, type ServerCall } from "@cluster-proxy/tunnel";
import { type Logger } from "@cluster-proxy/kit";
import { verifyAgentIdentity } from "./agent-identity.js";
import { Backend } from "./backend.js";
import type { Relay } from "../routing/relay.js";
import type { ServerMetrics } from "../metrics.js";
import { errorMessage } from "@cluster-proxy/errors";

export interface AgentServiceOptions {
  serverId: string;
  serverCount: number;
  relay: Relay;
  metrics: ServerMetrics;
  logger: Logger;
  /** `--agent-identity` (default `certificate`). */
  agentIdentity?: AgentIdentityMode;
  /** `--agent-identity-namespaces` (default: the cluster-proxy addon namespace). */
  agentIdentityNamespaces?: readonly string[];
  /**
   * ServiceAccount token authentication: called with the call's `authorization` values; resolves
   * with the username or rejects with the text the agent is told (token-review.ts).
   */
  authenticate?: (authorization: string[]) => Promise<string>;
}

/** Validate an agent's metadata; returns the error text the Go server would send, or the identity. */
export function agentIdentity(
  call: Pick<ServerCall, "metadataValues">,
): { error: string } | { agentId: string; identifiers: ReturnType<typeof parseAgentIdentifiers> } {
  const ids = call.metadataValues(Metadata.agentID);
  if (ids.length !== 1 || ids[0] === "") {
    return { error: `expected one agent ID in the "${Metadata.agentID}" metadata, got ${ids.length}` };
  }
  const idValues = call.metadataValues(Metadata.agentIdentifiers);
  if (idValues.length > 1) {
    return { error: `expected at most one "${Metadata.agentIdentifiers}" value, got ${idValues.length}` };
  }
  try {
    return { agentId: ids[0] ?? "", identifiers: parseAgentIdentifiers(idValues[0] ?? "") };
  } catch (err) {
    if (err instanceof IdentifiersError) return { error: `fail to parse url encoded string: ${err.message}` };
    throw err;
  }
}

/** Serve one Connect call. */
export function handleAgentCall(call: ServerCall, options: AgentServiceOptions): void {
  const tls = call.tlsSocket;
  const { authenticate } = options;
  if (authenticate) {
    // Token authentication: no client certificate is asked for. Packets that arrive before the
    // review answers wait in the call (it is paused until then).
    call.pause();
    authenticate(call.metadataValues(Metadata.authorization)).then(
      (username) => {
        if (call.closed) return;
        call.resume();
        acceptAgentCall(call, options, username);
      },
      (err: unknown) => {
        const message = errorMessage(err);
        options.metrics.agentAuthFailures.inc();
        options.logger.warn(
          { agentID: call.metadataValues(Metadata.agentID)[0], error: message },
          "Client authentication failed",
        );
        if (!call.closed) call.finish({ code: GrpcStatus.UNAUTHENTICATED, details: message });
      },
    );
    return;
  }
  if (tls && !tls.authorized) {
    call.finish({ code: GrpcStatus.UNAUTHENTICATED, details: "agent certificate not verified" });
    return;
  }
  acceptAgentCall(call, options);
}

function acceptAgentCall(call: ServerCall, options: AgentServiceOptions, username?: string): void {
  const { relay, metrics } = options;
  const tls = call.tlsSocket;
  const identity = agentIdentity(call);
  if ("error" in identity) {
    options.logger.warn({ error: identity.error }, "refusing agent stream");
    call.finish({ code: GrpcStatus.UNKNOWN, details: identity.error });
    return;
  }
  const mode = options.agentIdentity ?? "certificate";
  const { granted, refusal } = verifyAgentIdentity(
    mode,
    identity.identifiers,
    mode === "certificate" ? tls?.getPeerX509Certificate() : undefined,
    options.agentIdentityNamespaces ?? [DEFAULT_AGENT_IDENTITY_NAMESPACE],
  );
  if (refusal) {
    metrics.agentIdentityRefusals.inc({ reason: refusal.reason });
    options.logger.warn(
      { agentID: identity.agentId, identifier: refusal.identifier, granted, reason: refusal.reason },
      "refusing agent: identifiers not granted by its certificate",
    );
    call.finish({ code: GrpcStatus.PERMISSION_DENIED, details: refusal.message });
    return;
  }
  call.sendHeaders({
    [Metadata.serverID]: options.serverId,
    [Metadata.serverCount]: String(options.serverCount),
    [FLOW_CONTROL_METADATA]: "1",
  });
  const backend = new Backend(identity.agentId, identity.identifiers, call);
  // Only an agent that announced it gets FLOW_PAUSE / FLOW_RESUME (Go agents never do).
  backend.ignoresFlowControl = call.metadataValues(FLOW_CONTROL_METADATA)[0] !== "1";
  const log = options.logger.child({ agentID: identity.agentId, stream: backend.serial });
  metrics.grpcStreamOpened("Connect");
  relay.addBackend(backend);
  log.info(
    {
      identifiers: identity.identifiers,
      ...(mode === "certificate" ? { granted } : {}),
      ...(username ? { username } : {}),
    },
    "agent connected",
  );
  call.on("message", (frame) => relay.fromAgent(backend, frame));
  call.on("halfClose", () => call.finish({ code: GrpcStatus.OK, details: "" }));
  call.on("close", (status) => {
    metrics.grpcStreamClosed("Connect");
    // Go counts a failed Recv on the agent stream (not a clean end) as stream_errors_total.
    if (status.code !== GrpcStatus.OK) metrics.streamErrorNoPacket("from_agent", status.code);
    if (call.overflowed) {
      metrics.streamCut("Connect");
      log.warn({ details: status.details }, "agent stream cut: the agent does not read");
    }
    relay.removeBackend(backend, status.details || `stream ended with status ${status.code}`);
    log.info({ code: status.code, details: status.details }, "agent disconnected");
  });
}
