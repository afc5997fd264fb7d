/**
 * The server's warning when it closes connections before their TLS handshake (admission limits,
 * deadlines, wrong protocol): at most one line per port per interval, with what was refused since
 * the last one by reason, so an attack cannot flood the log.
 */
import { realClock, type Clock, type Logger } from "@cluster-proxy/kit";

/** What each refusal reason means, in the warning. */
const REASONS: Record<string, string> = {
  source_limit: "one source address held --max-handshakes-per-source unfinished connections",
  hello_limit: "--max-connections-awaiting-hello connections had sent nothing yet (the oldest was closed)",
  hello_timeout: "no TLS ClientHello within --client-hello-timeout",
  http_request: "plain HTTP on a TLS port (answered 400)",
  not_tls: "not TLS",
  tls_on_plain_port: "TLS on a plain (non-TLS) port (answered 400)",
};

export class AdmissionLog {
  private readonly ports = new Map<string, { loggedAt: number; counts: Map<string, number> }>();

  constructor(
    private readonly log: Logger,
    private readonly intervalMs = 10_000,
    /** The intervals' clock (default the kit's `realClock`). */
    private readonly clock: Clock = realClock,
  ) {}

  /** Count one refused connection on `port` (its flag) and warn if this port's interval has passed. */
  refused(port: string, reason: string, fields: Record<string, unknown> = {}): void {
    let state = this.ports.get(port);
    if (!state) {
      state = { loggedAt: -Infinity, counts: new Map() };
      this.ports.set(port, state);
    }
    state.counts.set(reason, (state.counts.get(reason) ?? 0) + 1);
    const now = this.clock.now();
    if (now - state.loggedAt < this.intervalMs) return;
    state.loggedAt = now;
    const refused = Object.fromEntries(state.counts);
    state.counts.clear();
    const why = Object.keys(refused)
      .map((r) => REASONS[r] ?? r)
      .join("; ");
    this.log.warn(
      { port, refused, ...fields },
      `refusing connections: ${why} (counts since the last such line; cluster_proxy_server_connections_refused_total)`,
    );
  }
}
