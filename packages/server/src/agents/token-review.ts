/**
 * ServiceAccount token authentication of agents, as the Go proxy-server does it (TokenReview with the
 * audience, only `system:serviceaccount:<namespace>:<service account>`, Go's error texts).
 * Design: docs/design/protocol.md#5-authentication
 */
import { ClusterProxyError, ConfigError, ErrorCodes } from "@cluster-proxy/api";
import { errorMessage } from "@cluster-proxy/errors";
import { realClock, type Clock } from "@cluster-proxy/kit";

/** Who reviews a token: returns the authenticated username, or throws with the reason. */
export type TokenReviewFn = (token: string, audience: string) => Promise<string>;

/** The agent's token was not accepted; `message` is what the agent is told. */
export class AgentAuthError extends ClusterProxyError<typeof ErrorCodes.agentAuth> {
  constructor(message: string, options?: ErrorOptions) {
    super(ErrorCodes.agentAuth, message, options);
    this.name = "AgentAuthError";
  }
}

export interface TokenAuthOptions {
  agentNamespace: string;
  agentServiceAccount: string;
  authenticationAudience: string;
  review: TokenReviewFn;
}

/**
 * A simple token bucket: `qps` per second, up to `burst` at once (client-go's defaults for 0), on
 * `clock` (default the kit's `realClock`).
 */
export class RateLimiter {
  private tokens: number;
  private last: number;
  private queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly qps: number,
    private readonly burst: number,
    private readonly clock: Clock = realClock,
  ) {
    this.tokens = burst;
    this.last = clock.now();
  }

  /** Resolves when a request may go out. */
  take(): Promise<void> {
    const next = this.queue.then(async () => {
      const now = this.clock.now();
      this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.qps);
      this.last = now;
      if (this.tokens < 1) {
        const waitMs = Math.ceil(((1 - this.tokens) / this.qps) * 1000);
        await new Promise<void>((r) => this.clock.setTimeout(r, waitMs));
        this.tokens = 1;
        this.last = this.clock.now();
      }
      this.tokens -= 1;
    });
    this.queue = next.catch(() => undefined);
    return next;
  }
}

/**
 * Check the `authorization` metadata values of an agent's Connect call. Resolves with the
 * ServiceAccount username, or rejects with an {@link AgentAuthError} carrying Go's text.
 */
export async function authenticateAgentToken(values: readonly string[], o: TokenAuthOptions): Promise<string> {
  if (values.length === 0) throw new AgentAuthError("Authentication context was not found in metadata");
  if (values.length > 1) throw new AgentAuthError(`too many (${values.length}) tokens are received`);
  const value = values[0]!;
  const prefix = "Bearer ";
  if (!value.startsWith(prefix)) throw new AgentAuthError(`received token does not have "${prefix}" prefix`);
  const fail = (why: string, cause?: unknown): never => {
    throw new AgentAuthError(`Failed to validate authentication token, err:${why}`, cause ? { cause } : undefined);
  };
  let username: string;
  try {
    username = await o.review(value.slice(prefix.length), o.authenticationAudience);
  } catch (err) {
    return fail(errorMessage(err), err);
  }
  const parts = username.split(":");
  if (parts.length !== 4) return fail("lookup failed: unexpected username format");
  if (parts[0] !== "system" || parts[1] !== "serviceaccount") {
    return fail("lookup failed: username returned is not a service account");
  }
  if (parts[2] !== o.agentNamespace) {
    return fail(`lookup failed: incoming request from "${parts[2]}" namespace. Expected "${o.agentNamespace}"`);
  }
  if (parts[3] !== o.agentServiceAccount) {
    return fail(
      `lookup failed: incoming request from "${parts[3]}" service account. Expected "${o.agentServiceAccount}"`,
    );
  }
  return username;
}

/**
 * A TokenReview client for the apiserver of `kubeconfig` (empty: the in-cluster ServiceAccount
 * config), limited to `qps` requests per second with bursts of `burst` (0: client-go's 5 and 10)
 * on `clock` (default the kit's `realClock`). Throws a ConfigError naming --kubeconfig when the config cannot be loaded.
 */
export async function kubernetesTokenReview(
  kubeconfig: string,
  qps = 0,
  burst = 0,
  clock: Clock = realClock,
): Promise<TokenReviewFn> {
  const k8s = await import("@kubernetes/client-node");
  const kc = new k8s.KubeConfig();
  try {
    if (kubeconfig) kc.loadFromFile(kubeconfig);
    else kc.loadFromCluster();
    if (!kc.getCurrentCluster()) throw new Error("no current cluster");
  } catch (err) {
    throw new ConfigError(
      `--kubeconfig: cannot load ${kubeconfig ? `"${kubeconfig}"` : "the in-cluster config"}: ${errorMessage(err)}`,
      { cause: err },
    );
  }
  const api = kc.makeApiClient(k8s.AuthenticationV1Api);
  const limiter = new RateLimiter(qps > 0 ? qps : 5, burst > 0 ? burst : 10, clock);
  return async (token, audience) => {
    await limiter.take();
    let review;
    try {
      review = await api.createTokenReview({
        body: { apiVersion: "authentication.k8s.io/v1", kind: "TokenReview", spec: { token, audiences: [audience] } },
      });
    } catch (err) {
      throw new Error(`Failed to authenticate request. err:${errorMessage(err)}`, { cause: err });
    }
    const status = review.status;
    if (status?.error) throw new Error(`lookup failed: ${status.error}`);
    if (!status?.authenticated) throw new Error("lookup failed: service account jwt not valid");
    return status.user?.username ?? "";
  };
}
