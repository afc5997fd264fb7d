/**
 * The subcommands whose flags are an option schema of @cluster-proxy/api (`server`, `agent`,
 * `addon-manager`, `certs`, `up`): declared once here, with their help texts and one flag per
 * spec, and run with the options resolved from flags, environment and defaults.
 */
import type { Command } from "commander";
import { ConfigError, type OptionSpec } from "@cluster-proxy/api";
import { CommandFailure, type CliContext } from "./cli-context.js";
import { addOptionSpecs, resolveCommandOptions } from "./option-flags.js";
import { PortInUseError, portConflictMessage } from "./port-conflicts.js";

/** A subcommand driven by an option schema. */
export interface OptionCommand<T> {
  name: string;
  /** One line for the command list. */
  summary: string;
  /** The paragraph at the top of its --help. */
  description: string;
  /** Examples and notes at the end of its --help. */
  example: string;
  specs: readonly OptionSpec[];
  /**
   * Validate the options resolved from flags, environment and defaults against the command's
   * schema (`parseOptions` of @cluster-proxy/api: every problem in one ConfigError naming its
   * flag). Without it they are used as resolved (server and agent validate in
   * their constructor, `up` in `runUp`).
   */
  parse?: (resolved: Record<string, unknown>) => T;
  /**
   * Run with the resolved options (a ConfigError thrown while resolving names the flag) and the
   * commander command (to tell a flag given from a default).
   */
  run(options: T, command: Command): Promise<void>;
}

/** Register `spec` as a subcommand of `program`. */
export function registerOptionCommand<T>(program: Command, ctx: CliContext, spec: OptionCommand<T>): Command {
  const command = program
    .command(spec.name)
    .summary(spec.summary)
    .description(spec.description)
    .addHelpText("after", spec.example);
  addOptionSpecs(command, spec.specs);
  command.action(async () => {
    const resolved = resolveCommandOptions<Record<string, unknown>>(command, spec.specs, ctx.env);
    await spec.run(spec.parse ? spec.parse(resolved) : (resolved as T), command);
  });
  return command;
}

/** A long-running component the CLI starts (the proxy-server, the proxy-agent). */
export interface StartableComponent {
  start(): Promise<unknown>;
  close(): Promise<unknown>;
}

/**
 * Start `component`; when that fails, close it and throw what the user should read: a port
 * conflict naming its flag, a ConfigError as it is, anything else as `<what> failed to start`
 * (exit status 1).
 */
export async function startComponent<T extends object>(
  what: string,
  component: StartableComponent,
  specs: readonly OptionSpec[],
  options: T,
): Promise<void> {
  try {
    await component.start();
  } catch (err) {
    await component.close().catch(() => undefined);
    const conflict = portConflictMessage(err, specs, options);
    if (conflict) throw new PortInUseError(conflict, { cause: err });
    if (err instanceof ConfigError) throw err;
    throw new CommandFailure(`${what} failed to start: ${(err as Error).message}`, { cause: err });
  }
}
