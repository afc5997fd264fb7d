/**
 * kubectl's two client protocols for exec, attach and port-forward, and what the suites that run
 * them through the test environment tolerate of the older one.
 */

/** kubectl's client protocol: WebSocket (its default) or SPDY (the fallback switches). */
export const KUBECTL_STREAMING_MODES = {
  websocket: {},
  spdy: { KUBECTL_REMOTE_COMMAND_WEBSOCKETS: "false", KUBECTL_PORT_FORWARD_WEBSOCKETS: "false" },
} as const;
export type KubectlStreamingMode = keyof typeof KUBECTL_STREAMING_MODES;

/** Attempts in all of an exec over SPDY that lost its output. */
const SPDY_ATTEMPTS = 3;

/**
 * Runs a short `kubectl exec -i` in `mode` (a key of {@link KUBECTL_STREAMING_MODES}) and returns
 * the first run that is `complete`. Over SPDY, kubectl's client can end with exit 0 before the
 * output of a command that exits at once has arrived (kubernetes/kubernetes#124571 and #73056;
 * the kubelet's and the apiserver's side are upstream code, and kubectl's WebSocket default does
 * not do it): over SPDY only, a run that lost its output that way is reported through `report`
 * and tried again, at most 3 times in all. Anything else (a non-zero exit, wrong output) is
 * returned as it is, for the caller to assert on.
 */
export async function execTolerantOfSpdyLoss<R extends { code: number | null; stdout: string; stderr: string }>(
  mode: string,
  run: () => Promise<R>,
  complete: (r: R) => boolean,
  report: (message: string) => void,
): Promise<R> {
  for (let attempt = 1; ; attempt++) {
    const r = await run();
    const lost = mode === "spdy" && r.code === 0 && !complete(r);
    if (!lost || attempt >= SPDY_ATTEMPTS) return r;
    report(
      `kubectl exec over SPDY exited 0 with its output lost (attempt ${attempt} of ${SPDY_ATTEMPTS}; kubernetes/kubernetes#124571): stdout ${JSON.stringify(r.stdout)}, stderr ${JSON.stringify(r.stderr)}`,
    );
  }
}
