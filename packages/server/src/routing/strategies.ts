/**
 * Routing strategies (`--proxy-strategies`): which agent stream serves a dial address.
 *
 * Rules follow the Go proxy-server exactly (docs/design/protocol.md, section 4), plus our addressing
 * extension in `destHost`: when no identifier matches the dial host exactly, a host of the form
 * `<host>.<id>` where `<id>` is a registered `host` identifier routes to that agent and the dial
 * address is rewritten to `<host>:<port>` (longest `<id>` wins; an exact match always wins).
 */
import { destHostKey, joinHostPort, parseHostPort, type AgentIdentifiers } from "@cluster-proxy/protocol";
import type { ProxyStrategy } from "@cluster-proxy/api";

/** What a strategy needs to know about an agent stream. */
export interface RoutableBackend {
  readonly agentId: string;
  readonly identifiers: AgentIdentifiers;
  readonly draining: boolean;
}

/** A routing decision: the backend and the address to send it (rewritten by a suffix match). */
export interface Route<B extends RoutableBackend> {
  backend: B;
  address: string;
  strategy: ProxyStrategy;
}

/** One strategy's index of backends. */
export interface Strategy<B extends RoutableBackend> {
  readonly name: ProxyStrategy;
  add(backend: B): void;
  remove(backend: B): void;
  /** The backend (and possibly rewritten address) for `address`, or undefined to fall through. */
  pick(address: string): Route<B> | undefined;
  /** Backend streams this strategy can route to (drives readiness of the first strategy). */
  size(): number;
}

function removeFrom<T>(list: T[], item: T): boolean {
  const i = list.indexOf(item);
  if (i < 0) return false;
  list.splice(i, 1);
  return true;
}

/** First non-draining element, else the first one. */
function preferActive<B extends RoutableBackend>(list: Iterable<B>): B | undefined {
  let first: B | undefined;
  for (const b of list) {
    if (!b.draining) return b;
    first ??= b;
  }
  return first;
}

/**
 * Agents keyed by agent ID (each agent's streams oldest first). Picks a random starting agent,
 * then the first agent whose oldest stream is not draining, else the first draining one.
 */
class AgentPool<B extends RoutableBackend> {
  /** Each agent's streams, in no particular order (a removed agent's place takes the last one). */
  private readonly agents: B[][] = [];
  /** Each agent's index in {@link agents}. */
  private readonly slot = new Map<string, number>();
  private streams = 0;

  constructor(private readonly random: () => number) {}

  add(backend: B): void {
    const list = this.listOf(backend.agentId);
    if (list) list.push(backend);
    else {
      this.slot.set(backend.agentId, this.agents.length);
      this.agents.push([backend]);
    }
    this.streams++;
  }

  remove(backend: B): void {
    const list = this.listOf(backend.agentId);
    if (!list || !removeFrom(list, backend)) return;
    this.streams--;
    if (list.length > 0) return;
    // O(1) with any number of agents: the last agent's list moves into the emptied place.
    const i = this.slot.get(backend.agentId) ?? 0;
    this.slot.delete(backend.agentId);
    const last = this.agents.pop();
    if (!last || last === list) return;
    this.agents[i] = last;
    const moved = last[0];
    if (moved) this.slot.set(moved.agentId, i);
  }

  private listOf(agentId: string): B[] | undefined {
    const i = this.slot.get(agentId);
    return i === undefined ? undefined : this.agents[i];
  }

  /** No copy of the pool per dial: the walk starts at a random agent and wraps around. */
  pickRandom(): B | undefined {
    const agents = this.agents;
    if (agents.length === 0) return undefined;
    const start = Math.min(agents.length - 1, Math.floor(this.random() * agents.length));
    let firstDraining: B | undefined;
    for (let i = 0; i < agents.length; i++) {
      const oldest = agents[(start + i) % agents.length]?.[0];
      if (!oldest) continue;
      if (!oldest.draining) return oldest;
      firstDraining ??= oldest;
    }
    return firstDraining;
  }

  size(): number {
    return this.streams;
  }
}

/**
 * `default` and `defaultRoute`: among the agents this strategy admits, random start, first
 * non-draining. The two differ only in which backends they admit.
 */
class RandomAgentStrategy<B extends RoutableBackend> implements Strategy<B> {
  private readonly pool: AgentPool<B>;

  constructor(
    readonly name: "default" | "defaultRoute",
    private readonly admits: (backend: B) => boolean,
    random: () => number,
  ) {
    this.pool = new AgentPool(random);
  }
  add(backend: B): void {
    if (this.admits(backend)) this.pool.add(backend);
  }
  remove(backend: B): void {
    this.pool.remove(backend);
  }
  pick(address: string): Route<B> | undefined {
    const backend = this.pool.pickRandom();
    return backend && { backend, address, strategy: this.name };
  }
  size(): number {
    return this.pool.size();
  }
}

/** `default`: any agent, random start, first non-draining. */
export class DefaultStrategy<B extends RoutableBackend> extends RandomAgentStrategy<B> {
  constructor(random: () => number = Math.random) {
    super("default", () => true, random);
  }
}

