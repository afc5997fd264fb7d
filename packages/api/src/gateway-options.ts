/**
 * The gateway's options (`cluster-proxy gateway`): one schema (types, defaults, rules, flags).
 * The flag names are the contract of docs/design/gateway.md (the chart passes them).
 */
import { isDns1123Label } from "./cluster-name.js";
import { LOG_FORMAT_FIELD } from "./log-options.js";
import { GATEWAY_PORT, GRPC_DOOR_PORT } from "./hub-names.js";
import {
  defineOptions,
  opt,
  parseOptions,
  rules,
  type OptionsInputOf,
  type OptionsOf,
  type ValueRule,
} from "./option-schema.js";

/**
 * The audience `cluster-proxy credential` requests hub tokens for and the gateway's TokenReview
 * asks for by default (--token-audiences): a token minted for it is not a hub API credential.
 */
export const GATEWAY_TOKEN_AUDIENCE = "cluster-proxy-gateway";

const positiveInt: ValueRule<number> = (n) =>
  !Number.isInteger(n) || n < 1 ? `must be a positive integer, got ${n}` : undefined;

/** `key=value` pairs with a non-empty key, each key once. */
function requiredClaimsProblem(list: readonly string[]): string[] {
  const seen = new Set<string>();
  const problems: string[] = [];
  for (const entry of list) {
    const eq = entry.indexOf("=");
    const key = eq < 0 ? "" : entry.slice(0, eq);
    if (key === "") problems.push(`"${entry}" is not key=value`);
    else if (seen.has(key)) problems.push(`claim "${key}" is required twice`);
    seen.add(key);
  }
  return problems;
}

/** Non-empty entries, each once. */
function audiencesProblem(list: readonly string[]): string[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const a of list) {
    if (a.trim() === "" || a !== a.trim()) problems.push(`"${a}" is not an audience (empty or padded with spaces)`);
    else if (seen.has(a)) problems.push(`audience "${a}" is listed twice`);
    seen.add(a);
  }
  return problems;
}

/** Each entry a browser origin as the Origin header spells it: `https://host[:port]` (or http), lowercase, nothing else. */
function originsProblem(list: readonly string[]): string[] {
  const problems: string[] = [];
  for (const o of list) {
    let u: URL | undefined;
    try {
      u = new URL(o);
    } catch {
      u = undefined;
    }
    if (!u || (u.protocol !== "https:" && u.protocol !== "http:") || u.origin !== o)
      problems.push(`"${o}" is not an origin like https://console.example.com (scheme, host and port only, lowercase)`);
  }
  return problems;
}

function httpsUrlProblem(url: string): string | undefined {
  if (url === "") return undefined;
  try {
    const u = new URL(url);
    if (u.protocol !== "https:") return `"${url}" is not an https URL`;
    if (u.search || u.hash) return `"${url}" must not have a query or fragment`;
    return undefined;
  } catch {
    return `"${url}" is not a URL`;
  }
}

