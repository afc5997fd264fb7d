/**
 * The building blocks of the component schemas (an option is a field plus its flag metadata), from
 * which come the options' type ({@link OptionsOf}), defaults, validation, `--help` and the flag reference.
 * Design: docs/design/decisions.md#option-schemas-one-per-component-hand-written-builders-not-zod-cluster-names-are-dns-1123-labels
 */
import { flagValues, formatFlagValue, throwConfigProblems, type OptionKind, type OptionSpec } from "./options.js";

/** A flag's description and Go notes: everything of an {@link OptionSpec} the schema does not own. */
export type FlagMeta = Omit<OptionSpec, "key" | "kind" | "default" | "choices">;

/**
 * A rule about one value: why it is wrong (without the flag, which is added; several reasons for
 * a list), or undefined.
 */
export type ValueRule<T> = (value: T) => string | readonly string[] | undefined;

/** A field's flag metadata with its flag name as the literal type `Flag` (e.g. `"server-port"`). */
export type NamedFlagMeta<Flag extends string> = FlagMeta & { readonly flag: Flag };

/**
 * One option: its value type `V` (with default and rules), the kind its flag parses as, and its
 * flag, whose name is the literal type `Flag`, so {@link argsFor} knows every schema's flags.
 */
export interface OptionField<V = unknown, Flag extends string = string> {
  readonly kind: OptionKind;
  /** Undefined for an option without a default ({@link opt}.optional): left out, it is undefined. */
  readonly default: string | number | boolean | readonly string[] | undefined;
  readonly choices?: readonly string[];
  readonly meta: NamedFlagMeta<Flag>;
  /** Why `value` (already defaulted) is not a valid value of this option: its type, then its rules. */
  readonly problems: (value: unknown) => string[];
  /** Type-level only: the option's value type. */
  readonly valueType?: V;
}

/** The type check of a field: why a value is not of its type, or undefined. */
type TypeCheck = (value: unknown) => string | undefined;

function describe(value: unknown): string {
  return Array.isArray(value) ? "array" : value === null ? "null" : typeof value;
}

const is =
  (type: "string" | "number" | "boolean"): TypeCheck =>
  (value) =>
    typeof value === type && (type !== "number" || Number.isFinite(value))
      ? undefined
      : `expected a ${type}, got ${describe(value)}`;

const isStringList: TypeCheck = (value) =>
  Array.isArray(value) && value.every((v) => typeof v === "string")
    ? undefined
    : `expected a list of strings, got ${describe(value)}`;

function field<V, Flag extends string>(
  isType: TypeCheck,
  kind: OptionKind,
  def: V & OptionField["default"],
  meta: NamedFlagMeta<Flag>,
  rules: readonly ValueRule<V>[],
  choices?: readonly string[],
): OptionField<V, Flag> {
  return {
    kind,
    default: def,
    meta,
    ...(choices ? { choices } : {}),
    // The rules run on a value of the right type only; a default passes them too (an empty
    // required path is refused whether it was given empty or left out).
    problems: (value) => {
      const wrongType = isType(value);
      if (wrongType !== undefined) return [wrongType];
      return rules.flatMap((rule) => {
        const why = rule(value as V);
        return typeof why === "string" ? [why] : [...(why ?? [])];
      });
    },
  };
}

/**
 * Field builders, one per flag kind. Each takes the default, the flag metadata and value rules;
 * the flag's name is kept as a literal type.
 */
