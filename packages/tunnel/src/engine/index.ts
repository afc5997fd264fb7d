/**
 * The connection engine shared by the server's relay and the agent's tunnels: the connection
 * table of a stream, per-connection budgets with FLOW_PAUSE / FLOW_RESUME and stall detection,
 * holding the shared stream for a peer that ignores FLOW_PAUSE, and fair turns for connections
 * reading into a backed-up stream. The ends keep routing, dialing, identity and metrics.
 */
export * from "./connection-table.js";
export * from "./shared-stream.js";
export * from "./connection-flow.js";
export * from "./turn-scheduler.js";
