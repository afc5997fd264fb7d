/**
 * Commander wiring generated from the option schemas: one option per {@link OptionSpec}, the parsed flags
 * turned back into the schema's options. Commander applies no defaults, reads no environment.
 * Design: docs/design/architecture.md#5-one-schema-many-outputs
 */
import { Option, type Command } from "commander";
import {
  describeDefault,
  flagValues,
  parseOptions,
  type OptionField,
  type OptionSpec,
  type OptionsOf,
  type OptionsSchema,
} from "@cluster-proxy/api";

const VALUE_NAMES: Record<OptionSpec["kind"], string> = {
  string: "string",
  int: "int",
  float: "number",
  port: "port",
  duration: "duration",
  boolean: "bool",
  list: "list",
  path: "path",
};

/** The help text of one option: its description plus default, choices, env and Go marker. */
export function optionHelpText(spec: OptionSpec): string {
  const extra: string[] = [];
  if (spec.choices) extra.push(`one of ${spec.choices.join(", ")}`);
  const def = describeDefault(spec);
  if (def !== "") extra.push(`default ${def}`);
  if (spec.env) extra.push(`env ${spec.env}`);
  if (spec.goCompatible) extra.push("Go-compatible");
  if (spec.goNote) extra.push(`Go flag: ${spec.goNote}`);
  if (spec.unsupported) extra.push(`Go flag, only its default is accepted: ${spec.unsupported}`);
  return extra.length > 0 ? `${spec.description} [${extra.join("; ")}]` : spec.description;
}

/** Accumulate a repeated list flag (`--x a --x b,c` is `a,b,c`); other kinds keep the last value. */
function collectList(value: string, previous: unknown): string {
  return typeof previous === "string" && previous !== "" ? `${previous},${value}` : value;
}

/**
 * A commander option for `spec`. Booleans take an optional value (`--x`, `--x=false`), as does a
 * flag with a bare value (`--gateway`, `--gateway=direct`).
 */
export function commanderOption(spec: OptionSpec): Option {
  const names = spec.short ? `-${spec.short}, --${spec.flag}` : `--${spec.flag}`;
  const value = spec.valueName ?? VALUE_NAMES[spec.kind];
  // A boolean, or a flag with a bare value, may be given without a value.
  const flags = spec.kind === "boolean" || spec.bareValue !== undefined ? `${names} [${value}]` : `${names} <${value}>`;
  const option = new Option(flags, optionHelpText(spec));
  if (spec.kind === "list") option.argParser(collectList);
  return option;
}

/** Add one commander option per spec to `command`. */
export function addOptionSpecs(command: Command, specs: readonly OptionSpec[]): Command {
  for (const spec of specs) command.addOption(commanderOption(spec));
  return command;
}

/**
 * The values commander parsed for `command`, keyed by option, with the environment and the
 * spec defaults applied: the flag layer only, not validated (hence untyped). Throws a
 * ConfigError naming the flag for a flag syntax problem.
 */
export function commandFlagValues(
  command: Command,
  specs: readonly OptionSpec[],
  env: NodeJS.ProcessEnv = process.env,
): Record<string, unknown> {
  const parsed = command.opts<Record<string, unknown>>();
  const raw: Record<string, string | boolean | undefined> = {};
  for (const spec of specs) {
    const value = parsed[commanderOption(spec).attributeName()];
    if (typeof value === "string" || typeof value === "boolean") raw[spec.flag] = value;
  }
  return flagValues(specs, raw, env);
}

/**
 * The options of `schema` commander parsed for `command`: defaults and environment applied,
 * validated by the schema. Throws the schema's ConfigError, which names every bad flag.
 */
export function resolveCommandOptions<F extends Record<string, OptionField>>(
  command: Command,
  schema: OptionsSchema<F>,
  env: NodeJS.ProcessEnv = process.env,
): OptionsOf<F> {
  return parseOptions(schema, commandFlagValues(command, schema.specs, env));
}

/**
 * Rewrite Go (pflag) spellings commander does not read the same way: a one-letter flag with
 * `=` (`-v=3`, as klog manifests write it) becomes `--v=3`. Everything after `--` is left alone.
 */
export function normalizeGoArgs(args: readonly string[], specs: readonly OptionSpec[]): string[] {
  const shorts = new Map(specs.filter((s) => s.short).map((s) => [s.short!, s.flag]));
  const out: string[] = [];
  let rest = false;
  for (const arg of args) {
    if (rest || arg === "--") {
      rest = true;
      out.push(arg);
      continue;
    }
    const m = /^-([A-Za-z])=(.*)$/s.exec(arg);
    const long = m ? shorts.get(m[1]!) : undefined;
    out.push(m && long ? `--${long}=${m[2]}` : arg);
  }
  return out;
}
