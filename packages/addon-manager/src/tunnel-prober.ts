/**
 * The probes behind each ManagedClusterAddOn's `Available`: a tunnel to `<cluster>:443` through every
 * ready proxy-server replica; only changes of the pass/fail picture reach the reconciler.
 * Design: docs/design/addon-manager.md#health-available-from-tunnel-probes-through-the-proxy-server-replicas
 */
import { performance } from "node:perf_hooks";
import tls from "node:tls";
import {
  CONNECT_DOOR_PORT,
  SERVER_CA_SECRET,
  type ManagedProxyConfiguration,
  type ReplicaProbe,
} from "@cluster-proxy/api";
import { unb64, type SecretObject } from "./certificate-authority.js";
import { typedResource, type KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "./resources.js";
import { serverPodLabels } from "./render-proxy-server.js";
import { realClock, type Clock, type Logger } from "@cluster-proxy/kit";
import { errorMessage } from "@cluster-proxy/errors";

/** One proxy-server replica to probe through. */
export interface ProxyServerReplica {
  /** Pod name. */
  name: string;
  /** Pod IP. */
  address: string;
}

/** What a probe presents and verifies at a replica's CONNECT door. */
export interface ProbeCredentials {
  port: number;
  /** The proxy-servers' serving CA (PEM). */
  ca: string;
  /** A proxy-client certificate and key (PEM). */
  cert: string;
  key: string;
  /** A name in the serving certificate. */
  servername: string;
}

/** The replicas of one configuration, or why they cannot be probed yet. */
export type ReplicaSet =
  { replicas: ProxyServerReplica[]; credentials: ProbeCredentials } | { error: string; replicas?: undefined };

export type ProbeFn = (
  replica: ProxyServerReplica,
  cluster: string,
  credentials: ProbeCredentials,
  timeoutMs: number,
) => Promise<ReplicaProbe>;

export interface TunnelProberOptions {
  intervalMs: number;
  timeoutMs: number;
  /** Probes in flight at once. */
  concurrency?: number;
  /** The ready replicas of configuration `name` and the credentials to probe them. */
  replicas(configuration: string): Promise<ReplicaSet>;
  /** Called with a cluster whose pass/fail picture changed. */
  onChange(cluster: string): void;
  /** Injected in unit tests; {@link probeThroughReplica} on the prober's clock otherwise. */
  probe?: ProbeFn;
}

/** The last round in which a cluster's tunnel worked through at least one replica. */
export interface LastPass {
  /** When (the prober's clock, {@link TunnelProber.now}). */
  at: number;
  /** The replicas probed in that round (pod names, sorted). */
  replicas: string[];
}

/**
 * A cluster's probe results: per replica (with the last round that passed, to tell a fleet of
 * proxy-servers being replaced from a tunnel that broke), or why there are none.
 */
export type ClusterProbes =
  { probes: ReplicaProbe[]; lastPass?: LastPass } | { error: string; probes?: undefined; lastPass?: undefined };

export class TunnelProber {
  private readonly tracked = new Map<string, string>();
  private readonly results = new Map<string, ClusterProbes>();

  constructor(
    private readonly options: TunnelProberOptions,
    private readonly log: Logger,
    /** The rounds' interval and {@link LastPass.at}. */
    private readonly clock: Clock = realClock,
  ) {}

  /** Probe `cluster`'s tunnel through the replicas of `configuration` from now on. */
  track(cluster: string, configuration: string): void {
    if (this.tracked.get(cluster) === configuration) return;
    this.tracked.set(cluster, configuration);
    this.results.delete(cluster);
  }

  untrack(cluster: string): void {
    this.tracked.delete(cluster);
    this.results.delete(cluster);
  }

  /** The clock of {@link LastPass.at}. */
  now(): number {
    return this.clock.now();
  }

  /** The last picture of `cluster` (undefined: not probed yet). */
  result(cluster: string): ClusterProbes | undefined {
    return this.results.get(cluster);
  }

  /** Probe every tracked cluster every interval until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      const started = this.clock.now();
      try {
        await this.tick();
      } catch (err) {
        this.log.warn({ err: errorMessage(err) }, "tunnel probe round failed");
      }
      await this.wait(Math.max(0, this.options.intervalMs - (this.clock.now() - started)), signal);
    }
  }

  /** Resolves after `ms` on the prober's clock, or at once when `signal` aborts. */
  private wait(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal.aborted) return resolve();
      const done = (): void => {
        this.clock.clearTimeout(timer);
        signal.removeEventListener("abort", done);
        resolve();
      };
      const timer = this.clock.setTimeout(done, ms);
      signal.addEventListener("abort", done, { once: true });
    });
  }

  /** One round: every tracked cluster through every replica of its configuration. */
  async tick(): Promise<void> {
    const byConfiguration = new Map<string, string[]>();
    for (const [cluster, configuration] of this.tracked)
      byConfiguration.set(configuration, [...(byConfiguration.get(configuration) ?? []), cluster]);
    const jobs: (() => Promise<void>)[] = [];
    const next = new Map<string, ClusterProbes>();
    for (const [configuration, clusters] of byConfiguration) {
      const set = await this.options.replicas(configuration);
      if (set.replicas === undefined) {
        for (const c of clusters) next.set(c, { error: set.error });
        continue;
      }
      for (const cluster of clusters) {
        const probes: ReplicaProbe[] = [];
        next.set(cluster, { probes });
        for (const replica of set.replicas)
          jobs.push(async () => {
            probes.push(await this.probeConfirmed(replica, cluster, set.credentials));
          });
      }
    }
    await runLimited(jobs, this.options.concurrency ?? 64);
    const now = this.clock.now();
    for (const [cluster, picture] of next) {
      if (!this.tracked.has(cluster)) continue;
      const before = this.results.get(cluster);
      if (picture.probes !== undefined) {
        picture.probes.sort((a, b) => a.server.localeCompare(b.server));
        if (picture.probes.some((p) => p.ok))
          picture.lastPass = { at: now, replicas: picture.probes.map((p) => p.server) };
        else if (before?.lastPass) picture.lastPass = before.lastPass;
      }
      this.results.set(cluster, picture);
      if (signature(before) !== signature(picture)) this.options.onChange(cluster);
    }
  }

  /** A failure of a replica that passed last time is confirmed by a second probe at once. */
  private async probeConfirmed(
    replica: ProxyServerReplica,
    cluster: string,
    credentials: ProbeCredentials,
  ): Promise<ReplicaProbe> {
    const probe: ProbeFn =
      this.options.probe ?? ((r, c, creds, timeoutMs) => probeThroughReplica(r, c, creds, timeoutMs, this.clock));
    const first = await probe(replica, cluster, credentials, this.options.timeoutMs);
    if (first.ok) return first;
    const previous = this.results.get(cluster)?.probes?.find((p) => p.server === replica.name);
    if (!previous?.ok) return first;
    return probe(replica, cluster, credentials, this.options.timeoutMs);
  }
}

