/**
 * Traffic through the server per cluster (`host` identifier): dials answered and failed, bytes each way,
 * connections open, since the server started; the fleet view of `cluster-proxy up` reads a snapshot.
 * Design: docs/design/fleet-view.md#traffic-counters-of-the-local-hub
 */
import { destHostKey } from "@cluster-proxy/protocol";

/** What went through the server to one `host` identifier (cluster) since the server started. */
export interface IdentifierTraffic {
  /** Dials the agent answered with a connection. */
  dials: number;
  /**
   * Dials that failed: no agent connected (counted when a dial names an identifier seen before),
   * the agent's error, no answer within --backend-dial-timeout, the agent went away first. A
   * client that gives up (or a shutdown) is not a failure of the cluster.
   */
  failedDials: number;
  /** Bytes of the DATA packets from clients to the agent (payload plus a few bytes of framing each). */
  bytesToAgent: number;
  /** Bytes of the DATA packets from the agent delivered to clients (payload plus a few bytes of framing each). */
  bytesFromAgent: number;
  /** Connections established through the identifier's agents and not closed yet. */
  openConnections: number;
}

/** Identifiers counted at most (the first ones seen; agents in `shared` identity mode name their own). */
export const MAX_TALLIED_IDENTIFIERS = 10_000;

/** See the module comment. */
export class TrafficTally {
  private readonly byIdentifier = new Map<string, IdentifierTraffic>();

  /** The counters of an agent stream's `host` identifiers (made when new, none beyond the cap). */
  forHosts(hosts: readonly string[]): IdentifierTraffic[] {
    const out: IdentifierTraffic[] = [];
    for (const host of new Set(hosts)) {
      if (host === "") continue;
      let t = this.byIdentifier.get(host);
      if (!t && this.byIdentifier.size < MAX_TALLIED_IDENTIFIERS) {
        t = { dials: 0, failedDials: 0, bytesToAgent: 0, bytesFromAgent: 0, openConnections: 0 };
        this.byIdentifier.set(host, t);
      }
      if (t) out.push(t);
    }
    return out;
  }

  /**
   * The counters a dial to `address` that found no agent fails against: its host's, else those of
   * the longest `<id>` of a `<host>.<id>` host (the destHost suffix rule); undefined when none
   * was seen.
   */
  forAddress(address: string): IdentifierTraffic | undefined {
    const id = this.identifierOf(address);
    return id === undefined ? undefined : this.byIdentifier.get(id);
  }

  /**
   * The identifier seen before (an agent's host: for our agents, its cluster's name) that
   * `address` is for: its host, else the longest `<id>` of a `<host>.<id>` host; undefined when
   * none was seen.
   */
  identifierOf(address: string): string | undefined {
    const key = destHostKey(address);
    if (this.byIdentifier.has(key)) return key;
    for (let dot = key.indexOf(".", 1); dot > 0; dot = key.indexOf(".", dot + 1)) {
      if (this.byIdentifier.has(key.slice(dot + 1))) return key.slice(dot + 1);
    }
    return undefined;
  }

  /** A copy of every identifier's counters. */
  snapshot(): Map<string, IdentifierTraffic> {
    const out = new Map<string, IdentifierTraffic>();
    for (const [id, t] of this.byIdentifier) out.set(id, { ...t });
    return out;
  }
}
