/**
 * `cluster-proxy certs`: write the certificates of a standalone deployment: a serving CA, a
 * client CA and an agent CA (separate trust for the client front doors and the agent port), the
 * hub's serving certificate, a client certificate and per-cluster agent certificates. The file
 * layout is documented in @cluster-proxy/pki's standalone-certs module and the README.
 */
import { join } from "node:path";
import type { Command } from "commander";
import { certsOptionsSchema, type CertsOptions } from "@cluster-proxy/api";

import type { StandaloneCertPaths } from "@cluster-proxy/pki";
import { CommandFailure, type CliContext } from "../cli-context.js";
import { registerOptionCommand } from "./option-command.js";

const EXAMPLE = `
Example:
  cluster-proxy certs --dir ./certs --hub-host hub.example.com,10.0.0.5 --cluster east --cluster west

Writes three CAs, each signing one kind of certificate only: ca.crt (the hub's serving
certificate: what clients and agents verify the hub with), client-ca.crt (client certificates:
the server's --server-ca-cert) and agent-ca.crt (agent certificates: the server's
--cluster-ca-cert). So an agent's certificate is refused at the client front doors and a
client's at the agent port. Then server.crt (serving only, for both server ports), client.crt
and agent-<cluster>.crt. Each agent certificate grants exactly its cluster (URI SAN
cluster-proxy://cluster/<name>): the server refuses an agent that announces a cluster its
certificate does not grant. Keys are written with mode 0600.

  cluster-proxy certs --dir ./certs --update --cluster north   # add a cluster, keep the CAs
`;

/** The lines `certs` prints: every file and the flags that take it. */
export function describeCertFiles(paths: StandaloneCertPaths): string[] {
  const lines = [
    `  ${paths.ca.cert}  serving CA, verifies the hub: agent --ca-cert; SDK caFile; curl --proxy-cacert`,
    `  ${paths.clientCa.cert}  client CA: server --server-ca-cert (trust of the client front doors)`,
    `  ${paths.agentCa.cert}  agent CA: server --cluster-ca-cert (trust of the agent port)`,
    `  ${paths.ca.key}, ${paths.clientCa.key}, ${paths.agentCa.key}  CA keys (keep them private; needed only to issue more certificates)`,
    `  ${paths.server.cert}, ${paths.server.key}  hub serving certificate: server --server-cert/--server-key and --cluster-cert/--cluster-key`,
    `  ${paths.client.cert}, ${paths.client.key}  hub-side client: SDK cert/key, curl --proxy-cert/--proxy-key`,
  ];
  for (const [cluster, p] of paths.agents)
    lines.push(`  ${p.cert}, ${p.key}  agent of cluster ${cluster}: agent --agent-cert/--agent-key`);
  return lines;
}

/** The command that splits the old single-CA layout of `dir`, for the refusal message. */
function migrateHint(dir: string): string {
  return `run \`cluster-proxy certs --dir ${dir} --update\` to split it (ca.crt stays as the serving CA, so clients and agents keep verifying the hub; new client-ca.crt and agent-ca.crt are created and client.crt, server.crt and every agent-<cluster>.crt are re-issued), then restart the server with --server-ca-cert ${join(dir, "client-ca.crt")} --cluster-ca-cert ${join(dir, "agent-ca.crt")} and hand the re-issued client and agent certificates out; or --force to start over with new CAs`;
}

/** Register `certs` on `program`. */
export function registerCertsCommand(program: Command, ctx: CliContext): void {
  registerOptionCommand(program, ctx, {
    name: "certs",
    summary: "write the CAs and the server, client and per-cluster agent certificates",
    description:
      "Write the certificates of a standalone deployment (no Kubernetes) to --dir: a serving CA, a client CA and an agent CA, the hub's serving certificate, a client certificate and one agent certificate per --cluster.",
    example: EXAMPLE,
    schema: certsOptionsSchema,
    run: writeCerts,
  });

  async function writeCerts(options: CertsOptions, command: Command): Promise<void> {
    const pki = await import("@cluster-proxy/pki");
    const certOptions = {
      hubHosts: options.hubHost,
      clusters: options.cluster,
      force: options.force,
      keyAlgorithm: options.keyAlgorithm,
      validityDays: options.validityDays,
    };
    try {
      if (options.update) {
        const existing = await pki.existingStandaloneCerts(options.dir);
        const hubHostGiven = command.getOptionValue("hubHost") !== undefined;
        const { paths, written, migrated } = await pki.ensureStandaloneCerts(options.dir, {
          ...certOptions,
          clusters: [...new Set([...existing.clusters, ...options.cluster])],
          hubHosts: hubHostGiven ? options.hubHost : (existing.hubHosts ?? options.hubHost),
        });
        const lines: string[] = [];
        if (migrated)
          lines.push(
            `split the single CA of an older cluster-proxy: ca.crt now signs only the hub's serving certificate; restart the server with --server-ca-cert ${paths.clientCa.cert} --cluster-ca-cert ${paths.agentCa.cert} and hand out the re-issued client and agent certificates`,
          );
        lines.push(
          written.length === 0
            ? `nothing to do: every certificate in ${paths.dir} is current`
            : `wrote to ${paths.dir}:\n${written.map((f) => `  ${f}`).join("\n")}`,
        );
        ctx.stdout(`${lines.join("\n")}\nfiles:\n${describeCertFiles(paths).join("\n")}\n`);
        return;
      }
      const paths = await pki.writeStandaloneCerts(options.dir, certOptions);
      ctx.stdout(`wrote certificates to ${paths.dir}:\n${describeCertFiles(paths).join("\n")}\n`);
    } catch (err) {
      if (err instanceof pki.SingleCaLayoutError)
        throw new CommandFailure(`${err.message}: ${migrateHint(err.dir)}`, { cause: err });
      if (err instanceof pki.CertificateError) {
        const hint = /already exists/.test(err.message)
          ? " (pass --update to keep the CAs and issue only what is missing, or --force to replace them)"
          : "";
        throw new CommandFailure(`${err.message.replace(/; use force to replace it$/, "")}${hint}`, {
          cause: err,
        });
      }
      throw err;
    }
  }
}
