/**
 * The building blocks of the component schemas: each option is a zod type (its value type, its
 * default and its rules) plus its flag metadata; a component is a zod object of those plus its
 * cross-field rules. From one component schema come the TypeScript type (`z.output`), the
 * defaults, the validation, the `--help` text and the README's flag reference (through the
 * derived {@link OptionSpec} table).
 *
 * zod/mini (the functional API) rather than `zod`: same schemas, and cheaper in the agent's idle
 * memory (+4.0 MiB against +7.2 MiB for full zod; docs/decisions.md).
 */
import * as z from "zod/mini";
import { throwConfigProblems, type OptionKind, type OptionSpec } from "./options.js";

/** A flag's description and Go notes: everything of an {@link OptionSpec} the schema does not own. */
export type FlagMeta = Omit<OptionSpec, "key" | "kind" | "default" | "choices">;

/**
 * A rule about one value: why it is wrong (without the flag, which is added; several reasons for
 * a list), or undefined.
 */
export type ValueRule<T> = (value: T) => string | readonly string[] | undefined;

/** One option: its zod type (with default and rules), the kind its flag parses as, and its flag. */
export interface OptionField<T extends z.ZodMiniType = z.ZodMiniType> {
  readonly type: T;
  readonly kind: OptionKind;
  readonly default: string | number | boolean | readonly string[];
  readonly choices?: readonly string[];
  readonly meta: FlagMeta;
}

function checks<T>(rules: readonly ValueRule<T>[]): z.core.$ZodCheck<T>[] {
  return rules.map((rule) =>
    z.check<T>((ctx) => {
      const why = rule(ctx.value);
      for (const message of typeof why === "string" ? [why] : (why ?? []))
        ctx.issues.push({ code: "custom", message, input: ctx.value });
    }),
  );
}

function field<V, T extends z.ZodMiniType<V, V>>(
  base: T,
  kind: OptionKind,
  def: V & OptionField["default"],
  meta: FlagMeta,
  rules: readonly ValueRule<V>[],
  choices?: readonly string[],
): OptionField<z.ZodMiniPrefault<T>> {
  // prefault, not default: an absent value becomes the default and then passes the rules too
  // (an empty required path is refused whether it was given empty or left out).
  const checked = rules.length > 0 ? base.check(...checks<V>(rules)) : base;
  return {
    type: z.prefault(checked, def as z.core.input<T>),
    kind,
    default: def,
    meta,
    ...(choices ? { choices } : {}),
  };
}

/** Field builders, one per flag kind. Each takes the default, the flag metadata and value rules. */
export const opt = {
  string: (def: string, meta: FlagMeta, ...rules: ValueRule<string>[]) => field(z.string(), "string", def, meta, rules),
  path: (def: string, meta: FlagMeta, ...rules: ValueRule<string>[]) => field(z.string(), "path", def, meta, rules),
  int: (def: number, meta: FlagMeta, ...rules: ValueRule<number>[]) => field(z.number(), "int", def, meta, rules),
  float: (def: number, meta: FlagMeta, ...rules: ValueRule<number>[]) => field(z.number(), "float", def, meta, rules),
  port: (def: number, meta: FlagMeta, ...rules: ValueRule<number>[]) => field(z.number(), "port", def, meta, rules),
  /** Milliseconds; the flag takes Go durations (`500ms`, `10s`, `1m`). */
  duration: (def: number, meta: FlagMeta, ...rules: ValueRule<number>[]) =>
    field(z.number(), "duration", def, meta, rules),
  boolean: (def: boolean, meta: FlagMeta) => field(z.boolean(), "boolean", def, meta, []),
  list: (def: readonly string[], meta: FlagMeta, ...rules: ValueRule<string[]>[]) =>
    field(z.array(z.string()), "list", [...def], meta, rules),
  /** One of `values` (a string flag whose help lists them). */
  choice: <const V extends readonly [string, ...string[]]>(values: V, def: V[number], meta: FlagMeta) =>
    field(
      z.enum(values, {
        error: (issue) => `"${String(issue.input)}" is not one of ${values.filter((v) => v !== "").join(", ")}`,
      }),
      "string",
      def,
      meta,
      [],
      values,
    ),
};

/** The zod shape of a field table. */
export type ShapeOf<F extends Record<string, OptionField>> = { -readonly [K in keyof F]: F[K]["type"] };

/** Report a problem with the option `key` (the message names its flag). */
export type Report<K extends string> = (key: K, why: string) => void;

/** A component's option schema. */
export interface OptionsSchema<F extends Record<string, OptionField>> {
  readonly fields: F;
  /** The zod object: field types, defaults and rules (not the cross-field rules). */
  readonly object: z.ZodMiniObject<ShapeOf<F>>;
  /** The flag table derived from the fields (help, docs, Go compatibility, flag parsing). */
  readonly specs: readonly OptionSpec[];
  /** Rules between fields, run on the values with defaults applied. */
  readonly crossRules: (o: OptionsOf<F>, bad: Report<keyof F & string>) => void;
}

