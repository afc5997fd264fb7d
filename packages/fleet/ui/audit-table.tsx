/** A cluster's recent audit records, newest first; denials carry a label, not only a colour. */
import type { AuditEntry } from "../src/fleet-types.js";
import { relative } from "./format.js";

function target(e: AuditEntry): string {
  if (e.resource !== "") return e.resource;
  return e.path ?? "";
}

/** The audit view, or why the viewer may not see it. */
export function AuditTable(props: { audit: AuditEntry[] | null; now: number }) {
  if (props.audit === null)
    return (
      <p class="notice" data-testid="audit-hidden">
        You may not see this cluster&apos;s audit records (needs <code>get</code> on{" "}
        <code>managedclusters/proxy-audit</code>).
      </p>
    );
  if (props.audit.length === 0)
    return (
      <p class="notice" data-testid="audit-empty">
        No audit records yet.
      </p>
    );
  const denied = props.audit.filter((e) => e.denied).length;
  return (
    <div class="audit-scroll">
      <table class="audit" data-testid="audit-table">
        <caption>
          {props.audit.length} recent request{props.audit.length === 1 ? "" : "s"}
          {denied > 0 ? `, ${denied} denied` : ""}
        </caption>
        <thead>
          <tr>
            <th scope="col">Time</th>
            <th scope="col">User</th>
            <th scope="col">Verb</th>
            <th scope="col">Resource or path</th>
            <th scope="col">Status</th>
            <th scope="col">Duration</th>
          </tr>
        </thead>
        <tbody>
          {props.audit.map((e, i) => (
            <tr
              key={`${e.time}-${i}`}
              class={e.denied ? "denied" : undefined}
              data-testid="audit-row"
              data-denied={String(e.denied)}
            >
              <td title={e.time}>{relative(e.time, props.now)}</td>
              <td class="ellipsis" title={e.user}>
                {e.user}
              </td>
              <td>{e.verb}</td>
              <td class="ellipsis" title={target(e)}>
                {target(e)}
              </td>
              <td class="num">
                {e.status}
                {e.denied && (
                  <span class="badge-denied" title={e.reason}>
                    denied
                  </span>
                )}
              </td>
              <td class="num">{e.durationMs < 10 ? e.durationMs.toFixed(1) : Math.round(e.durationMs)} ms</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
