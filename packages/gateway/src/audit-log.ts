/**
 * The audit trail: one JSON line per request when it ends, and for a long-running one (a watch,
 * `logs -f`, an upgraded stream: exec, attach, port-forward) one more when it starts, so that a session cut by
 * a crash leaves a record; to standard output or to a file rotated by size (`<file>.1` is the newest rotated file; at most
 * --audit-log-max-files are kept). A record never holds a token, a header value or a body.
 */
import { closeSync, openSync, renameSync, rmSync, statSync, writeSync } from "node:fs";
import type { AuthenticationMethod } from "./authentication.js";

/** One audit record: the line written when a request ends. */
export interface AuditRecord {
  /** `end` (always, on lines the gateway writes; the start line of a long-running request is an {@link AuditStart}). */
  stage?: "end";
  time: string;
  requestID: string;
  user?: string;
  groups?: string[];
  authentication?: AuthenticationMethod;
  cluster?: string;
  method: string;
  verb?: string;
  resource?: string;
  subresource?: string;
  namespace?: string;
  name?: string;
  /** The path (without the query) of a kube-apiserver request that addresses no resource (`/version`). */
  path?: string;
  /** `<scheme>://<name>.<namespace>:<port>` for a Service request. */
  service?: string;
  impersonatedUser?: string;
  impersonatedGroups?: string[];
  upgrade?: boolean;
  code: number;
  bytesIn: number;
  bytesOut: number;
  durationMs: number;
  decision: "allow" | "deny" | "error";
  reason?: string;
}

/**
 * The line written when a long-running request starts (admitted, its relay begins): the fields of
 * its end record known by then, with the same `requestID`.
 */
export type AuditStart = Omit<AuditRecord, "stage" | "code" | "bytesIn" | "bytesOut" | "durationMs" | "reason"> & {
  stage: "start";
};

/** One line of the audit log. */
export type AuditLine = AuditRecord | AuditStart;

/** Where records go. */
export interface AuditSink {
  write(record: AuditLine): void;
  close(): void;
}

/** Writes lines to a stream-like `write` (standard output). */
export class StreamAuditSink implements AuditSink {
  constructor(private readonly out: (line: string) => void) {}
  write(record: AuditLine): void {
    this.out(`${JSON.stringify(record)}\n`);
  }
  close(): void {}
}

/** Writes lines to a file, rotating it when the next line would make it larger than `maxBytes`. */
export class FileAuditSink implements AuditSink {
  private fd: number;
  private size: number;

  constructor(
    private readonly path: string,
    private readonly maxBytes: number,
    private readonly maxFiles: number,
  ) {
    this.fd = openSync(path, "a", 0o600);
    this.size = statSync(path).size;
  }

  write(record: AuditLine): void {
    const line = Buffer.from(`${JSON.stringify(record)}\n`);
    if (this.size > 0 && this.size + line.length > this.maxBytes) this.rotate();
    writeSync(this.fd, line);
    this.size += line.length;
  }

  private rotate(): void {
    closeSync(this.fd);
    if (this.maxFiles <= 0) rmSync(this.path, { force: true });
    else {
      rmSync(`${this.path}.${this.maxFiles}`, { force: true });
      for (let i = this.maxFiles - 1; i >= 1; i--) {
        try {
          renameSync(`${this.path}.${i}`, `${this.path}.${i + 1}`);
        } catch {
          /* not there yet */
        }
      }
      renameSync(this.path, `${this.path}.1`);
    }
    this.fd = openSync(this.path, "a", 0o600);
    this.size = 0;
  }

  close(): void {
    closeSync(this.fd);
  }
}

/** The sink of --audit-log (`-`: standard output). */
export function auditSinkOf(path: string, maxSizeMiB: number, maxFiles: number): AuditSink {
  if (path === "-" || path === "") return new StreamAuditSink((line) => process.stdout.write(line));
  return new FileAuditSink(path, maxSizeMiB * 1024 * 1024, maxFiles);
}
