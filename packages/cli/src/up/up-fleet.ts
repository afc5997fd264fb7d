/**
 * The fleet view of `cluster-proxy up`: a {@link FleetModel} fed from what `up` runs in its own process,
 * one row per demo cluster.
 * Design: docs/design/fleet-view.md#the-local-hubs-rows
 */
import { X509Certificate } from "node:crypto";
import { readFile } from "node:fs/promises";
import { FleetModel, type RowReport, type TrafficDelta } from "@cluster-proxy/fleet";
import type { ProxyServer } from "@cluster-proxy/server";
import { type Clock } from "@cluster-proxy/kit";
import { errorMessage } from "@cluster-proxy/errors";

/** What up-fleet reads of the in-process proxy-server. */
export type UpFleetServer = Pick<ProxyServer, "serverId" | "agentsByIdentifier" | "trafficByIdentifier" | "probe">;

/** A demo cluster: its name and its agent's certificate file. */
export interface UpFleetCluster {
  name: string;
  agentCertFile: string;
}

/** Options of {@link UpFleet}. */
export interface UpFleetOptions {
  server: UpFleetServer;
  clusters: readonly UpFleetCluster[];
  /** The port the probe dials on each cluster (`<cluster>:<port>`; default 80, the sample service). */
  probePort?: number;
  /** Time between the end of one probe of a cluster and the start of the next (default 2 s). */
  probeEveryMs?: number;
  /** A probe without an answer by then failed (default 1.5 s). */
  probeTimeoutMs?: number;
  /** Interval of reading agents and traffic (default 500 ms). */
  pollMs?: number;
  /** The model's clock (tests; default the kit's `realClock`). */
  clock?: Clock;
}

type Probe = { ok: true; ms: number } | { ok: false; reason: string };

interface Tracked {
  name: string;
  certFile: string;
  agentCertExpiry: string | null;
  agents: number;
  probe: Probe | undefined;
  probing: boolean;
  /** The next probe's timer (none while probing). */
  next: NodeJS.Timeout | undefined;
  /** The counters read last: requests, errors, bytes in, bytes out. */
  seen: [number, number, number, number];
}

/** See the module comment. */
export class UpFleet {
  readonly model: FleetModel;
  private readonly clusters: Tracked[];
  private readonly probeEveryMs: number;
  private readonly probeTimeoutMs: number;
  private readonly probePort: number;
  private readonly pollMs: number;
  private poller: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly options: UpFleetOptions) {
    this.model = new FleetModel(options.clock ? { clock: options.clock } : {});
    this.probeEveryMs = options.probeEveryMs ?? 2_000;
    this.probeTimeoutMs = options.probeTimeoutMs ?? 1_500;
    this.probePort = options.probePort ?? 80;
    this.pollMs = options.pollMs ?? 500;
    this.clusters = options.clusters.map((c) => ({
      name: c.name,
      certFile: c.agentCertFile,
      agentCertExpiry: null,
      agents: 0,
      probe: undefined,
      probing: false,
      next: undefined,
      seen: [0, 0, 0, 0],
    }));
  }

  /** Read the certificates, fill the rows and start probing and reading the server. */
  async start(): Promise<void> {
    await Promise.all(
      this.clusters.map(async (c) => {
        c.agentCertExpiry = await certificateExpiry(c.certFile);
      }),
    );
    if (this.closed) return;
    this.poll();
    this.poller = setInterval(() => this.poll(), this.pollMs);
    this.poller.unref();
    for (const c of this.clusters) this.probeNow(c);
  }

  /** Stop probing and reading (the model keeps its last state). */
  close(): void {
    this.closed = true;
    clearInterval(this.poller);
    for (const c of this.clusters) clearTimeout(c.next);
  }

  /** Read agents and traffic of every cluster; update rows, traffic and open streams. */
  poll(): void {
    if (this.closed) return;
    const { server } = this.options;
    const agents = server.agentsByIdentifier();
    const traffic = server.trafficByIdentifier();
    for (const c of this.clusters) {
      const before = c.agents;
      c.agents = agents.get(c.name) ?? 0;
      // Agents gone: the last answer says nothing of the next agent's tunnel.
      if (c.agents === 0 && !c.probing) c.probe = undefined;
      // Agents back: probe now rather than at the next tick, so the row turns available at once.
      if (before === 0 && c.agents > 0 && !c.probing) this.probeNow(c);
      this.report(c);
      const t = traffic.get(c.name);
      if (!t) continue;
      const now: Tracked["seen"] = [t.dials + t.failedDials, t.failedDials, t.bytesToAgent, t.bytesFromAgent];
      const [requests, errors, bytesIn, bytesOut] = now.map((v, i) => counterDelta(c.seen[i] ?? 0, v));
      c.seen = now;
      const delta: TrafficDelta = { requests, errors, bytesIn, bytesOut };
      if (requests || errors || bytesIn || bytesOut) this.model.recordTraffic(c.name, delta);
      this.model.setOpenStreams(c.name, t.openConnections);
    }
  }

  private report(c: Tracked): void {
    const { server } = this.options;
    let available: RowReport["available"];
    let reason = "";
    if (c.agents === 0) {
      available = "False";
      reason = "no agent connected to the proxy-server";
    } else if (!c.probe) {
      available = "Unknown";
      reason = "not probed yet";
    } else if (!c.probe.ok) {
      available = "False";
      reason = `the probe through the hub failed: ${c.probe.reason}`;
    } else available = "True";
    this.model.setRow({
      cluster: c.name,
      installed: true,
      available,
      latencyMs: c.probe?.ok ? Math.round(c.probe.ms * 10) / 10 : null,
      agentsByServer: c.agents > 0 ? { [server.serverId]: c.agents } : {},
      serversExpected: 1,
      agentCertExpiry: c.agentCertExpiry,
      reason,
    });
  }

  /** Probe `c` now (unless a probe of it runs), then again {@link UpFleetOptions.probeEveryMs} after it ends. */
  private probeNow(c: Tracked): void {
    if (this.closed || c.probing) return;
    clearTimeout(c.next);
    c.next = undefined;
    c.probing = true;
    const probing: Promise<Probe> = this.options.server
      .probe(`${c.name}:${this.probePort}`, this.probeTimeoutMs)
      .catch((err: unknown) => ({ ok: false, reason: errorMessage(err) }));
    void probing.then((result) => {
      c.probing = false;
      if (this.closed) return;
      c.probe = c.agents === 0 ? undefined : result;
      this.report(c);
      c.next = setTimeout(() => this.probeNow(c), this.probeEveryMs);
      c.next.unref();
    });
  }
}

/** What a counter added since it read `before` (all of it when it went down: it restarted). */
function counterDelta(before: number, now: number): number {
  return now >= before ? now - before : now;
}

/** The expiry of the certificate in `file` (ISO 8601), or null when it cannot be read. */
async function certificateExpiry(file: string): Promise<string | null> {
  try {
    return new Date(new X509Certificate(await readFile(file)).validTo).toISOString();
  } catch {
    return null;
  }
}