export const opt = {
  string: <Flag extends string>(def: string, meta: NamedFlagMeta<Flag>, ...rules: ValueRule<string>[]) =>
    field(is("string"), "string", def, meta, rules),
  path: <Flag extends string>(def: string, meta: NamedFlagMeta<Flag>, ...rules: ValueRule<string>[]) =>
    field(is("string"), "path", def, meta, rules),
  int: <Flag extends string>(def: number, meta: NamedFlagMeta<Flag>, ...rules: ValueRule<number>[]) =>
    field(is("number"), "int", def, meta, rules),
  float: <Flag extends string>(def: number, meta: NamedFlagMeta<Flag>, ...rules: ValueRule<number>[]) =>
    field(is("number"), "float", def, meta, rules),
  port: <Flag extends string>(def: number, meta: NamedFlagMeta<Flag>, ...rules: ValueRule<number>[]) =>
    field(is("number"), "port", def, meta, rules),
  /** Milliseconds; the flag takes Go durations (`500ms`, `10s`, `1m`). */
  duration: <Flag extends string>(def: number, meta: NamedFlagMeta<Flag>, ...rules: ValueRule<number>[]) =>
    field(is("number"), "duration", def, meta, rules),
  boolean: <Flag extends string>(def: boolean, meta: NamedFlagMeta<Flag>) =>
    field(is("boolean"), "boolean", def, meta, []),
  list: <Flag extends string>(def: readonly string[], meta: NamedFlagMeta<Flag>, ...rules: ValueRule<string[]>[]) =>
    field<string[], Flag>(isStringList, "list", [...def], meta, rules),
  /** One of `values` (a string flag whose help lists them). */
  choice: <const V extends readonly [string, ...string[]], Flag extends string>(
    values: V,
    def: V[number],
    meta: NamedFlagMeta<Flag>,
  ) =>
    field<V[number], Flag>(
      (value) =>
        typeof value === "string" && values.includes(value)
          ? undefined
          : `"${String(value)}" is not one of ${values.filter((v) => v !== "").join(", ")}`,
      "string",
      def,
      meta,
      [],
      values,
    ),
  /**
   * `f` without a default: an option left out is undefined (the type is `V | undefined`), and
   * the field's type and rules apply to a value given. For flags whose absence means something
   * (`--kubeconfig`: then $KUBECONFIG), which no default value can say.
   */
  optional: <V, Flag extends string>(f: OptionField<V, Flag>): OptionField<V | undefined, Flag> => ({
    kind: f.kind,
    default: undefined,
    meta: f.meta,
    ...(f.choices ? { choices: f.choices } : {}),
    problems: (value) => (value === undefined ? [] : f.problems(value)),
  }),
};

/** The value type of a field. */
type ValueOf<T> = T extends OptionField<infer V> ? V : never;

/** The flag name of a field (a string literal type). */
export type FlagOf<T> = T extends OptionField<unknown, infer Flag> ? Flag : never;

/**
 * Option values keyed by flag name, each of its field's value type: what {@link argsFor} renders.
 * A flag left out or undefined is not rendered.
 */
export type FlagArgsOf<F extends Record<string, OptionField>> = {
  -readonly [K in keyof F as FlagOf<F[K]>]?: ArgValue<ValueOf<F[K]>> | undefined;
};
/** A value as a command line takes it (a list is only read). */
type ArgValue<V> = V extends string[] ? readonly string[] : V;

/** Report a problem with the option `key` (the message names its flag). */
export type Report<K extends string> = (key: K, why: string) => void;

/** A component's option schema. */
export interface OptionsSchema<F extends Record<string, OptionField>> {
  readonly fields: F;
  /** The flag table derived from the fields (help, docs, Go compatibility, flag parsing). */
  readonly specs: readonly OptionSpec[];
  /** Rules between fields, run on the values with defaults applied. */
  readonly crossRules: (o: OptionsOf<F>, bad: Report<keyof F & string>) => void;
}

/** The validated options of a field table (every default applied). */
export type OptionsOf<F extends Record<string, OptionField>> = { -readonly [K in keyof F]: ValueOf<F[K]> };
/** What a caller may give for a field table (every option has a default, so each may be left out). */
export type OptionsInputOf<F extends Record<string, OptionField>> = {
  -readonly [K in keyof F]?: ValueOf<F[K]> | undefined;
};

/** Define a component's options: its fields (in flag-reference order) and its cross-field rules. */
export function defineOptions<F extends Record<string, OptionField>>(
  fields: F,
  crossRules: OptionsSchema<F>["crossRules"] = () => undefined,
): OptionsSchema<F> {
  const specs = Object.entries(fields).map(([key, f]): OptionSpec => ({
    key,
    kind: f.kind,
    ...(f.choices ? { choices: f.choices } : {}),
    default: copyDefault(f.default),
    ...f.meta,
  }));
  return { fields, specs, crossRules };
}

/**
 * The option sets {@link parseOptions} produced, with the schema that validated them. A set
 * handed on unchanged (flags resolved by the CLI, then given to the component) is not validated
 * a second time; a copy (`{ ...options, x }`) is not in here, so it is.
 */
const validatedSets = new WeakMap<object, object>();

/** Whether `input` is an option set {@link parseOptions} produced with `schema`. */
function validatedBy<F extends Record<string, OptionField>>(
  schema: OptionsSchema<F>,
  input: unknown,
): input is OptionsOf<F> {
  return typeof input === "object" && input !== null && validatedSets.get(input) === schema;
}

