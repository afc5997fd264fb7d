/**
 * Reads a fleet event stream (`/-/fleet/api/events`) as the page does, for tests: every event in
 * order, and a bounded wait for the first one a predicate picks.
 */
import type { ClientRequest } from "node:http";

/** One event: its name and its parsed JSON data. */
export interface FleetEvent {
  name: string;
  data: unknown;
}

/** The events of one stream. */
export interface FleetEvents {
  /** Resolves with the response's status code. */
  opened: Promise<number>;
  events: FleetEvent[];
  /** The first value `pick` returns for an event so far or to come, within `ms` (default 10 s). */
  waitFor<T>(pick: (e: FleetEvent) => T | undefined, ms?: number): Promise<T>;
  close(): void;
}

/** Read the event stream answering `req` (a GET of `/-/fleet/api/events`, over http or https). */
export function readFleetEvents(req: ClientRequest): FleetEvents {
  const events: FleetEvent[] = [];
  const waiters: (() => void)[] = [];
  const opened = new Promise<number>((resolve, reject) => {
    req.on("error", reject);
    req.on("response", (res) => {
      resolve(res.statusCode ?? 0);
      let buf = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => {
        buf += d;
        let i: number;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const name = /^event: (.*)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (name && data) events.push({ name, data: JSON.parse(data) as unknown });
        }
        for (const w of waiters.splice(0)) w();
      });
    });
  });
  const waitFor = async <T>(pick: (e: FleetEvent) => T | undefined, ms = 10_000): Promise<T> => {
    const deadline = Date.now() + ms;
    for (;;) {
      for (const e of events) {
        const v = pick(e);
        if (v !== undefined) return v;
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no such event within ${ms} ms; got ${JSON.stringify(events.map((e) => e.name))}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  };
  return { opened, events, waitFor, close: () => req.destroy() };
}
