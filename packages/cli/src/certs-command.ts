/**
 * `cluster-proxy certs`: write a CA plus server, client and per-cluster agent certificates for
 * a standalone deployment.
 */
import type { Command } from "commander";
import { ConfigError, type OptionSpec } from "@cluster-proxy/api";
import type { StandaloneCertPaths } from "@cluster-proxy/pki";
import { CommandFailure, type CliContext } from "./cli-context.js";
import { addOptionSpecs, resolveCommandOptions } from "./option-flags.js";

/** Options of `cluster-proxy certs`. */
export interface CertsOptions {
  dir: string;
  hubHost: string[];
  cluster: string[];
  force: boolean;
  keyAlgorithm: "ECDSA-P256" | "RSA-2048";
  validityDays: number;
}

/** Flags of `cluster-proxy certs`. */
export const certsOptionSpecs: readonly OptionSpec[] = [
  { key: "dir", flag: "dir", kind: "path", default: "", description: "Directory to write the files to (required)" },
  {
    key: "hubHost",
    flag: "hub-host",
    kind: "list",
    default: ["localhost", "127.0.0.1", "::1"],
    description: "DNS names and IPs the hub is reached at (server certificate SANs); repeatable or comma-separated",
  },
  {
    key: "cluster",
    flag: "cluster",
    kind: "list",
    default: [],
    description: "Managed cluster to issue an agent certificate for; repeatable or comma-separated",
  },
  {
    key: "force",
    flag: "force",
    kind: "boolean",
    default: false,
    description: "Replace an existing CA (every certificate it issued stops being trusted)",
  },
  {
    key: "keyAlgorithm",
    flag: "key-algorithm",
    kind: "string",
    default: "ECDSA-P256",
    choices: ["ECDSA-P256", "RSA-2048"],
    description: "Key algorithm of every key",
  },
  {
    key: "validityDays",
    flag: "validity-days",
    kind: "int",
    default: 365,
    description: "Validity of the leaf certificates in days (the CA gets 10 years)",
  },
];

const EXAMPLE = `
Example:
  cluster-proxy certs --dir ./certs --hub-host hub.example.com,10.0.0.5 --cluster east --cluster west

Writes ca.crt/key, server.crt/key (the hub's serving certificate, also usable on the agent
port), client.crt/key (for hub-side clients) and agent-<cluster>.crt/key. Each agent certificate
grants exactly its cluster (URI SAN cluster-proxy://cluster/<name>): the server refuses an
agent that announces a cluster its certificate does not grant. Keys are written with mode 0600.
`;

/** The lines `certs` prints: every file and the flags that take it. */
export function describeCertFiles(paths: StandaloneCertPaths): string[] {
  const lines = [
    `  ${paths.ca.cert}  CA: server --server-ca-cert and --cluster-ca-cert; agent --ca-cert; curl --proxy-cacert`,
    `  ${paths.ca.key}  CA key (keep it private; needed only to issue more certificates)`,
    `  ${paths.server.cert}, ${paths.server.key}  hub serving certificate: server --server-cert/--server-key and --cluster-cert/--cluster-key`,
    `  ${paths.client.cert}, ${paths.client.key}  hub-side client: SDK cert/key, curl --proxy-cert/--proxy-key`,
  ];
  for (const [cluster, p] of paths.agents)
    lines.push(`  ${p.cert}, ${p.key}  agent of cluster ${cluster}: agent --agent-cert/--agent-key`);
  return lines;
}

/** Register `certs` on `program`. */
export function registerCertsCommand(program: Command, ctx: CliContext): void {
  const command = program
    .command("certs")
    .summary("write a CA and server, client and per-cluster agent certificates")
    .description(
      "Write the certificates of a standalone deployment (no Kubernetes) to --dir: a CA, the hub's serving certificate, a client certificate and one agent certificate per --cluster.",
    )
    .addHelpText("after", EXAMPLE);
  addOptionSpecs(command, certsOptionSpecs);
  command.action(async () => {
    const options = resolveCommandOptions<CertsOptions>(command, certsOptionSpecs, ctx.env);
    if (options.dir === "") throw new ConfigError("--dir: required (the directory to write the certificates to)");
    if (options.validityDays <= 0) throw new ConfigError(`--validity-days: ${options.validityDays} is not positive`);
    const { writeStandaloneCerts, assertClusterName, CertificateError } = await import("@cluster-proxy/pki");
    for (const cluster of options.cluster) {
      try {
        assertClusterName(cluster);
      } catch (err) {
        throw new ConfigError(`--cluster: ${(err as Error).message}`);
      }
    }
    if (options.hubHost.length === 0) throw new ConfigError("--hub-host: give at least one DNS name or IP");
    let paths: StandaloneCertPaths;
    try {
      paths = await writeStandaloneCerts(options.dir, {
        hubHosts: options.hubHost,
        clusters: options.cluster,
        force: options.force,
        keyAlgorithm: options.keyAlgorithm,
        validityDays: options.validityDays,
      });
    } catch (err) {
      if (err instanceof CertificateError) {
        const hint = /already exists/.test(err.message) ? " (pass --force to replace it)" : "";
        throw new CommandFailure(`${err.message.replace(/; use force to replace it$/, "")}${hint}`, 1, {
          cause: err,
        });
      }
      throw err;
    }
    ctx.stdout(`wrote certificates to ${paths.dir}:\n${describeCertFiles(paths).join("\n")}\n`);
  });
}
