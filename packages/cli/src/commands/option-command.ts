/**
 * The subcommands with flags, each an option schema (the components' and `certs`/`up` of
 * @cluster-proxy/api, the hub operations' of hub-options.ts): declared once here, with their
 * help texts and one flag per spec, and run with the options resolved from flags, environment
 * and defaults.
 */
import type { Command } from "commander";
import { TlsFileError } from "@cluster-proxy/tunnel";
import { ConfigError, type OptionField, type OptionSpec, type OptionsOf, type OptionsSchema } from "@cluster-proxy/api";
import { CommandFailure, type CliContext } from "../cli-context.js";
import { addOptionSpecs, resolveCommandOptions } from "./option-flags.js";
import { PortInUseError, portConflictMessage } from "../up/port-conflicts.js";
import { errorMessage } from "@cluster-proxy/errors";

/** A subcommand driven by an option schema (its field table `F`). */
export interface OptionCommand<F extends Record<string, OptionField>> {
  name: string;
  /** One line for the command list. */
  summary: string;
  /** The paragraph at the top of its --help. */
  description: string;
  /** Examples and notes at the end of its --help. */
  example: string;
  /**
   * The command's schema: one flag per spec, and the validation of the options resolved from
   * flags, environment and defaults (every problem in one ConfigError naming its flag). A
   * component handed these options does not validate them again.
   */
  schema: OptionsSchema<F>;
  /** Operands after the flags, as commander declares them (`["<specs...>", "what each is"]`); `command.args` holds them. */
  argument?: readonly [name: string, description: string];
  /**
   * Run with the validated options and the commander command (to tell a flag given from a
   * default).
   */
  run(options: OptionsOf<F>, command: Command): Promise<void>;
}

/** Register `spec` as a subcommand of `program`. */
export function registerOptionCommand<F extends Record<string, OptionField>>(
  program: Command,
  ctx: CliContext,
  spec: OptionCommand<F>,
): Command {
  const command = program
    .command(spec.name)
    .summary(spec.summary)
    .description(spec.description)
    .addHelpText("after", spec.example);
  if (spec.argument) command.argument(spec.argument[0], spec.argument[1]);
  addOptionSpecs(command, spec.schema.specs);
  command.action(async () => {
    await spec.run(resolveCommandOptions(command, spec.schema, ctx.env), command);
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
 * conflict naming its flag, a ConfigError or TlsFileError as it is, anything else as `<what> failed to start`
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
    if (err instanceof ConfigError || err instanceof TlsFileError) throw err;
    throw new CommandFailure(`${what} failed to start: ${errorMessage(err)}`, { cause: err });
  }
}
