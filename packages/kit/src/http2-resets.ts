/**
 * nghttp2's own guard against rapid reset (CVE-2023-44487), as node sets it for every HTTP/2
 * server: a session that receives more RST_STREAM frames than a burst of 1,000, refilled at 33 a
 * second, is closed with GOAWAY INTERNAL_ERROR, failing every stream on it. It counts every
 * reset, also of streams whose answer began. For a session that carries many users' requests
 * (the gateway's one session per cluster at the agent's endpoint, the hub apiserver's connection
 * at the gateway's port) one user cancelling a thousand requests would cut everyone's: such a
 * server holds its peers to per-user bounds of its own instead and sets
 * {@link MULTIPLEXED_SESSION_RESETS}.
 * Design: docs/design/gateway.md#streams-a-caller-cancels
 */
declare module "http2" {
  interface SessionOptions {
    /** RST_STREAM frames a session may receive at once (nghttp2's default 1,000); needs `streamResetRate` too. */
    streamResetBurst?: number | undefined;
    /** How many of `streamResetBurst` come back each second (nghttp2's default 33). */
    streamResetRate?: number | undefined;
  }
}

/**
 * The allowance of an HTTP/2 server whose sessions each carry many users' requests: far above
 * what one peer cancels in normal work (a gateway replica relays a few thousand requests a
 * second), so only a runaway peer meets it.
 */
export const MULTIPLEXED_SESSION_RESETS = { streamResetBurst: 100_000, streamResetRate: 10_000 } as const;