/** `defaultRoute`: like `default`, among agents that sent `default-route=true`. */
export class DefaultRouteStrategy<B extends RoutableBackend> extends RandomAgentStrategy<B> {
  constructor(random: () => number = Math.random) {
    super("defaultRoute", (backend) => Boolean(backend.identifiers.defaultRoute), random);
  }
}

/**
 * `destHost`: backends indexed under every `host`, `ipv4` and `ipv6` identifier (one string map,
 * exact and case-sensitive, key = {@link destHostKey} of the dial address); among several, the
 * first registered non-draining one. Then the `<host>.<id>` suffix rule over `host` identifiers.
 */
export class DestHostStrategy<B extends RoutableBackend> implements Strategy<B> {
  readonly name = "destHost" as const;
  /** Each key's streams, oldest first (a Set keeps insertion order and removes in O(1)). */
  private readonly byKey = new Map<string, Set<B>>();
  private readonly byHostId = new Map<string, Set<B>>();
  /** Each member and the keys it was indexed under (so a removal touches only those). */
  private readonly members = new Map<B, { keys: string[]; hosts: string[] }>();

  add(backend: B): void {
    if (this.members.has(backend)) return;
    const ids = backend.identifiers;
    const keys = [...new Set([...ids.host, ...ids.ipv4, ...ids.ipv6])].filter((k) => k !== "");
    if (keys.length === 0) return;
    const hosts = [...new Set(ids.host)].filter((h) => h !== "");
    this.members.set(backend, { keys, hosts });
    for (const key of keys) indexAdd(this.byKey, key, backend);
    for (const host of hosts) indexAdd(this.byHostId, host, backend);
  }

  remove(backend: B): void {
    const member = this.members.get(backend);
    if (!member) return;
    this.members.delete(backend);
    for (const key of member.keys) indexRemove(this.byKey, key, backend);
    for (const host of member.hosts) indexRemove(this.byHostId, host, backend);
  }

  pick(address: string): Route<B> | undefined {
    const key = destHostKey(address);
    const exact = this.byKey.get(key);
    if (exact && exact.size > 0) {
      const backend = preferActive(exact);
      return backend && { backend, address, strategy: this.name };
    }
    // Suffix rule: the first `.` gives the longest candidate identifier.
    for (let dot = key.indexOf(".", 1); dot > 0; dot = key.indexOf(".", dot + 1)) {
      const list = this.byHostId.get(key.slice(dot + 1));
      if (!list || list.size === 0) continue;
      const backend = preferActive(list);
      if (!backend) continue;
      return { backend, address: rewriteHost(address, key, key.slice(0, dot)), strategy: this.name };
    }
    return undefined;
  }

  size(): number {
    return this.members.size;
  }
}

function indexAdd<B>(index: Map<string, Set<B>>, key: string, backend: B): void {
  const set = index.get(key);
  if (set) set.add(backend);
  else index.set(key, new Set([backend]));
}

function indexRemove<B>(index: Map<string, Set<B>>, key: string, backend: B): void {
  const set = index.get(key);
  if (set?.delete(backend) && set.size === 0) index.delete(key);
}

/** Replace the host `key` of `address` by `host`, keeping the port (bracketing IPv6). */
function rewriteHost(address: string, key: string, host: string): string {
  const hp = parseHostPort(address);
  if (hp && hp.host === key) return joinHostPort(host, hp.port);
  if (address === key) return host;
  const i = address.indexOf(key);
  return i < 0 ? address : address.slice(0, i) + host + address.slice(i + key.length);
}

/** Build the strategy chain named by `--proxy-strategies`. */
export function createStrategy<B extends RoutableBackend>(
  name: ProxyStrategy,
  random: () => number = Math.random,
): Strategy<B> {
  switch (name) {
    case "default":
      return new DefaultStrategy<B>(random);
    case "defaultRoute":
      return new DefaultRouteStrategy<B>(random);
    case "destHost":
      return new DestHostStrategy<B>();
  }
}

/**
 * The strategy chain: every backend is registered in every strategy; a dial is routed by the
 * first strategy that finds a backend.
 */
export class Router<B extends RoutableBackend> {
  readonly strategies: readonly Strategy<B>[];

  constructor(names: readonly ProxyStrategy[], random: () => number = Math.random) {
    if (names.length === 0) throw new Error("at least one proxy strategy is needed");
    this.strategies = names.map((n) => createStrategy<B>(n, random));
  }

  add(backend: B): void {
    for (const s of this.strategies) s.add(backend);
  }

  remove(backend: B): void {
    for (const s of this.strategies) s.remove(backend);
  }

  route(address: string): Route<B> | undefined {
    for (const s of this.strategies) {
      const r = s.pick(address);
      if (r) return r;
    }
    return undefined;
  }

  /** Ready iff the first strategy can route to at least one backend. */
  ready(): boolean {
    return (this.strategies[0]?.size() ?? 0) > 0;
  }
}
