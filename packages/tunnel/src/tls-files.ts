/**
 * The one reader of the TLS files a flag (or option) names, for every component at start and for
 * the {@link CertReloader} on reload: each failure is a {@link TlsFileError} (`CP_ERR_TLS_FILE`)
 * that names the flag, the file and why.
 */
import { X509Certificate, createPrivateKey, type KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import * as tls from "node:tls";
import { errorMessage, ClusterProxyError, ErrorCodes } from "@cluster-proxy/errors";

/** One file and the flag (or option) it was given with, for messages. */
export interface FlagFile {
  flag: string;
  path: string;
}

/** The files of one TLS identity; each is optional (an agent may run without a certificate). */
export interface TlsFiles {
  cert?: FlagFile;
  key?: FlagFile;
  ca?: FlagFile;
}

/** TLS material as read from {@link TlsFiles}, ready for `tls.createSecureContext`. */
export interface TlsMaterial {
  cert?: Buffer;
  key?: Buffer;
  ca?: Buffer;
}

/** The material {@link loadTlsFiles} gives for `F`: a buffer for each file `F` always names. */
export type TlsMaterialOf<F extends TlsFiles> = TlsMaterial & {
  [K in keyof F as undefined extends F[K] ? never : K]: Buffer;
};

/** A TLS file that cannot be used, naming the flag and the file: `<flag>: <path>: <why>`. */
export class TlsFileError extends ClusterProxyError<typeof ErrorCodes.tlsFile> {
  constructor(
    readonly flag: string,
    readonly path: string,
    /** Why the file cannot be used (the message without the flag and the path). */
    readonly reason: string,
    options?: ErrorOptions,
  ) {
    super(ErrorCodes.tlsFile, `${flag}: ${path}: ${reason}`, options);
    this.name = "TlsFileError";
  }
}

/** The PEM certificate blocks of a file's contents. */
export const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g;

function pemCertificates(file: FlagFile, data: Buffer): X509Certificate[] {
  const blocks = data.toString("latin1").match(PEM_CERTIFICATE) ?? [];
  if (blocks.length === 0)
    throw new TlsFileError(file.flag, file.path, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  return blocks.map((block, i) => {
    try {
      return new X509Certificate(block);
    } catch (err) {
      throw new TlsFileError(
        file.flag,
        file.path,
        `certificate ${i + 1} of ${blocks.length} does not parse: ${errorMessage(err)}`,
        { cause: err },
      );
    }
  });
}

function privateKey(file: FlagFile, data: Buffer): KeyObject {
  try {
    return createPrivateKey(data);
  } catch (err) {
    throw new TlsFileError(file.flag, file.path, `not a PEM private key: ${errorMessage(err)}`, { cause: err });
  }
}

/**
 * What is wrong with `pem` as `kind` (one or more certificates; a private key), in the words of
 * {@link TlsFileError}, or undefined when every certificate block parses / the key parses: for
 * TLS material given as buffers rather than files.
 */
export function pemProblem(pem: Buffer | string, kind: "certificate" | "key"): string | undefined {
  const data = typeof pem === "string" ? Buffer.from(pem, "latin1") : pem;
  const given = { flag: "", path: "" };
  try {
    if (kind === "key") privateKey(given, data);
    else pemCertificates(given, data);
    return undefined;
  } catch (err) {
    if (err instanceof TlsFileError) return err.reason;
    throw err;
  }
}

/**
 * Check file contents as a TLS identity: every certificate readable, the key readable and
 * matching the certificate, and node able to build a secure context from them. Throws a
 * {@link TlsFileError} naming the flag and the file at fault.
 */
export function checkTlsMaterial(files: TlsFiles, material: TlsMaterial): void {
  let leaf: X509Certificate | undefined;
  if (files.cert && material.cert) leaf = pemCertificates(files.cert, material.cert)[0];
  if (files.ca && material.ca) pemCertificates(files.ca, material.ca);
  if (files.key && material.key) {
    const key = privateKey(files.key, material.key);
    if (leaf && files.cert && !leaf.checkPrivateKey(key))
      throw new TlsFileError(
        files.key.flag,
        files.key.path,
        `does not match the certificate in ${files.cert.flag} ${files.cert.path}`,
      );
  }
  try {
    tls.createSecureContext({ ...material });
  } catch (err) {
    const blame = files.cert ?? files.key ?? files.ca;
    if (!blame) throw err;
    throw new TlsFileError(blame.flag, blame.path, `unusable TLS material: ${errorMessage(err)}`, { cause: err });
  }
}

/** The parts of a {@link TlsFiles} set, in the order they are read. */
const TLS_PARTS = ["cert", "key", "ca"] as const;

function cannotRead(file: FlagFile, err: unknown): TlsFileError {
  return new TlsFileError(file.flag, file.path, `cannot read: ${errorMessage(err)}`, { cause: err });
}

/**
 * Read the files of a set, unchecked (missing entries stay undefined): what the reloader compares
 * between polls. Throws a {@link TlsFileError} for an unreadable file.
 */
export async function readTlsFiles(
  files: TlsFiles,
  read: (path: string) => Promise<Buffer> = readFile,
): Promise<TlsMaterial> {
  const out: TlsMaterial = {};
  for (const part of TLS_PARTS) {
    const file = files[part];
    if (!file) continue;
    try {
      out[part] = await read(file.path);
    } catch (err) {
      throw cannotRead(file, err);
    }
  }
  return out;
}

/**
 * Read and check the files of a set ({@link checkTlsMaterial}): what a component does at start.
 * Each file the set names is in the result (or the call threw).
 */
export async function loadTlsFiles<F extends TlsFiles>(
  files: F,
  read?: (path: string) => Promise<Buffer>,
): Promise<TlsMaterialOf<F>> {
  const material = await readTlsFiles(files, read);
  checkTlsMaterial(files, material);
  return loaded(files, material);
}

/** Read and check one CA bundle a flag names ({@link loadTlsFiles} of `{ ca: file }`). */
export async function loadCaFile(file: FlagFile, read: (path: string) => Promise<Buffer> = readFile): Promise<Buffer> {
  return (await loadTlsFiles({ ca: file }, read)).ca;
}

/** {@link loadTlsFiles}, synchronously (for APIs that cannot wait). */
export function loadTlsFilesSync<F extends TlsFiles>(files: F): TlsMaterialOf<F> {
  const material: TlsMaterial = {};
  for (const part of TLS_PARTS) {
    const file = files[part];
    if (!file) continue;
    try {
      material[part] = readFileSync(file.path);
    } catch (err) {
      throw cannotRead(file, err);
    }
  }
  checkTlsMaterial(files, material);
  return loaded(files, material);
}

/** `material` as read from `files`: every file named was read (a read that fails throws), so it holds a buffer each. */
function loaded<F extends TlsFiles>(files: F, material: TlsMaterial): TlsMaterialOf<F> {
  for (const part of TLS_PARTS)
    if (files[part] && !material[part]) throw new Error(`${files[part].flag}: ${files[part].path}: not read`);
  return material as TlsMaterialOf<F>;
}
