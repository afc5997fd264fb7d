/**
 * A small uPlot chart of one or two per-second series over the detail's 15 minutes. Colours come
 * from the page's CSS custom properties, so the chart follows the light or dark scheme; it is
 * rebuilt when the scheme changes and resized with its container.
 */
import type { ComponentChildren } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import uPlot from "uplot";

/** One line of a chart. */
export interface ChartLine {
  label: string;
  /** One value per x. */
  values: number[];
  /** The CSS custom property holding its colour, e.g. "--chart-1". */
  colorVar: string;
}

const HEIGHT = 120;

function cssVar(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function useColorScheme(): string {
  const query = "(prefers-color-scheme: dark)";
  const [scheme, setScheme] = useState(() => (matchMedia(query).matches ? "dark" : "light"));
  useEffect(() => {
    const mq = matchMedia(query);
    const on = (): void => setScheme(mq.matches ? "dark" : "light");
    mq.addEventListener("change", on);
    return () => mq.removeEventListener("change", on);
  }, []);
  return scheme;
}

/** A titled chart; extra attributes (test hooks) go on its container. */
export function TrafficChart(props: {
  title: string;
  /** Unix seconds, one per point. */
  xs: number[];
  lines: ChartLine[];
  /** Axis and legend values. */
  format: (v: number) => string;
  /** A sentence a screen reader reads instead of the canvas. */
  summary: string;
  testId: string;
  attrs?: Record<string, string>;
  children?: ComponentChildren;
}) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const scheme = useColorScheme();
  const data: uPlot.AlignedData = [props.xs, ...props.lines.map((l) => l.values)];
  const latest = useRef(data);
  latest.current = data;
  const format = useRef(props.format);
  format.current = props.format;
  const shape = props.lines.map((l) => `${l.label}:${l.colorVar}`).join(",");

  useEffect(() => {
    const el = box.current;
    if (el === null) return;
    const axis = cssVar("--muted");
    const grid = cssVar("--grid");
    const opts: uPlot.Options = {
      width: Math.max(200, el.clientWidth),
      height: HEIGHT,
      legend: { show: true },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } },
      series: [
        {},
        ...props.lines.map((l) => ({
          label: l.label,
          stroke: cssVar(l.colorVar),
          width: 1.5,
          points: { show: false },
          value: (_u: uPlot, v: number | null) => (v === null ? "—" : format.current(v)),
        })),
      ],
      axes: [
        { stroke: axis, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } },
        {
          stroke: axis,
          size: 56,
          grid: { stroke: grid, width: 1 },
          ticks: { stroke: grid, width: 1 },
          values: (_u, splits) => splits.map((v) => format.current(v)),
        },
      ],
    };
    const u = new uPlot(opts, latest.current, el);
    plot.current = u;
    const ro = new ResizeObserver(() => u.setSize({ width: Math.max(200, el.clientWidth), height: HEIGHT }));
    ro.observe(el);
    return () => {
      ro.disconnect();
      u.destroy();
      plot.current = null;
    };
    // The lines' shape and the scheme rebuild the chart; new values only update it (below).
  }, [shape, scheme]);

  useEffect(() => {
    plot.current?.setData(data);
  });

  return (
    <figure class="chart" data-testid={props.testId} {...props.attrs}>
      <figcaption>{props.title}</figcaption>
      <div class="chart-canvas" ref={box} role="img" aria-label={props.summary} />
      {props.children}
    </figure>
  );
}
