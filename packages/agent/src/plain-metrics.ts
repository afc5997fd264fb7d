/**
 * The agent's metrics registry: plain numbers rendered in Prometheus' text format (0.0.4) byte for byte
 * as prom-client 15 renders the same series, so the agent does not load prom-client.
 * Design: docs/design/decisions.md#the-agent-bundled-and-v8-flags-of-its-own-issue-27-4a
 */

/** Label values of a series, by label name. */
export type LabelValues<L extends string> = Partial<Record<L, string>>;

/** One series of a metric, as {@link PlainMetric.get} returns it (prom-client's shape). */
export interface MetricValue<L extends string> {
  labels: LabelValues<L>;
  value: number;
}

/** What a metric is, as the metrics reference lists it (scripts/metrics-reference.ts). */
export interface MetricDescription {
  readonly name: string;
  readonly help: string;
  readonly type: "counter" | "gauge" | "histogram";
  readonly labelNames: readonly string[];
}

/** A metric of a {@link PlainRegistry}. */
export interface PlainMetric<L extends string = string> extends MetricDescription {
  /** Its series (a histogram: the count of observations), after any collect hook ran. */
  get(): Promise<{ name: string; help: string; type: string; values: MetricValue<L>[] }>;
  /** Its lines of the exposition (HELP, TYPE, series), without a trailing newline. */
  render(): string;
}

const escapeText = (s: string): string => s.replaceAll("\\", "\\\\").replaceAll("\n", "\\n");
const escapeLabel = (s: string): string => escapeText(s).replaceAll('"', '\\"');

/** A sample value as prom-client writes it. */
function sampleValue(v: number): string {
  if (Number.isNaN(v)) return "Nan";
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  return `${v}`;
}

function labelText(labels: Readonly<Record<string, string | number | undefined>>): string {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${typeof v === "string" ? escapeLabel(v) : String(v)}"`);
  return parts.length > 0 ? `{${parts.join(",")}}` : "";
}

/** Counters and gauges: one number per label set. */
abstract class SeriesMetric<L extends string> implements PlainMetric<L> {
  abstract readonly type: "counter" | "gauge";
  protected readonly series = new Map<string, MetricValue<L>>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly L[] = [],
  ) {
    if (labelNames.length === 0) this.series.set("", { labels: {}, value: 0 });
  }

  /** The series of `labels` (created at 0 in the order first seen). */
  protected entry(labels: LabelValues<L>): MetricValue<L> {
    const key = this.labelNames.map((n) => `${n}:${labels[n] ?? ""}`).join(",");
    let e = this.series.get(key);
    if (e === undefined) {
      e = { labels, value: 0 };
      this.series.set(key, e);
    }
    return e;
  }

  /** Positional label values, in label-name order (prom-client's `labels(...)`). */
  protected named(values: readonly string[]): LabelValues<L> {
    const labels: LabelValues<L> = {};
    this.labelNames.forEach((n, i) => {
      if (values[i] !== undefined) labels[n] = values[i];
    });
    return labels;
  }

  /** Runs before the series are read (a counter's collect hook). */
  protected collect(): void {}

  get(): Promise<{ name: string; help: string; type: string; values: MetricValue<L>[] }> {
    this.collect();
    return Promise.resolve({ name: this.name, help: this.help, type: this.type, values: [...this.series.values()] });
  }

  render(): string {
    this.collect();
    const name = escapeText(this.name);
    const lines = [`# HELP ${name} ${escapeText(this.help)}`, `# TYPE ${name} ${this.type}`];
    for (const s of this.series.values()) lines.push(`${name}${labelText(s.labels)} ${sampleValue(s.value)}`);
    return lines.join("\n");
  }
}

/** A counter: only goes up. */
export class PlainCounter<L extends string = string> extends SeriesMetric<L> {
  readonly type = "counter";

  constructor(
    name: string,
    help: string,
    labelNames: readonly L[] = [],
    private readonly onCollect?: (counter: PlainCounter<L>) => void,
  ) {
    super(name, help, labelNames);
  }