/** The gateway's option fields (in flag-reference order). */
const gatewayOptionFields = {
  port: opt.port(
    GATEWAY_PORT,
    {
      flag: "port",
      description:
        "HTTPS port hub users send Kubernetes API requests to: https://<gateway>/<cluster>/<kube-api path> (HTTP/1.1 and HTTP/2; 0 picks a free port)",
    },
    rules.port(true),
  ),
  healthPort: opt.port(
    9093,
    {
      flag: "health-port",
      description: "Plain HTTP port serving /healthz, /readyz and /metrics (0 picks a free port)",
    },
    rules.port(true),
  ),
  servingCert: opt.path(
    "",
    {
      flag: "serving-cert",
      description:
        "Serving certificate of --port (PEM, required); re-read when the file changes, new connections get the new one without a restart",
    },
    rules.nonEmpty("required (serving certificate of --port)"),
  ),
  servingKey: opt.path(
    "",
    { flag: "serving-key", description: "Private key of --serving-cert (PEM, required; reloaded with it)" },
    rules.nonEmpty("required (private key of --serving-cert)"),
  ),
  proxyServerHost: opt.string(
    "",
    {
      flag: "proxy-server-host",
      description: "Host of the proxy-servers' gRPC client front door the gateway dials clusters through (required)",
    },
    rules.nonEmpty("required (host of the proxy-servers' client front door)"),
  ),
  proxyServerPort: opt.port(
    GRPC_DOOR_PORT,
    { flag: "proxy-server-port", description: "Port of the proxy-servers' gRPC client front door" },
    rules.port(false),
  ),
  proxyCa: opt.path(
    "",
    { flag: "proxy-ca", description: "CA bundle the proxy-servers' serving certificate is verified with (required)" },
    rules.nonEmpty("required (CA of the proxy-servers)"),
  ),
  proxyCert: opt.path(
    "",
    {
      flag: "proxy-cert",
      description: "Client certificate presented to the proxy-servers (the proxy-client Secret's, required)",
    },
    rules.nonEmpty("required (client certificate for the proxy-servers)"),
  ),
  proxyKey: opt.path(
    "",
    { flag: "proxy-key", description: "Private key of --proxy-cert (required)" },
    rules.nonEmpty("required (private key of --proxy-cert)"),
  ),
  identityCert: opt.path(
    "",
    {
      flag: "identity-cert",
      description:
        "The gateway identity: client certificate (signed by the gateway CA) presented to the agents' gateway endpoint, and accepted nowhere else (required; reloaded when it changes, with --identity-key and --agent-ca)",
    },
    rules.nonEmpty("required (gateway identity certificate)"),
  ),
  identityKey: opt.path(
    "",
    { flag: "identity-key", description: "Private key of --identity-cert (required)" },
    rules.nonEmpty("required (private key of --identity-cert)"),
  ),
  agentCa: opt.path(
    "",
    {
      flag: "agent-ca",
      description:
        "CA the agents' endpoint certificates are verified with; the certificate must also grant the cluster dialled (URI SAN cluster-proxy://cluster/<cluster>) (required)",
    },
    rules.nonEmpty("required (CA of the agents' certificates)"),
  ),
  hubKubeconfig: opt.path("", {
    flag: "hub-kubeconfig",
    env: "KUBECONFIG",
    description:
      "Kubeconfig of the hub (TokenReview, SubjectAccessReview, ManagedClusters, the services ConfigMap, Events); empty: the in-cluster ServiceAccount",
  }),
  namespace: opt.string(
    "",
    {
      flag: "namespace",
      env: "POD_NAMESPACE",
      description:
        "Namespace of the --exposed-services-configmap and of the Events about it (empty: the pod's namespace from the ServiceAccount mount)",
    },
    (ns) => (ns !== "" && !isDns1123Label(ns) ? `"${ns}" is not a namespace name` : undefined),
  ),
  tokenReview: opt.boolean(true, {
    flag: "token-review",
    description: "Authenticate bearer tokens with a hub TokenReview (ServiceAccount tokens, any token the hub accepts)",
  }),
  tokenAudiences: opt.list(
    [GATEWAY_TOKEN_AUDIENCE],
    {
      flag: "token-audiences",
      description:
        "Audiences the hub TokenReview asks for (spec.audiences) and the answer must name (status.audiences): tokens minted for them (cluster-proxy credential requests the first) are gateway credentials, not hub API credentials",
    },
    audiencesProblem,
    (list) => (list.length === 0 ? "at least one audience" : undefined),
  ),
  acceptHubApiAudience: opt.boolean(true, {
    flag: "accept-hub-api-audience",
    description:
      "Also accept tokens of the hub apiserver's own audience (what kubectl create token and pods' ServiceAccount tokens carry, and tokens of audience-unaware authenticators): tokens people already hold keep working. Off: only tokens for --token-audiences are accepted, so no hub API credential works at the gateway",
  }),
  hubApiAudiences: opt.list(
    [],
    {
      flag: "hub-api-audiences",
      description:
        "The hub apiserver's audiences, asked for besides --token-audiences while --accept-hub-api-audience is on (empty: the aud claim of the gateway's own mounted ServiceAccount token; without one, a token refused for --token-audiences is reviewed again without audiences)",
    },
    audiencesProblem,
  ),
  authenticationCacheTtl: opt.duration(
    10_000,
    {
      flag: "authentication-cache-ttl",
      description:
        "How long a TokenReview result is cached (keyed by a hash of the token, never the token); rejections are cached apart, for at most 5s (0 disables)",
    },
    rules.notNegative,
  ),
  shutdownDelay: opt.duration(
    0,
    {
      flag: "shutdown-delay",
      description:
        "On SIGTERM, keep serving this long with /readyz at 503 before the port stops accepting: callers' new connections still reach this replica while the Service stops sending them here. Meanwhile HTTP/1.1 answers carry Connection: close and HTTP/2 connections get GOAWAY after their requests, so callers move to another replica (the chart sets 5s; 0: stop accepting at once)",
    },
    rules.notNegative,
  ),
  authorizationCacheTtl: opt.duration(
    5_000,
    {
      flag: "authorization-cache-ttl",
      description:
        "How long a hub SubjectAccessReview decision (cluster access, impersonation) is cached; denials for at most 1s (0 disables)",
    },
    rules.notNegative,
  ),
  oidcIssuerUrl: opt.string(
    "",
    {
      flag: "oidc-issuer-url",
      description:
        "Accept OIDC ID tokens of this issuer (https; its discovery document and JWKS are fetched from it, and a token with an unknown key id refetches the JWKS, at most every 10s). Empty: no OIDC",
    },
    httpsUrlProblem,
  ),
  oidcClientId: opt.string("", {
    flag: "oidc-client-id",
    description: "The audience OIDC ID tokens must be issued for (required with --oidc-issuer-url)",
  }),
  oidcCaFile: opt.path("", {
    flag: "oidc-ca-file",
    description: "CA bundle the issuer's https certificate is verified with (empty: the system's)",
  }),
  oidcUsernameClaim: opt.string("sub", {
    flag: "oidc-username-claim",
    description: "Claim that holds the user name",
  }),
  oidcUsernamePrefix: opt.string("", {
    flag: "oidc-username-prefix",
    description:
      "Prefix of OIDC user names (empty: '<issuer>#', so they cannot pose as hub ServiceAccounts or other issuers' users; '-': none)",
  }),
  oidcGroupsClaim: opt.string("", {
    flag: "oidc-groups-claim",
    description: "Claim that holds the groups (a string or a list of strings; empty: no groups)",
  }),
  oidcGroupsPrefix: opt.string("", { flag: "oidc-groups-prefix", description: "Prefix of OIDC group names" }),
  oidcRequiredClaim: opt.list(
    [],
    {
      flag: "oidc-required-claim",
      description: "key=value a token's claims must hold (repeat the flag for several); tokens without it are refused",
    },
    requiredClaimsProblem,
  ),
  clientCaFile: opt.path("", {
    flag: "client-ca-file",
    description:
      "Accept client certificates signed by this CA: the subject's CN is the user, its O entries the groups (empty: no client certificates)",
  }),
  frontProxyAuthentication: opt.boolean(true, {
    flag: "front-proxy-authentication",
    description:
      "Serve the aggregated path: believe the user the hub apiserver states in its requestheader headers (X-Remote-User, ...) on a connection whose client certificate the hub's requestheader CA signed with an allowed name, both read from kube-system/extension-apiserver-authentication (watched). Off: those headers are dropped, as from any other caller",
  }),
  passthroughUnrecognizedTokens: opt.boolean(false, {
    flag: "passthrough-unrecognized-tokens",
    description:
      "A bearer token neither the hub nor OIDC recognises is sent to the cluster unchanged (Cluster-Proxy-Passthrough), where the cluster authenticates and authorizes it; hub authorization is skipped for it. Off: such a request is refused with 401",
  }),
  impersonationPrefix: opt.string("cluster:hub:", {
    flag: "impersonation-prefix",
    description:
      "Prefix of the user and group names the cluster sees (Impersonate-User: <prefix><user>), so hub names cannot pose as the cluster's own",
  }),
  allowedUpgradeOrigins: opt.list(
    [],
    {
      flag: "allowed-upgrade-origins",
      description:
        "Browser origins (https://host[:port]) whose pages may open upgrades (WebSocket exec, attach, port-forward) through the gateway; an upgrade with any other Origin header is refused with 403. Empty: every upgrade from a browser page is refused (kubectl and client-go send no Origin and are not affected)",
    },
    originsProblem,
  ),
  exposedServicesConfigmap: opt.string(
    "cluster-proxy-exposed-services",
    {
      flag: "exposed-services-configmap",
      description:
        "ConfigMap in --namespace whose key 'services' lists the Services users may reach (default deny; watched, a bad update keeps the last good list)",
    },
    rules.nonEmpty(),
  ),
  auditLog: opt.path("-", {
    flag: "audit-log",
    description: "Where audit records (one JSON line per request) go: '-' is standard output, else a file",
  }),
  auditLogMaxSize: opt.int(
    100,
    { flag: "audit-log-max-size", description: "MiB an audit log file may reach before it is rotated" },
    positiveInt,
  ),
  auditLogMaxFiles: opt.int(
    5,
    {
      flag: "audit-log-max-files",
      description: "Rotated audit log files kept (<file>.1 is the newest); older ones are deleted",
    },
    (n) => (!Number.isInteger(n) || n < 0 ? `must not be negative, got ${n}` : undefined),
  ),
  maxConnectionsPerCluster: opt.int(
    4,
    {
      flag: "max-connections-per-cluster",
      description:
        "HTTP/2 sessions (tunnel dials) the gateway opens at most to one cluster's endpoint. Each carries up to the agent's max concurrent streams (1,000 by default), one per request for as long as it runs (a watch too); another session is opened only when the open ones are full, and a request waits when all are. An upgrade (exec, attach, port-forward) gets a connection of its own and does not count",
    },
    positiveInt,
  ),
  maxRequestsPerUser: opt.int(
    64,
    {
      flag: "max-requests-per-user",
      description:
        "Requests one caller (a hub user; a pass-through caller by its source address) may have in flight to one cluster at once; further ones wait in the caller's queue. Watches, follow=true logs and upgrades count apart (--max-long-running-per-user)",
    },
    positiveInt,
  ),
  maxQueuedRequestsPerUser: opt.int(
    256,
    {
      flag: "max-queued-requests-per-user",
      description:
        "Requests of one caller that may wait for one cluster beyond --max-requests-per-user; beyond this they are refused at once with 429 and Retry-After",
    },
    (n) => (!Number.isInteger(n) || n < 0 ? `must not be negative, got ${n}` : undefined),
  ),
  queuedRequestTimeout: opt.duration(
    15_000,
    {
      flag: "queued-request-timeout",
      description:
        "How long a request may wait in its caller's queue for one cluster; then it is refused with 429 and Retry-After (nothing reaches the cluster)",
    },
    rules.atLeastMs(1),
  ),
  maxLongRunningPerUser: opt.int(
    512,
    {
      flag: "max-long-running-per-user",
      description:
        "Long-running requests (watches, follow=true logs, exec, attach, port-forward) one caller may hold open to one cluster at once; beyond this they are refused at once with 429 and Retry-After",
    },
    positiveInt,
  ),
  tokenReviewRatePerSource: opt.int(
    20,
    {
      flag: "token-review-rate-per-source",
      description:
        "Hub TokenReviews per second for bearer tokens not cached, per source address (an IPv6 address by its /64); beyond this and the burst, such requests are refused with 429 and Retry-After without asking the hub (0: no limit)",
    },
    (n) => (!Number.isInteger(n) || n < 0 ? `must not be negative, got ${n}` : undefined),
  ),
  tokenReviewBurstPerSource: opt.int(
    200,
    {
      flag: "token-review-burst-per-source",
      description: "The burst of --token-review-rate-per-source: TokenReviews one source address may cause at once",
    },
    positiveInt,
  ),
  fleetAuthorizationCacheTtl: opt.duration(
    30_000,
    {
      flag: "fleet-authorization-cache-ttl",
      description:
        "How long the fleet view keeps a viewer's decisions (which clusters it may see, whose audit records), denials as long as grants: one hub SubjectAccessReview per cluster per viewer per period, however many pages and streams (0: ask on every refresh)",
    },
    rules.notNegative,
  ),
  maxConnectionsPerClient: opt.int(
    2048,
    {
      flag: "max-connections-per-client",
      description:
        "TLS connections one client may hold at the gateway's port at once, counted by source address (IPv6 by /64): a quarter of the port's 8,192, so that no one source holds them all while an HTTP/1.1 client with a thousand watches, or the clients behind one NAT, still fit; further ones are closed on arrival. The hub apiserver's connections (the aggregated path: its front-proxy certificate, checked at the handshake) stop counting once verified, as each of its users is bounded on their own. Behind a load balancer that replaces client addresses (a Service with externalTrafficPolicy Cluster) a source is a node: raise it, or keep client addresses (externalTrafficPolicy Local)",
    },
    positiveInt,
  ),
  connectionIdleTimeout: opt.duration(
    120_000,
    {
      flag: "connection-idle-timeout",
      description:
        "A caller's connection with nothing in flight for this long is closed: HTTP/2 with no open stream (GOAWAY; a watch keeps its connection), HTTP/1.1 before its first request (between requests: after 5 s); clients open a new one when they need it",
    },
    rules.atLeastMs(1),
  ),
  http2MaxStreamsPerConnection: opt.int(
    1000,
    {
      flag: "http2-max-streams-per-connection",
      description:
        "Streams (requests, watches) one HTTP/2 connection of a caller may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS), as the kube-apiserver's flag of this name",
    },
    positiveInt,
  ),
  dialTimeout: opt.duration(
    10_000,
    {
      flag: "dial-timeout",
      description: "A tunnel dial to a cluster not connected within this time fails with 504",
    },
    rules.atLeastMs(1),
  ),
  logLevel: opt.choice(["debug", "info", "warn", "error"] as const, "info", {
    flag: "log-level",
    description: "Log level of the gateway's own log lines (audit records are written whatever the level)",
  }),
  logFormat: LOG_FORMAT_FIELD,
};

