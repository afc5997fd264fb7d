/**
 * The fleet view's latency probe of a cluster's agent gateway endpoint: a tunnel dial of
 * `gateway.cluster-proxy.invalid.<cluster>:443` and a mutual TLS handshake with the gateway
 * identity, the endpoint's certificate verified against the agent CA and checked for the cluster
 * (as every relayed request is, `cluster-pool.ts`). Nothing is sent after the handshake: the
 * session is closed cleanly. The round trip is the dial and the handshake; the agent
 * certificate's expiry comes with it.
 */
import * as tls from "node:tls";
import { GATEWAY_ENDPOINT_HOST, gatewayEndpointAddress } from "@cluster-proxy/api";
import { endpointIdentityProblem, type Dialer, type EndpointTls } from "./cluster-pool.js";
import { errorMessage } from "@cluster-proxy/errors";

/** What one probe found. */
export interface EndpointProbe {
  ok: boolean;
  /** Dial and handshake, ms (when ok). */
  latencyMs?: number;
  /** The agent certificate's expiry, ISO 8601 (when ok). */
  certificateExpiry?: string;
  /** Why it failed (empty when ok). */
  reason: string;
}

/** Probe `cluster`'s endpoint through `dial` with `material`, within `timeoutMs`. Never rejects. */
export async function probeEndpoint(
  dial: Dialer,
  cluster: string,
  material: EndpointTls,
  timeoutMs: number,
): Promise<EndpointProbe> {
  const started = performance.now();
  const signal = AbortSignal.timeout(timeoutMs);
  let session: tls.TLSSocket | undefined;
  let socket: Awaited<ReturnType<Dialer>> | undefined;
  try {
    socket = await dial(gatewayEndpointAddress(cluster), signal);
    const tunnel = socket;
    const { latencyMs, cert } = await new Promise<{ latencyMs: number; cert: string | undefined }>(
      (resolve, reject) => {
        const s = tls.connect({
          socket: tunnel,
          cert: material.cert,
          key: material.key,
          ca: material.ca,
          servername: GATEWAY_ENDPOINT_HOST,
          checkServerIdentity: (_host, peer) => endpointIdentityProblem(cluster, peer),
        });
        session = s;
        let done: { latencyMs: number; cert: string | undefined } | undefined;
        const onAbort = (): void => {
          if (done) resolve(done);
          else s.destroy(new Error(`no handshake within ${timeoutMs} ms`));
        };
        signal.addEventListener("abort", onAbort, { once: true });
        s.once("secureConnect", () => {
          const validTo = s.getPeerX509Certificate()?.validTo;
          done = {
            latencyMs: Math.round((performance.now() - started) * 10) / 10,
            cert: validTo ? new Date(validTo).toISOString() : undefined,
          };
          // Close the session cleanly: the endpoint finishes its side of the handshake (our
          // certificate) and sees an orderly end, not a handshake cut short.
          s.end();
        });
        s.once("close", () => {
          signal.removeEventListener("abort", onAbort);
          if (done) resolve(done);
        });
        s.once("error", (err: Error) => {
          signal.removeEventListener("abort", onAbort);
          if (done) resolve(done);
          else reject(err);
        });
      },
    );
    return { ok: true, latencyMs, ...(cert ? { certificateExpiry: cert } : {}), reason: "" };
  } catch (err) {
    const text = signal.aborted ? `no answer within ${timeoutMs} ms` : errorMessage(err);
    return { ok: false, reason: `gateway endpoint: ${text}` };
  } finally {
    session?.destroy();
    socket?.destroy();
  }
}
