/**
 * Option schemas: one table per component is the single source of its CLI flags, environment
 * variables, defaults, validation, `--help` text and the README's flag reference.
 * Every error names the flag it is about.
 */

export type OptionKind = "string" | "int" | "port" | "duration" | "boolean" | "list" | "path";

export interface OptionSpec {
  /** Property name in the parsed config object. */
  key: string;
  /** Long flag name without dashes, e.g. `server-port`. */
  flag: string;
  kind: OptionKind;
  description: string;
  /** Default value (already parsed). `undefined` means unset. */
  default?: string | number | boolean | string[];
  /** Environment variable read when the flag is not given. */
  env?: string;
  /** True where the Go konnectivity binary has a flag of the same name and meaning. */
  goCompatible?: boolean;
  /** Allowed values for `string` options. */
  choices?: readonly string[];
}

/** A flag, file or value the user gave is wrong. */
/** `--enable-profiling`, the same on server and agent. */
export const ENABLE_PROFILING_SPEC: OptionSpec = {
  key: "enableProfiling",
  flag: "enable-profiling",
  kind: "boolean",
  default: false,
  goCompatible: true,
  description:
    "Serve /debug/process on the admin port: memory (?gc=1 collects garbage first), open file descriptors and active handles, as JSON (Go serves pprof here)",
};

export class ConfigError extends Error {
  readonly code = "CP_ERR_CONFIG";
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Parse a Go-style duration (`500ms`, `10s`, `1m30s`, `1h`; bare numbers are seconds) into ms. */
export function parseDuration(text: string): number {
  const t = text.trim();
  if (/^\d+(\.\d+)?$/.test(t)) return Math.round(Number(t) * 1000);
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/gy;
  let total = 0;
  let matched = 0;
  for (let m = re.exec(t); m; m = re.exec(t)) {
    total += Number(m[1]) * (DURATION_UNITS[m[2]!] ?? 0);
    matched = re.lastIndex;
  }
  if (matched === 0 || matched !== t.length)
    throw new Error(`"${text}" is not a duration (use e.g. 500ms, 10s, 1m, 1h)`);
  return Math.round(total);
}

/** Format milliseconds as a Go-style duration. */
export function formatDuration(ms: number): string {
  if (ms % 3_600_000 === 0 && ms > 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0 && ms > 0) return `${ms / 60_000}m`;
  if (ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}

function parseValue(spec: OptionSpec, raw: string | boolean): string | number | boolean | string[] {
  const name = `--${spec.flag}`;
  const fail = (why: string): never => {
    throw new ConfigError(`${name}: ${why}`);
  };
  if (spec.kind === "boolean") {
    if (typeof raw === "boolean") return raw;
    if (/^(1|t|true|yes)$/i.test(raw)) return true;
    if (/^(0|f|false|no)$/i.test(raw)) return false;
    return fail(`"${raw}" is not a boolean (use true or false)`);
  }
  if (typeof raw === "boolean") return fail("needs a value");
  switch (spec.kind) {
    case "int":
    case "port": {
      if (!/^-?\d+$/.test(raw.trim())) return fail(`"${raw}" is not an integer`);
      const n = Number(raw);
      if (spec.kind === "port" && (n < 0 || n > 65535)) return fail(`${n} is not a port number (0-65535)`);
      return n;
    }
    case "duration":
      try {
        return parseDuration(raw);
      } catch (err) {
        return fail((err as Error).message);
      }
    case "list":
      return raw
        .split(",")
        .map((s) => s.trim())
        .filter((s) => s !== "");
    default:
      if (spec.choices && !spec.choices.includes(raw)) return fail(`"${raw}" is not one of ${spec.choices.join(", ")}`);
      return raw;
  }
}

/**
 * Build a config object from raw flag values (keyed by flag name without dashes) and the
 * environment. Unknown flags are an error.
 */
export function resolveOptions<T>(
  specs: readonly OptionSpec[],
  raw: Record<string, string | boolean | undefined>,
  env: NodeJS.ProcessEnv = process.env,
): T {
  const byFlag = new Map(specs.map((s) => [s.flag, s]));
  for (const flag of Object.keys(raw)) {
    if (raw[flag] !== undefined && !byFlag.has(flag)) throw new ConfigError(`--${flag}: unknown flag`);
  }
  const out: Record<string, unknown> = {};
  for (const spec of specs) {
    const given = raw[spec.flag];
    const fromEnv = spec.env ? env[spec.env] : undefined;
    if (given !== undefined) out[spec.key] = parseValue(spec, given);
    else if (fromEnv !== undefined && fromEnv !== "") out[spec.key] = parseValue(spec, fromEnv);
    else out[spec.key] = spec.default;
  }
  return out as T;
}

/** The default shown in help and docs. */
export function describeDefault(spec: OptionSpec): string {
  const d = spec.default;
  if (d === undefined || d === "") return "";
  if (spec.kind === "duration" && typeof d === "number") return formatDuration(d);
  if (Array.isArray(d)) return d.join(",");
  return String(d);
}

/** Markdown table of a component's flags (used for the README). */
export function optionsMarkdown(specs: readonly OptionSpec[]): string {
  const rows = specs.map((s) => {
    const def = describeDefault(s);
    const notes = [s.env ? `env \`${s.env}\`` : "", s.goCompatible ? "Go-compatible" : ""].filter(Boolean).join(", ");
    return `| \`--${s.flag}\` | ${s.kind} | ${def ? `\`${def}\`` : ""} | ${s.description.replaceAll("|", "\\|")}${notes ? ` (${notes})` : ""} |`;
  });
  return ["| Flag | Type | Default | Description |", "| --- | --- | --- | --- |", ...rows].join("\n");
}
