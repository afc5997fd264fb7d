/**
 * Where the connect loop's tunnels go: the {@link ServerTargets} strategy, and its load-balanced
 * implementation (one address, the server count learned from the servers).
 * Design: docs/design/protocol.md#23-server-count-and-ha-behind-a-load-balancer
 */
import type { Socket } from "node:net";

/** One tunnel's destination, picked by {@link ServerTargets.pick}. */
export interface ServerTarget {
  /** The proxy-server pod (PortForward), for the logs and the tunnel's bookkeeping. */
  pod?: string;
  /** Opens the byte stream the tunnel's TLS runs over; absent: dial the address. */
  open?: (signal: AbortSignal) => Promise<Socket>;
}

/** A tunnel the agent holds, as the targets see it. */
export interface HeldTunnel {
  /** The server said it is leaving (GOAWAY): another one is wanted in its place. */
  readonly serverLeaving: boolean;
}

/** The servers the agent should hold and how to reach the next one. */
export interface ServerTargets {
  /** How many servers the agent should hold (at least 1). */
  readonly knownServerCount: number;
  /** After a tunnel opened, whether the next is tried at once (the missing targets are known). */
  readonly eager: boolean;
  /** Whether another tunnel is wanted now. */
  wantsAnother(): boolean;
  /** The destination of the next attempt; undefined: none is wanted (the attempt ends). */
  pick(): ServerTarget | undefined;
  /** A tunnel to `serverID` opened to `target`; the server announced `serverCount`. */
  opened(serverID: string, target: ServerTarget, serverCount: number): void;
  /** The tunnel to `serverID` is gone. */
  closed(serverID: string): void;
}

/**
 * `--proxy-server-host` is one address in front of every server (an L4 balancer): each attempt
 * dials it, and the last `servercount` a new server announced is how many to hold.
 */
export class BalancedServerTargets implements ServerTargets {
  readonly eager = false;
  private count = 1;

  constructor(private readonly held: () => Iterable<HeldTunnel>) {}

  get knownServerCount(): number {
    return this.count;
  }

  wantsAnother(): boolean {
    let staying = 0;
    for (const t of this.held()) if (!t.serverLeaving) staying++;
    return staying < this.count;
  }

  pick(): ServerTarget {
    return {};
  }

  opened(_serverID: string, _target: ServerTarget, serverCount: number): void {
    // Go uses the count as given; a count below 1 would stop reconnecting after a server loss.
    this.count = Math.max(1, serverCount);
  }

  closed(): void {}
}
