/**
 * nghttp2's own guard against rapid reset, as node sets it for every HTTP/2 server (a session that
 * receives more than ~1,000 RST_STREAMs is closed, failing every stream on it), and the allowance
 * of a server whose sessions each carry many users' requests ({@link MULTIPLEXED_SESSION_RESETS}).
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
