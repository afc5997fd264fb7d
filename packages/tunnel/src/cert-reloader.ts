/**
 * Certificate hot reload for long-running TLS endpoints: files polled by content hash, a changed set
 * that checks out handed to `apply`, a bad one refused (the old material stays, one error).
 * Design: docs/design/decisions.md#certificate-reload-polling-content-setsecurecontext-per-listener
 */
import { X509Certificate, createHash } from "node:crypto";
import { errorMessage } from "@cluster-proxy/errors";
import { realClock, type Logger, type TimerHandle, type Timers } from "@cluster-proxy/kit";
import {
  checkTlsMaterial,
  PEM_CERTIFICATE,
  readTlsFiles,
  TlsFileError,
  type FlagFile,
  type TlsFiles,
  type TlsMaterial,
} from "./tls-files.js";

/** What a certificate file holds, for logs and metrics. */
export interface CertificateInfo {
  /** Expiry of the leaf (the first certificate of the file). */
  notAfter: Date;
  serialNumber: string;
  fingerprint256: string;
  subject: string;
}

/** The sha256 of a set's contents (what the reloader compares between polls). */
export function tlsDigest(material: TlsMaterial): string {
  const h = createHash("sha256");
  for (const part of [material.cert, material.key, material.ca]) {
    h.update(part ? String(part.length) : "-");
    h.update(":");
    if (part) h.update(part);
  }
  return h.digest("hex");
}

/** Information about the leaf of a certificate file's contents (undefined when unreadable). */
export function certificateInfo(cert: Buffer | undefined): CertificateInfo | undefined {
  if (!cert) return undefined;
  const block = cert.toString("latin1").match(PEM_CERTIFICATE)?.[0];
  if (!block) return undefined;
  try {
    const x = new X509Certificate(block);
    return {
      notAfter: new Date(x.validTo),
      serialNumber: x.serialNumber,
      fingerprint256: x.fingerprint256,
      subject: x.subject.replace(/\n/g, ", "),
    };
  } catch {
    return undefined;
  }
}

/** The earliest expiry among the certificates of a PEM file (a CA bundle), undefined when none is readable. */
export function earliestExpiry(pem: Buffer | undefined): Date | undefined {
  let earliest: Date | undefined;
  for (const block of pem?.toString("latin1").match(PEM_CERTIFICATE) ?? []) {
    try {
      const notAfter = new Date(new X509Certificate(block).validTo);
      if (!earliest || notAfter < earliest) earliest = notAfter;
    } catch {
      /* unreadable blocks are reported by checkTlsMaterial */
    }
  }
  return earliest;
}

/** Options of {@link CertReloader}. */
export interface CertReloaderOptions {
  /** What the material is for, in logs (e.g. "agent port"). */
  what: string;
  files: TlsFiles;
  /** Poll interval; 0 disables polling ({@link CertReloader.check} still works). */
  intervalMs: number;
  /** The material in use now (its digest is the starting point). */
  initial: TlsMaterial;
  /** Install new material. A throw counts as a failed reload and keeps the old digest. */
  apply(material: TlsMaterial): void;
  /** Called once per reload attempt of changed content (for metrics). */
  onResult?(result: "success" | "failure", material: TlsMaterial | undefined): void;
  logger: Logger;
  /** The polls' timers (tests drive them; default the kit's `realClock`). */
  timers?: Timers;
  readFile?: (path: string) => Promise<Buffer>;
}

/** Result of one {@link CertReloader.check}. */
export type ReloadResult = "unchanged" | "reloaded" | "failed" | "busy";

/** Polls a TLS file set and installs changed material that checks out; see the module comment. */
export class CertReloader {
  private loadedDigest: string;
  /** Digest (or read error) of the last refused content, so it is reported once. */
  private refused: string | undefined;
  private timer: TimerHandle;
  private running = false;
  private readonly timers: Timers;

  constructor(private readonly options: CertReloaderOptions) {
    this.loadedDigest = tlsDigest(options.initial);
    this.timers = options.timers ?? realClock;
  }

  /** Start polling every `intervalMs` (no-op when 0). */
  start(): void {
    if (this.options.intervalMs <= 0 || this.timer !== undefined) return;
    this.arm();
  }

  stop(): void {
    if (this.timer !== undefined) this.timers.clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** The next poll, `intervalMs` after the last one ended (unless stopped or restarted meanwhile). */
  private arm(): void {
    const handle = this.timers.setTimeout(() => {
      void this.check().finally(() => {
        if (this.timer === handle) this.arm();
      });
    }, this.options.intervalMs);
    this.timer = handle;
  }

  /** Read the files once; reload when their content changed. Never throws. */
  async check(): Promise<ReloadResult> {
    if (this.running) return "busy";
    this.running = true;
    try {
      return await this.checkOnce();
    } finally {
      this.running = false;
    }
  }

  private async checkOnce(): Promise<ReloadResult> {
    const { files, logger, what } = this.options;
    let material: TlsMaterial;
    try {
      material = await readTlsFiles(files, this.options.readFile);
    } catch (err) {
      return this.refuse(`read:${errorMessage(err)}`, err as Error, undefined);
    }
    const digest = tlsDigest(material);
    if (digest === this.loadedDigest) {
      this.refused = undefined;
      return "unchanged";
    }
    if (digest === this.refused) return "failed";
    // The files are read one after another: a Secret volume's atomic swap between two reads gives a
    // mix of old and new. Changed content counts only once a second read gives the same.
    try {
      if (tlsDigest(await readTlsFiles(files, this.options.readFile)) !== digest) return "unchanged";
    } catch {
      return "unchanged";
    }
    try {
      checkTlsMaterial(files, material);
      this.options.apply(material);
    } catch (err) {
      return this.refuse(digest, err as Error, material);
    }
    this.loadedDigest = digest;
    this.refused = undefined;
    const cert = certificateInfo(material.cert);
    logger.info(
      {
        what,
        files: Object.values(files).map((f: FlagFile) => `${f.flag}=${f.path}`),
        ...(cert
          ? { serial: cert.serialNumber, fingerprint: cert.fingerprint256, notAfter: cert.notAfter.toISOString() }
          : {}),
      },
      `reloaded TLS certificates of the ${what}`,
    );
    this.options.onResult?.("success", material);
    return "reloaded";
  }

  private refuse(key: string, err: Error, material: TlsMaterial | undefined): ReloadResult {
    if (this.refused === key) return "failed";
    this.refused = key;
    const fields: Record<string, unknown> = { what: this.options.what, err: err.message };
    if (err instanceof TlsFileError) Object.assign(fields, { code: err.code, flag: err.flag, file: err.path });
    this.options.logger.error(
      fields,
      `refused new TLS certificates of the ${this.options.what}; keeping the ones in use`,
    );
    this.options.onResult?.("failure", material);
    return "failed";
  }
}
