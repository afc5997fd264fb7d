/**
 * The proxy-server's certificate hot reload: one {@link CertReloader} for the agent port
 * (--cluster-cert/--cluster-key/--cluster-ca-cert) and one for the TCP client front doors
 * (--server-cert/--server-key/--server-ca-cert). New material is installed on every TLS listener
 * of its role with `setSecureContext`, built from the options the listener was created with plus
 * the new files, so whatever else the TLS setup configures (versions, ciphers, session tickets)
 * is kept. Established connections keep the context they were accepted with.
 */
import type * as tls from "node:tls";
import type { ServerOptions } from "@cluster-proxy/api";
import {
  CertReloader,
  certificateInfo,
  earliestExpiry,
  type ReloadResult,
  type TlsFiles,
  type TlsMaterial,
} from "@cluster-proxy/tunnel";
import { type Logger } from "@cluster-proxy/kit";
import type { ServerMetrics } from "../metrics.js";

/** A TLS listener and the options it was created with. */
export interface TlsListener {
  server: tls.Server;
  role: "agent" | "front";
  options: tls.SecureContextOptions;
}

/** The reloaders of a server. */
export interface ServerCertReloading {
  /** Check every file set now (tests; the timers do this every --cert-reload-interval). */
  checkNow(): Promise<ReloadResult[]>;
  stop(): void;
}

/**
 * The files of the `--<prefix>-cert`, `--<prefix>-key` and (when given) `--<prefix>-ca-cert` flags:
 * the set read at start and on every reload.
 */
export function serverTlsFiles(
  prefix: "cluster" | "server",
  cert: string,
  key: string,
  ca: string | undefined,
): TlsFiles {
  return {
    cert: { flag: `--${prefix}-cert`, path: cert },
    key: { flag: `--${prefix}-key`, path: key },
    ...(ca !== undefined ? { ca: { flag: `--${prefix}-ca-cert`, path: ca } } : {}),
  };
}

/** Start reloading; `front` is undefined when no TCP front door uses TLS. */
export function startServerCertReloading(deps: {
  options: ServerOptions;
  metrics: ServerMetrics;
  logger: Logger;
  listeners: readonly TlsListener[];
  /** The agent port's files and what start read from them. */
  agent: { files: TlsFiles; material: TlsMaterial };
  /** The TCP client front doors' files and material; undefined when no front door uses TLS. */
  front: { files: TlsFiles; material: TlsMaterial } | undefined;
  /**
   * After new material of `role` was installed: setSecureContext resets what the contexts hold
   * (the ticket keys), and the ticket keys are derived with the CA file's digest.
   */
  afterReload?: (role: TlsListener["role"], material: TlsMaterial) => void;
}): ServerCertReloading {
  const sets: { role: TlsListener["role"]; what: string; files: TlsFiles; material: TlsMaterial }[] = [
    { role: "agent", what: "agent port", ...deps.agent },
  ];
  if (deps.front) sets.push({ role: "front", what: "client front doors", ...deps.front });
  /** Expiry of the leaf (the first certificate of the file) and of the earliest CA of the bundle. */
  const setExpiry = (files: TlsFiles, material: TlsMaterial | undefined): void => {
    const leaf = certificateInfo(material?.cert)?.notAfter;
    const ca = earliestExpiry(material?.ca);
    if (leaf && files.cert) deps.metrics.certificateExpiry.set({ flag: files.cert.flag }, leaf.getTime() / 1000);
    if (ca && files.ca) deps.metrics.certificateExpiry.set({ flag: files.ca.flag }, ca.getTime() / 1000);
  };
  const reloaders = sets.map((set) => {
    setExpiry(set.files, set.material);
    const reloader = new CertReloader({
      what: set.what,
      files: set.files,
      intervalMs: deps.options.certReloadInterval,
      initial: set.material,
      apply: (material) => {
        for (const l of deps.listeners)
          if (l.role === set.role) l.server.setSecureContext({ ...l.options, ...material });
        deps.afterReload?.(set.role, material);
      },
      onResult: (result, material) => {
        deps.metrics.certificateReloads.inc({ listener: set.role, result });
        if (result === "success") setExpiry(set.files, material);
      },
      logger: deps.logger,
    });
    reloader.start();
    return reloader;
  });
  return {
    checkNow: () => Promise.all(reloaders.map((r) => r.check())),
    stop: () => reloaders.forEach((r) => r.stop()),
  };
}