/** The validated options of a field table (every default applied). */
export type OptionsOf<F extends Record<string, OptionField>> = z.output<z.ZodMiniObject<ShapeOf<F>>>;
/** What a caller may give for a field table (every option with a default may be left out). */
export type OptionsInputOf<F extends Record<string, OptionField>> = z.input<z.ZodMiniObject<ShapeOf<F>>>;

/** Define a component's options: its fields (in flag-reference order) and its cross-field rules. */
export function defineOptions<F extends Record<string, OptionField>>(
  fields: F,
  crossRules: OptionsSchema<F>["crossRules"] = () => undefined,
): OptionsSchema<F> {
  const shape = Object.fromEntries(Object.entries(fields).map(([k, f]) => [k, f.type])) as ShapeOf<F>;
  const specs = Object.entries(fields).map(([key, f]): OptionSpec => ({
    key,
    kind: f.kind,
    ...(f.choices ? { choices: f.choices } : {}),
    default: copyDefault(f.default),
    ...f.meta,
  }));
  return { fields, object: z.object(shape), specs, crossRules };
}

/**
 * Validate `input` against `schema`: fill in defaults, check every field and the cross-field
 * rules, plus `extra` problems (checks that live with their owner, e.g. the agent's destination
 * rules). Throws one ConfigError listing every problem, each naming its flag.
 */
export function parseOptions<F extends Record<string, OptionField>>(
  schema: OptionsSchema<F>,
  input: unknown,
  extra: (o: OptionsOf<F>) => string[] = () => [],
): OptionsOf<F> {
  const result = z.safeParse(schema.object, input);
  const flagOf = (key: PropertyKey | undefined): string =>
    (typeof key === "string" ? schema.fields[key]?.meta.flag : undefined) ?? String(key);
  const problems = result.success ? [] : result.error.issues.map((i) => `--${flagOf(i.path[0])}: ${i.message}`);
  // The cross-field rules also run when a field is bad, on the given values over the defaults,
  // so one run reports everything; a rule tripping over a badly typed field is then ignored.
  const o = result.success ? result.data : withDefaults(schema, input);
  try {
    schema.crossRules(o, (key, why) => void problems.push(`--${flagOf(key)}: ${why}`));
    problems.push(...extra(o));
  } catch (err) {
    if (result.success) throw err;
  }
  throwConfigProblems(problems);
  if (!result.success) throw result.error; // not reached: a failed parse has issues
  return result.data;
}

/** A default as a value (a list default is copied, so no caller shares it). */
function copyDefault(d: OptionField["default"]): string | number | boolean | string[] {
  return typeof d === "object" ? [...d] : d;
}

/** The default of every option of `schema`. */
export function defaultsOf<F extends Record<string, OptionField>>(schema: OptionsSchema<F>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(schema.fields).map(([k, f]) => [k, copyDefault(f.default)]));
}

/**
 * `input` over the defaults of `schema`, NOT validated: for a component that needs its settings
 * before it validates them (the agent validates when it starts), and for reporting every problem.
 */
export function withDefaults<F extends Record<string, OptionField>>(
  schema: OptionsSchema<F>,
  input: unknown,
): OptionsOf<F> {
  return { ...defaultsOf(schema), ...definedEntries(input) } as OptionsOf<F>;
}

function definedEntries(input: unknown): Record<string, unknown> {
  if (typeof input !== "object" || input === null) return {};
  return Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined));
}

/** Rules shared by several components. */
export const rules = {
  /** At least `min` ms. */
  atLeastMs:
    (min: number): ValueRule<number> =>
    (ms) =>
      !Number.isFinite(ms) || ms < min ? `must be at least ${min} ms (got ${ms})` : undefined,
  notNegative: ((v) => (!Number.isFinite(v) || v < 0 ? "must not be negative" : undefined)) as ValueRule<number>,
  /** A TCP port; 0 (pick one / disabled) only when `allowZero`. */
  port:
    (allowZero: boolean): ValueRule<number> =>
    (port) =>
      !Number.isInteger(port) || port < (allowZero ? 0 : 1) || port > 65535
        ? `${port} is not a port number (${allowZero ? 0 : 1}-65535)`
        : undefined,
  nonEmpty:
    (why = "must not be empty"): ValueRule<string> =>
    (v) =>
      v === "" ? why : undefined,
};

/** `--enable-profiling`, the same on server and agent. */
export const ENABLE_PROFILING_FIELD = opt.boolean(false, {
  flag: "enable-profiling",
  goCompatible: true,
  goDifference: "serves /debug/process (memory, descriptors, handles) where Go serves pprof",
  description:
    "Serve /debug/process on the admin port: memory (?gc=1 collects garbage first), open file descriptors and active handles, as JSON (Go serves pprof here)",
});

/** `--enable-contention-profiling`, the same on server and agent (a Go flag with nothing to do here). */
export const ENABLE_CONTENTION_PROFILING_FIELD = opt.boolean(false, {
  flag: "enable-contention-profiling",
  description: "Go: contention profiling at the admin port's /debug/pprof/block",
  goNote: "accepted, no effect: there is no Go runtime to profile (--enable-profiling serves /debug/process)",
});
