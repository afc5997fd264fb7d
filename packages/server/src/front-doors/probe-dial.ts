/**
 * A dial from inside the server, for a host that runs the server in its own process (`cluster-proxy
 * up`'s fleet view): routed by the relay to the cluster's agent like a client's dial, the agent
 * dials the endpoint and answers, and the connection is closed at once. The round trip measures
 * the tunnel and the agent's dial; no bytes flow. Probes are not counted in the per-cluster
 * traffic (cluster-traffic.ts), so a host's probes do not show as its users' requests.
 */
import type { FrontendEnd, PendingDial } from "../agents/backend.js";
import { randomDialId } from "../routing/payload-relay.js";
import type { Relay } from "../routing/relay.js";

/** What a probe found: the dial's round trip, or why it failed. */
export type DialProbeResult = { ok: true; ms: number } | { ok: false; reason: string };

/** Dial `address` through `relay` and close the connection once answered; never rejects. */
export function probeDial(relay: Relay, address: string, timeoutMs: number): Promise<DialProbeResult> {
  return new Promise<DialProbeResult>((resolve) => {
    const started = performance.now();
    let settled = false;
    const settle = (result: DialProbeResult): void => {
      if (settled) return;
      settled = true;
      relay.clock.clearTimeout(timer);
      resolve(result);
    };
    const end: FrontendEnd = {
      probe: true,
      dialSucceeded: (_random, conn) => {
        relay.frontendClosed(conn);
        settle({ ok: true, ms: performance.now() - started });
      },
      dialFailed: (_random, failure) => settle({ ok: false, reason: failure.text }),
      data: () => 0,
      delivered: () => 0,
      buffered: () => 0,
      pauseSource: () => undefined,
      stallClose: () => undefined,
      closed: () => undefined,
    };
    const timer = relay.clock.setTimeout(() => {
      if (dial) relay.cancelDial(dial);
      settle({ ok: false, reason: `no answer within ${timeoutMs} ms` });
    }, timeoutMs);
    const dial: PendingDial | undefined = relay.dial(end, { address, random: randomDialId() });
  });
}