/**
 * Validate `input` against `schema`: fill in defaults, check every field and the cross-field
 * rules, plus `extra` problems (checks that live with their owner, e.g. the agent's destination
 * rules). Throws one ConfigError listing every problem, each naming its flag. An option set this
 * function returned for the same schema is not checked again (only `extra` runs on it).
 */
export function parseOptions<F extends Record<string, OptionField>>(
  schema: OptionsSchema<F>,
  input: unknown,
  extra: (o: OptionsOf<F>) => string[] = () => [],
): OptionsOf<F> {
  if (validatedBy(schema, input)) {
    throwConfigProblems(extra(input));
    return input;
  }
  const given = definedEntries(input);
  const flagOf = (key: string): string => schema.fields[key]?.meta.flag ?? key;
  const problems: string[] = [];
  const o: Record<string, unknown> = {};
  for (const [key, f] of Object.entries(schema.fields)) {
    const value = key in given ? given[key] : copyDefault(f.default);
    for (const why of f.problems(value)) problems.push(`--${f.meta.flag}: ${why}`);
    o[key] = Array.isArray(value) ? [...(value as unknown[])] : value;
  }
  // The one place the option type is asserted: every field was checked against its value type
  // above (and the set is not returned unless all passed).
  const options = o as OptionsOf<F>;
  const fieldsOk = problems.length === 0;
  // The cross-field rules also run when a field is bad, so one run reports everything; a rule
  // tripping over a badly typed field is then ignored.
  try {
    schema.crossRules(options, (key, why) => void problems.push(`--${flagOf(key)}: ${why}`));
    problems.push(...extra(options));
  } catch (err) {
    if (fieldsOk) throw err;
  }
  throwConfigProblems(problems);
  validatedSets.set(options, schema);
  return options;
}

/**
 * The options of `schema` from raw flag values (keyed by flag name without dashes) and the
 * environment: flag syntax, environment and defaults (the flag layer, `flagValues`), then the
 * schema's validation, which gives the result its type. Throws one ConfigError naming every bad
 * flag (flag syntax problems first).
 */
export function resolveOptions<F extends Record<string, OptionField>>(
  schema: OptionsSchema<F>,
  raw: Record<string, string | boolean | undefined>,
  env: NodeJS.ProcessEnv = process.env,
): OptionsOf<F> {
  return parseOptions(schema, flagValues(schema.specs, raw, env));
}

/** {@link FlagArgsOf} of a schema: `ArgsOf<typeof serverOptionsSchema>`. */
export type ArgsOf<S> = S extends OptionsSchema<infer F> ? FlagArgsOf<F> : never;

/**
 * The command line (`--flag=value`, in the order of `values`) that gives a component of `schema`
 * these option values: the inverse of {@link resolveOptions} for the flags given. The keys are the
 * schema's flag names and the values their fields' types, so a flag renamed or removed from the
 * schema (or given a value of another type) fails the type check of every caller. Values are
 * written in the flag layer's syntax (durations as Go durations, lists comma-separated).
 */
export function argsFor<F extends Record<string, OptionField>>(
  schema: OptionsSchema<F>,
  values: FlagArgsOf<F>,
): string[] {
  const byFlag = new Map(schema.specs.map((s) => [s.flag, s]));
  return Object.entries(values).flatMap(([flag, value]: [string, unknown]) => {
    if (value === undefined) return [];
    const spec = byFlag.get(flag);
    // Only reachable from an untyped caller: the type of `values` admits the schema's flags only.
    if (spec === undefined) throw new Error(`--${flag} is not a flag of this component`);
    return [`--${flag}=${formatFlagValue(spec, value)}`];
  });
}

/** A default as a value (a list default is copied, so no caller shares it). */
function copyDefault(d: OptionField["default"]): string | number | boolean | string[] | undefined {
  return typeof d === "object" ? [...d] : d;
}

/** The default of every option of `schema`. */
export function defaultsOf<F extends Record<string, OptionField>>(schema: OptionsSchema<F>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(schema.fields).map(([k, f]) => [k, copyDefault(f.default)]));
}

/**
 * `input` over the defaults of `schema`, NOT validated: for tests that build an option set field
 * by field, and for reporting every problem. A component takes its options validated
 * ({@link parseOptions}).
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
