/**
 * The probe of `cluster-proxy health`: through the tunnel to a cluster's kube-apiserver, TLS
 * verified against the CA its ManagedCluster publishes, for the name every kube-apiserver
 * certificate carries (`kubernetes.default.svc`), then `GET /healthz` anonymously. No hub
 * credential goes to the managed cluster: no client certificate in that TLS session, no token.
 */
import https from "node:https";
import tls from "node:tls";
import type { Duplex } from "node:stream";
import { gatewayEndpointAddress } from "@cluster-proxy/api";
import { errorMessage } from "@cluster-proxy/errors";

/** The TLS name every kube-apiserver serving certificate is valid for. */
export const APISERVER_TLS_NAME = "kubernetes.default.svc";

/** Opens a tunnelled connection to `address` (e.g. `mc1:443`) or rejects. */
export type TunnelDialer = (address: string, signal: AbortSignal) => Promise<Duplex>;

/** Outcome of one probe. */
export interface ProbeOutcome {
  ok: boolean;
  latencyMs?: number;
  /** Why it failed, or a note when it succeeded without a 200 (e.g. anonymous access disabled). */
  reason: string;
}

/**
 * Probe `cluster`'s kube-apiserver at `path` through `dial`, within `timeoutMs`. A 200 is
 * healthy; 401/403 is healthy too (the apiserver answered over verified TLS but does not serve
 * anonymous health checks); anything else, or no answer in time, is not. Never rejects.
 */
export async function probeApiserver(
  dial: TunnelDialer,
  cluster: string,
  ca: Buffer,
  path: string,
  timeoutMs: number,
): Promise<ProbeOutcome> {
  const started = performance.now();
  const signal = AbortSignal.timeout(timeoutMs);
  let socket: Duplex | undefined;
  try {
    socket = await dial(`${cluster}:443`, signal);
    const tunnel = socket;
    const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = https.get(
        {
          host: APISERVER_TLS_NAME,
          path,
          signal,
          headers: { "user-agent": "cluster-proxy-health", accept: "text/plain" },
          createConnection: () => tls.connect({ socket: tunnel, servername: APISERVER_TLS_NAME, ca }),
        },
        (res) => {
          let text = "";
          res.setEncoding("utf8");
          res.on("data", (d: string) => (text = (text + d).slice(0, 2000)));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
          res.on("error", reject);
        },
      );
      req.on("error", reject);
    });
    const latencyMs = performance.now() - started;
    if (status === 200) return { ok: true, latencyMs, reason: "" };
    if (status === 401 || status === 403)
      return { ok: true, latencyMs, reason: `${path} answered ${status} to an anonymous request (TLS verified)` };
    return { ok: false, reason: `${path} answered ${status}: ${body.trim().split("\n").slice(-3).join(" ")}` };
  } catch (err) {
    const e = err as Error;
    const text = signal.aborted ? `no answer within ${timeoutMs / 1000}s` : e.message;
    return { ok: false, reason: `probe through the tunnel: ${text}` };
  } finally {
    socket?.destroy();
  }
}

/**
 * Probe `cluster`'s agent gateway endpoint through `dial`: a TLS handshake with no client
 * certificate, the agent's certificate verified against the agent CA bundle `agentCa` and checked
 * for the cluster's URI SAN. It shows that the tunnel reaches the agent, the endpoint is enabled
 * (the agent has the gateway CA) and it presents the cluster's certificate; the endpoint then
 * refuses the session (no gateway certificate), so nothing is sent and no hub credential is
 * offered. With TLS 1.3 the server's certificate is verified before it can refuse. Never rejects.
 */
export async function probeGatewayEndpoint(
  dial: TunnelDialer,
  cluster: string,
  agentCa: Buffer,
  timeoutMs: number,
): Promise<ProbeOutcome> {
  const started = performance.now();
  const signal = AbortSignal.timeout(timeoutMs);
  let socket: Duplex | undefined;
  let session: tls.TLSSocket | undefined;
  try {
    const { agentClusterUri } = await import("@cluster-proxy/pki");
    socket = await dial(gatewayEndpointAddress(cluster), signal);
    const tunnel = socket;
    await new Promise<void>((resolve, reject) => {
      const s = tls.connect({
        socket: tunnel,
        ca: agentCa,
        minVersion: "TLSv1.3",
        checkServerIdentity: (_host, cert) => {
          const uris = (cert.subjectaltname ?? "").split(", ").filter((n) => n.startsWith("URI:"));
          return uris.includes(`URI:${agentClusterUri(cluster)}`)
            ? undefined
            : new Error(`the endpoint's certificate is not ${cluster}'s (${uris.join(", ") || "no URI SAN"})`);
        },
      });
      session = s;
      const onAbort = (): void => void s.destroy(new Error("aborted"));
      signal.addEventListener("abort", onAbort, { once: true });
      s.once("secureConnect", () => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      });
      s.once("error", (err: Error) => {
        signal.removeEventListener("abort", onAbort);
        reject(err);
      });
    });
    return { ok: true, latencyMs: performance.now() - started, reason: "" };
  } catch (err) {
    const text = signal.aborted ? `no answer within ${timeoutMs / 1000}s` : errorMessage(err);
    return { ok: false, reason: `gateway endpoint: ${text}` };
  } finally {
    session?.destroy();
    socket?.destroy();
  }
}

/** Run `fn` over `items` with at most `limit` at a time, keeping the order of results. */
export async function mapLimited<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < items.length; i = next++) results[i] = await fn(items[i]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}