function signature(picture: ClusterProbes | undefined): string {
  if (!picture) return "";
  if (picture.probes === undefined) return `error:${picture.error}`;
  return picture.probes.map((p) => `${p.server}@${p.address}=${p.ok ? "ok" : (p.error ?? "failed")}`).join(",");
}

async function runLimited(jobs: (() => Promise<void>)[], limit: number): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < jobs.length) await jobs[next++]!();
  };
  await Promise.all(Array.from({ length: Math.min(limit, jobs.length) }, worker));
}

/**
 * One probe: mTLS to the replica's CONNECT door, `CONNECT <cluster>:443`, and the answer's status
 * line. 200 passes (the tunnel is closed at once); otherwise the error is the server's own text
 * (e.g. "no agent available"), the TLS or socket error, or the timeout (on `clock`).
 */
export function probeThroughReplica(
  replica: ProxyServerReplica,
  cluster: string,
  credentials: ProbeCredentials,
  timeoutMs: number,
  clock: Clock = realClock,
): Promise<ReplicaProbe> {
  const started = performance.now();
  const base = { server: replica.name, address: replica.address };
  return new Promise((resolve) => {
    let received = "";
    let settled = false;
    const socket = tls.connect({
      host: replica.address,
      port: credentials.port,
      ca: credentials.ca,
      cert: credentials.cert,
      key: credentials.key,
      servername: credentials.servername,
    });
    const finish = (result: ReplicaProbe): void => {
      if (settled) return;
      settled = true;
      clock.clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    const fail = (error: string): void => finish({ ...base, ok: false, error });
    const timer = clock.setTimeout(
      () =>
        fail(
          received
            ? `answered "${firstLine(received)}" but did not finish within ${timeoutMs} ms`
            : `no answer within ${timeoutMs} ms (agent unreachable from this proxy-server?)`,
        ),
      timeoutMs,
    );
    socket.once("secureConnect", () =>
      socket.write(
        `CONNECT ${cluster}:443 HTTP/1.1\r\nHost: ${cluster}:443\r\nUser-Agent: cluster-proxy-addon-manager\r\n\r\n`,
      ),
    );
    socket.setEncoding("latin1");
    socket.on("data", (chunk: string) => {
      received += chunk;
      const end = received.indexOf("\r\n\r\n");
      if (end < 0) {
        if (received.length > 16_384) fail("oversized answer to CONNECT");
        return;
      }
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(received);
      if (status?.[1] === "200")
        finish({ ...base, ok: true, latencyMs: Math.round((performance.now() - started) * 10) / 10 });
      // Otherwise wait for the body (the server closes after it).
    });
    const onEnd = (): void => fail(refusal(received));
    socket.on("end", onEnd);
    socket.on("close", onEnd);
    socket.on("error", (err: NodeJS.ErrnoException) => fail(err.code ? `${err.code}: ${err.message}` : err.message));
  });
}

/** Why a CONNECT answered by `received` (all of it, the connection closed) did not pass. */
function refusal(received: string): string {
  if (!received) return "connection closed without an answer";
  const end = received.indexOf("\r\n\r\n");
  const body = end >= 0 ? received.slice(end + 4).trim() : "";
  return `${firstLine(received).replace(/^HTTP\/1\.[01] /, "")}${body ? `: ${firstLine(body)}` : ""}`;
}

function firstLine(text: string): string {
  return text.split(/\r?\n/, 1)[0]!.slice(0, 200);
}

interface PodObject extends KubeObject {
  status?: { podIP?: string; phase?: string; conditions?: { type: string; status: string }[] };
}
/** Pods, typed as the prober reads them. */
const PodResource = typedResource<PodObject>(Resources.pod);

/**
 * The {@link TunnelProberOptions.replicas} of a manager: the ready proxy-server pods of a
 * configuration (listed each round: one request per configuration) and its proxy-client
 * certificate and serving CA (read again every `credentialTtlMs` on `clock`, so rotations are
 * followed). `configuration` gives it with the schema's defaults filled in.
 */
export function replicaFinder(
  api: KubeApi,
  configuration: (name: string) => ManagedProxyConfiguration | undefined,
  credentialTtlMs = 30_000,
  clock: Clock = realClock,
): (name: string) => Promise<ReplicaSet> {
  const cached = new Map<string, { at: number; credentials: ProbeCredentials }>();
  return async (name) => {
    const mpc = configuration(name);
    if (!mpc) return { error: `ManagedProxyConfiguration ${name} does not exist` };
    const spec = mpc.spec;
    const ns = spec.proxyServer.namespace;
    let credentials = cached.get(name);
    if (!credentials || clock.now() - credentials.at > credentialTtlMs) {
      const secretName = spec.authentication.dump.secrets.signingProxyClientSecretName;
      const [client, serving] = await Promise.all([
        api.tryGet<SecretObject>(Resources.secret, secretName, ns),
        api.tryGet<SecretObject>(Resources.secret, SERVER_CA_SECRET, ns),
      ]);
      const cert = unb64(client?.data?.["tls.crt"]);
      const key = unb64(client?.data?.["tls.key"]);
      const ca = unb64(serving?.data?.["ca.crt"]);
      if (!cert || !key)
        return { error: `Secret ${ns}/${secretName} (the proxy-client certificate) is not issued yet` };
      if (!ca) return { error: `Secret ${ns}/${SERVER_CA_SECRET} (the proxy-servers' CA) does not exist yet` };
      const svc = spec.proxyServer.inClusterServiceName;
      credentials = {
        at: clock.now(),
        credentials: { port: CONNECT_DOOR_PORT, ca, cert, key, servername: `${svc}.${ns}.svc` },
      };
      cached.set(name, credentials);
    }
    const selector = Object.entries(serverPodLabels(name))
      .map(([k, v]) => `${k}=${v}`)
      .join(",");
    const pods = await api.list(PodResource, { namespace: ns, labelSelector: selector });
    const replicas = pods.items
      .filter(
        (p) =>
          !p.metadata.deletionTimestamp &&
          p.status?.podIP &&
          p.status.conditions?.some((c) => c.type === "Ready" && c.status === "True"),
      )
      .map((p) => ({ name: p.metadata.name, address: p.status!.podIP! }));
    return { replicas, credentials: credentials.credentials };
  };
}
