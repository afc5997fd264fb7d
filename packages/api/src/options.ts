/**
 * The flag layer of the option schemas: {@link OptionSpec}, the flag table each component schema
 * (option-schema.ts) derives from its fields, and what works on it: parsing flag text and the
 * environment into values with the schema's defaults, `--help` and README rendering, and the
 * config error every flag problem is reported with. Every error names the flag it is about.
 */
import { errorMessage, ConfigError } from "@cluster-proxy/errors";

export { ConfigError };

export type OptionKind = "string" | "int" | "float" | "port" | "duration" | "boolean" | "list" | "path";

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
  /** True where the Go konnectivity binary has a flag of the same name, meaning and default. */
  goCompatible?: boolean;
  /**
   * A Go flag that is accepted but means less here (e.g. klog's header flags for our JSON lines):
   * what ours does with it. Shown in `--help` and the README's compatibility table.
   */
  goNote?: string;
  /**
   * A Go flag this implementation does not support: its Go default is accepted (manifests often
   * spell it out), any other value is refused with this reason.
   */
  unsupported?: string;
  /** For a Go-compatible flag: where ours is stricter or does more (README compatibility table). */
  goDifference?: string;
  /** One-letter alias, e.g. `v` for klog's `-v`. */
  short?: string;
  /** Allowed values for `string` options. */
  choices?: readonly string[];
  /** The value's name in `--help` (`--cluster <name>`); default: the kind's. */
  valueName?: string;
  /** The value of the flag given without one (`--gateway` is `--gateway=aggregated`); without it a value is needed. */
  bareValue?: string;
}

/** How a flag relates to the Go konnectivity binaries (README compatibility table). */
export type GoFlagStatus = "same" | "accepted" | "unsupported" | "ours";

/** The {@link GoFlagStatus} of a spec. */
export function goFlagStatus(spec: OptionSpec): GoFlagStatus {
  if (spec.unsupported !== undefined) return "unsupported";
  if (spec.goNote !== undefined) return "accepted";
  if (spec.goCompatible) return "same";
  return "ours";
}

/**
 * Throw one {@link ConfigError} listing every problem found (nothing when there is none), so a
 * user fixes all missing or bad flags in one go instead of one per start.
 */
export function throwConfigProblems(problems: readonly string[]): void {
  if (problems.length === 1) throw new ConfigError(problems[0]!);
  if (problems.length > 1) {
    throw new ConfigError(`${problems.length} problems with the flags:\n  ${problems.join("\n  ")}`);
  }
}

const DURATION_UNITS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

/**
 * Parse a Go-style duration (`500ms`, `10s`, `1m30s`, `1h0m0s`; bare numbers are seconds) into
 * ms (sub-millisecond parts are rounded).
 */
