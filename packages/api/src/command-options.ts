/**
 * The schemas of the CLI's own commands that take user input beyond a component's options:
 * `cluster-proxy certs` and `cluster-proxy up`. Their cluster names follow the one rule of
 * {@link clusterNameProblem}.
 */
import { clusterNameProblem } from "./cluster-name.js";
import { LOG_FORMAT_FIELD } from "./log-options.js";
import { defineOptions, opt, parseOptions, rules, type OptionsInputOf, type OptionsOf } from "./option-schema.js";

/** Why each name of a list is not a cluster name that can get an agent certificate. */
function clusterListProblems(names: readonly string[]): string[] {
  const problems: string[] = [];
  for (const name of new Set(names)) {
    const problem = clusterNameProblem(name);
    if (problem !== undefined) problems.push(problem);
    else if (name === "ca")
      problems.push('"ca" is reserved (agent-ca.crt in the certificate directory is the agent CA)');
  }
  return problems;
}

const certsOptionFields = {
  dir: opt.path(
    "",
    { flag: "dir", description: "Directory to write the files to (required)" },
    rules.nonEmpty("required (the directory to write the certificates to)"),
  ),
  hubHost: opt.list(
    ["localhost", "127.0.0.1", "::1"],
    {
      flag: "hub-host",
      description: "DNS names and IPs the hub is reached at (server certificate SANs); repeatable or comma-separated",
    },
    (hosts) => (hosts.length === 0 ? "give at least one DNS name or IP" : undefined),
  ),
  cluster: opt.list(
    [],
    {
      flag: "cluster",
      description:
        'Managed cluster to issue an agent certificate for; repeatable or comma-separated. A cluster name is what OCM accepts for a ManagedCluster: lowercase letters, digits and "-", at most 63 characters',
    },
    clusterListProblems,
  ),
  force: opt.boolean(false, {
    flag: "force",
    description: "Replace the existing CAs (every certificate they issued stops being trusted)",
  }),
  update: opt.boolean(false, {
    flag: "update",
    description:
      "Keep the CAs in --dir and issue only what is missing or no longer fits: new --cluster names, new --hub-host names, certificates that expire within a day. Keeps the clusters already in --dir and, without --hub-host, the hosts of the existing server.crt. Also splits the single CA of older releases into serving, client and agent CAs",
  }),
  keyAlgorithm: opt.choice(["ECDSA-P256", "RSA-2048"] as const, "ECDSA-P256", {
    flag: "key-algorithm",
    description: "Key algorithm of every key",
  }),
  validityDays: opt.int(
    365,
    { flag: "validity-days", description: "Validity of the leaf certificates in days (the CAs get 10 years)" },
    (days) => (days <= 0 ? `${days} is not positive` : undefined),
  ),
};

/** The schema of `cluster-proxy certs`. */
export const certsOptionsSchema = defineOptions(certsOptionFields, (o, bad) => {
  if (o.update && o.force) bad("update", "cannot be combined with --force");
});
/** Flags of `cluster-proxy certs`. */
export const certsOptionSpecs = certsOptionsSchema.specs;
/** Options of `cluster-proxy certs`. */
export type CertsOptions = OptionsOf<typeof certsOptionFields>;

/** Validate `certs` options; one ConfigError names every bad flag. */
export function parseCertsOptions(input: OptionsInputOf<typeof certsOptionFields>): CertsOptions {
  return parseOptions(certsOptionsSchema, input);
}

const upOptionFields = {
  stateDir: opt.path("./.cluster-proxy", {
    flag: "state-dir",
    description: "Directory for the certificates (created; reused on the next run)",
  }),
  clusters: opt.list(
    ["east", "west"],
    {
      flag: "clusters",
      description:
        "Demo clusters to start, each with an agent and a sample HTTP service; repeatable or comma-separated (names as OCM accepts for a ManagedCluster)",
    },
    (names) => (names.length === 0 ? "give at least one cluster name" : clusterListProblems(names)),
  ),
  portBase: opt.port(
    8080,
    {
      flag: "port-base",
      description:
        "First port: HTTP CONNECT plain on B, gRPC on B+10, agents on B+11, health on B+12, HTTP CONNECT mTLS on B+13, admin on B+15, fleet view on B+16",
    },
    (base) => (base < 1 || base + 16 > 65_535 ? `${base} leaves no room for base+16 (use 1-65519)` : undefined),
  ),
  connectTimeout: opt.duration(30_000, {
    flag: "connect-timeout",
    description: "How long to wait for every demo cluster to answer through the hub",
  }),
  force: opt.boolean(false, {
    flag: "force",
    description:
      "Replace the CAs and certificates in --state-dir with new ones (kubeconfigs and certificates handed out before stop working)",
  }),
  exitAfterReady: opt.boolean(false, {
    flag: "exit-after-ready",
    description: "Print the instructions, then shut down and exit 0 (for tests and smoke checks)",
  }),
  logLevel: opt.choice(["debug", "info", "warn", "error", "silent"] as const, "warn", {
    flag: "log-level",
    description:
      "Level of the logs: on a terminal they go to <state-dir>/up.log, so they never mix with the instructions; otherwise to standard error",
  }),
  logFormat: LOG_FORMAT_FIELD,
};

/** The schema of `cluster-proxy up`. */
export const upOptionsSchema = defineOptions(upOptionFields);
/** Flags of `cluster-proxy up`. */
export const upOptionSpecs = upOptionsSchema.specs;
/** Options of `cluster-proxy up`. */
export type UpOptions = OptionsOf<typeof upOptionFields>;

/** Validate `up` options; one ConfigError names every bad flag. */
export function parseUpOptions(input: OptionsInputOf<typeof upOptionFields>): UpOptions {
  return parseOptions(upOptionsSchema, input);
}