  /** Add `value` (default 1) to the series of `labels` (none: the metric without labels). */
  inc(labels?: LabelValues<L> | number, value = 1): void {
    if (typeof labels === "number") return this.inc({}, labels);
    if (value < 0) throw new Error(`${this.name}: a counter cannot be decreased (${value})`);
    this.entry(labels ?? {}).value += value;
  }

  /** The series of these label values, in label-name order. */
  labels(...values: string[]): { inc(value?: number): void } {
    const labels = this.named(values);
    return { inc: (value = 1) => this.inc(labels, value) };
  }

  protected override collect(): void {
    this.onCollect?.(this);
  }
}

/** A gauge: set to a value. */
export class PlainGauge<L extends string = string> extends SeriesMetric<L> {
  readonly type = "gauge";

  /** Set the series of `labels` (or the metric without labels) to `value`. */
  set(labels: LabelValues<L> | number, value?: number): void {
    if (typeof labels === "number") this.entry({}).value = labels;
    else this.entry(labels).value = value ?? 0;
  }
}

/** A histogram without labels. */
export class PlainHistogram implements PlainMetric<never> {
  readonly type = "histogram";
  readonly labelNames: readonly never[] = [];
  private readonly bounds: readonly number[];
  private readonly counts: number[];
  private sum = 0;
  private count = 0;

  constructor(
    readonly name: string,
    readonly help: string,
    buckets: readonly number[],
  ) {
    this.bounds = [...buckets].sort((a, b) => a - b);
    this.counts = this.bounds.map(() => 0);
  }

  /** Count one observation of `value`. */
  observe(value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`${this.name}: value is not a finite number: ${value}`);
    const i = this.bounds.findIndex((b) => value <= b);
    if (i >= 0) this.counts[i]! += 1;
    this.sum += value;
    this.count += 1;
  }

  get(): Promise<{ name: string; help: string; type: string; values: MetricValue<never>[] }> {
    return Promise.resolve({
      name: this.name,
      help: this.help,
      type: this.type,
      values: [{ labels: {}, value: this.count }],
    });
  }

  render(): string {
    const name = escapeText(this.name);
    const lines = [`# HELP ${name} ${escapeText(this.help)}`, `# TYPE ${name} histogram`];
    let acc = 0;
    this.bounds.forEach((b, i) => {
      acc += this.counts[i]!;
      lines.push(`${name}_bucket${labelText({ le: b })} ${sampleValue(acc)}`);
    });
    lines.push(
      `${name}_bucket{le="+Inf"} ${sampleValue(this.count)}`,
      `${name}_sum ${sampleValue(this.sum)}`,
      `${name}_count ${sampleValue(this.count)}`,
    );
    return lines.join("\n");
  }
}

/** The metrics of one agent and their exposition (what `/metrics` serves). */
export class PlainRegistry {
  /** The content type of {@link PlainRegistry.metrics}: Prometheus text format 0.0.4. */
  readonly contentType = "text/plain; version=0.0.4; charset=utf-8";
  private readonly byName = new Map<string, PlainMetric>();

  /** Add `metric` (its name must be new here); returns it. */
  register<M extends PlainMetric>(metric: M): M {
    if (this.byName.has(metric.name)) throw new Error(`a metric named ${metric.name} is already registered`);
    this.byName.set(metric.name, metric);
    return metric;
  }

  /** The metrics in registration order. */
  getMetricsAsArray(): PlainMetric[] {
    return [...this.byName.values()];
  }

  /** The metric named `name`. */
  getSingleMetric(name: string): PlainMetric | undefined {
    return this.byName.get(name);
  }

  /** The exposition of every metric, in registration order. */
  metrics(): Promise<string> {
    return Promise.resolve(
      `${this.getMetricsAsArray()
        .map((m) => m.render())
        .join("\n\n")}\n`,
    );
  }
}