export function parseDuration(text: string): number {
  const t = text.trim();
  if (/^\d+(\.\d+)?$/.test(t)) return Math.round(Number(t) * 1000);
  const re = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/gy;
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

/**
 * A value as its flag takes it (the inverse of the flag layer's parsing): durations (ms) as Go
 * durations, lists comma-separated, everything else as text. Throws for a value the flag could
 * not carry back (a list item with a comma or empty, a value of another type than the flag's kind).
 */
export function formatFlagValue(spec: OptionSpec, value: unknown): string {
  const fail = (why: string): never => {
    throw new Error(`--${spec.flag}: ${why}`);
  };
  switch (spec.kind) {
    case "boolean":
      return typeof value === "boolean" ? String(value) : fail("expected a boolean");
    case "duration":
      return typeof value === "number" && Number.isInteger(value) && value >= 0
        ? formatDuration(value)
        : fail("expected whole non-negative milliseconds");
    case "int":
    case "port":
    case "float":
      return typeof value === "number" && Number.isFinite(value) ? String(value) : fail("expected a number");
    case "list": {
      if (!Array.isArray(value)) return fail("expected a list");
      const items = value.map((v: unknown) => (typeof v === "string" ? v : fail("expected a list of strings")));
      for (const item of items) if (item === "" || item.includes(",")) fail(`"${item}" cannot be a list item`);
      return items.join(",");
    }
    default:
      return typeof value === "string" ? value : fail("expected a string");
  }
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
  if (typeof raw === "boolean") {
    if (spec.bareValue === undefined) return fail("needs a value");
    raw = spec.bareValue;
  }
  switch (spec.kind) {
    case "float": {
      const n = Number(raw.trim());
      if (raw.trim() === "" || !Number.isFinite(n)) return fail(`"${raw}" is not a number`);
      return n;
    }
    case "int":
    case "port": {
      if (!/^-?\d+$/.test(raw.trim()))
        return fail(spec.kind === "port" ? `"${raw}" is not a port number (0-65535)` : `"${raw}" is not an integer`);
      const n = Number(raw);
      if (spec.kind === "port" && (n < 0 || n > 65535)) return fail(`${n} is not a port number (0-65535)`);
      return n;
    }
    case "duration":
      try {
        return parseDuration(raw);
      } catch (err) {
        return fail(errorMessage(err));
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
 * The flag layer: raw flag values (keyed by flag name without dashes) and the environment turned
 * into values keyed by option: flag syntax (numbers, durations, lists, booleans, choices), the
 * spec defaults and the refusal of unsupported Go flags, not the schema's rules. Untyped on
 * purpose: `resolveOptions` of option-schema.ts validates the result against the component
 * schema, which is what gives it its type. Unknown flags are an error; every problem is reported
 * at once, in one ConfigError naming each flag.
 */
export function flagValues(
  specs: readonly OptionSpec[],
  raw: Record<string, string | boolean | undefined>,
  env: NodeJS.ProcessEnv = process.env,
): Record<string, unknown> {
  const byFlag = new Map(specs.map((s) => [s.flag, s]));
  const problems: string[] = [];
  for (const flag of Object.keys(raw)) {
    if (raw[flag] !== undefined && !byFlag.has(flag)) problems.push(`--${flag}: unknown flag`);
  }
  const out: Record<string, unknown> = {};
  for (const spec of specs) {
    const given = raw[spec.flag];
    const fromEnv = spec.env ? env[spec.env] : undefined;
    try {
      if (given !== undefined) out[spec.key] = parseValue(spec, given);
      else if (fromEnv !== undefined && fromEnv !== "") out[spec.key] = parseValue(spec, fromEnv);
      else out[spec.key] = Array.isArray(spec.default) ? [...spec.default] : spec.default;
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      problems.push(err.message);
      continue;
    }
    if (spec.unsupported !== undefined && !sameValue(out[spec.key], spec.default)) {
      problems.push(
        `--${spec.flag}: not supported by cluster-proxy (only ${describeDefault(spec) || "empty"}, the Go default, is accepted): ${spec.unsupported}`,
      );
    }
  }
  throwConfigProblems(problems);
  return out;
}

function sameValue(a: unknown, b: unknown): boolean {
  const norm = (v: unknown): unknown => (v === undefined ? "" : v);
  if (Array.isArray(a) || Array.isArray(b)) {
    const x = Array.isArray(a) ? a : [];
    const y = Array.isArray(b) ? b : [];
    return x.length === y.length && x.every((v, i) => v === y[i]);
  }
  return norm(a) === norm(b);
}

/** The default shown in help and docs. */
export function describeDefault(spec: OptionSpec): string {
  const d = spec.default;
  if (d === undefined || d === "") return "";
  if (spec.kind === "boolean" && d === false) return "false";
  if (spec.kind === "duration" && typeof d === "number") return formatDuration(d);
  if (Array.isArray(d)) return d.join(",");
  return String(d);
}

const STATUS_TEXT: Record<GoFlagStatus, string> = {
  same: "Go: same",
  accepted: "Go: accepted",
  unsupported: "Go: refused unless default",
  ours: "ours",
};

/** The flag as written in docs: `--v`, with its short alias `-v`. */
export function flagLabel(spec: OptionSpec): string {
  return spec.short ? `\`-${spec.short}\`, \`--${spec.flag}\`` : `\`--${spec.flag}\``;
}

/**
 * Markdown table of a component's flags (used for the README). The Go column says how the flag
 * relates to the Go binary: same (name, meaning and default), accepted (with the note saying
 * what ours does with it), refused unless default (with the reason), or ours (no Go flag).
 */
export function optionsMarkdown(specs: readonly OptionSpec[], withGo = true): string {
  const esc = (t: string): string => t.replaceAll("|", "\\|");
  const rows = specs.map((s) => {
    const def = describeDefault(s);
    const notes = [s.env ? `env \`${s.env}\`` : ""].filter(Boolean).join(", ");
    let description = `${esc(s.description)}${notes ? ` (${notes})` : ""}`;
    if (s.goNote) description += ` **Go:** ${esc(s.goNote)}`;
    if (s.unsupported) description += ` **Refused:** ${esc(s.unsupported)}`;
    const cells = [flagLabel(s), s.kind, def ? `\`${def}\`` : ""];
    if (withGo) cells.push(STATUS_TEXT[goFlagStatus(s)]);
    cells.push(description);
    return `| ${cells.join(" | ")} |`;
  });
  const head = withGo ? ["Flag", "Type", "Default", "Go", "Description"] : ["Flag", "Type", "Default", "Description"];
  return [`| ${head.join(" | ")} |`, `| ${head.map(() => "---").join(" | ")} |`, ...rows].join("\n");
}