/** The gateway's option schema. */
export const gatewayOptionsSchema = defineOptions(gatewayOptionFields, (o, bad) => {
  if (o.oidcIssuerUrl !== "" && o.oidcClientId === "") bad("oidcClientId", "required with --oidc-issuer-url");
  if (o.oidcIssuerUrl === "" && o.oidcClientId !== "") bad("oidcIssuerUrl", "required with --oidc-client-id");
  if (
    !o.tokenReview &&
    o.oidcIssuerUrl === "" &&
    o.clientCaFile === "" &&
    !o.passthroughUnrecognizedTokens &&
    !o.frontProxyAuthentication
  )
    bad(
      "tokenReview",
      "with --token-review=false, set --oidc-issuer-url, --client-ca-file, --front-proxy-authentication or --passthrough-unrecognized-tokens: no caller could authenticate",
    );
});

/** The gateway's flags (help, docs reference). */
export const gatewayOptionSpecs = gatewayOptionsSchema.specs;

/** The gateway's options, validated, every default applied. */
export type GatewayOptions = OptionsOf<typeof gatewayOptionFields>;
/** What a caller may give the gateway (options with a default may be left out). */
export type GatewayOptionsInput = OptionsInputOf<typeof gatewayOptionFields>;

/** Validate gateway options and apply the defaults; one ConfigError names every bad flag. */
export function parseGatewayOptions(input: GatewayOptionsInput): GatewayOptions {
  return parseOptions(gatewayOptionsSchema, input);
}
