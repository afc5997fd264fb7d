/**
 * Where the gateway endpoint forwards to, and with what: the kube-apiserver with the agent's token, and
 * Services through the destination policy; token and CA files rechecked after {@link FILE_RECHECK_MS}.
 * Design: docs/design/gateway.md#the-gateway---agent-endpoint-contract-http2-over-the-mutual-tls-stream-upgrades-http11
 */
import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import * as http from "@cluster-proxy/kit/http";
import * as https from "node:https";
import type { LookupFunction } from "node:net";
import { join } from "node:path";
import { guardedLookup, resolverOf } from "../destination/destination-guard.js";
import type { DestinationPolicy } from "../destination/destination-policy.js";
import { H2Upstream } from "./gateway-h2-upstream.js";
import type { GatewayTarget } from "./gateway-request.js";
import { errorMessage } from "@cluster-proxy/errors";
import { loadCaFile } from "@cluster-proxy/tunnel";

/** How long a read of the token or a CA file serves requests before the file is read again. */
export const FILE_RECHECK_MS = 1000;

/** Where one request goes: origin, connection pool and the TLS name to verify. */
export interface Upstream {
  /** The target for messages, e.g. `kube-apiserver https://10.96.0.1:443`. */
  name: string;
  /** `http:` or `https:`. */
  protocol: string;
  /** Host to connect to (no brackets around an IPv6 literal). */
  host: string;
  port: number;
  /** The `Host` header value. */
  hostHeader: string;
  agent: http.Agent;
  /** The agent's ServiceAccount token, when the request impersonates. */
  token?: string;
  /** Name resolution for Services (tests point `<name>.<namespace>.svc` at loopback). */
  lookup?: LookupFunction;
  /**
   * HTTP/2 sessions to the upstream, for the kube-apiserver over https: non-upgrade requests use
   * them when it picks `h2` by ALPN (else, and for upgrades and Services, `agent`).
   */
  h2?: H2Upstream;
}

/** The files of {@link ClusterUpstreams}. */
export interface UpstreamSettings {
  /** The kube-apiserver origin. */
  apiserverUrl: URL;
  /** Holds `token` and `ca.crt`. */
  serviceAccountDir: string;
  /** Extra CA bundle for https Services ("" = none). */
  serviceCaFile: string;
  /** Close pooled connections (and HTTP/2 sessions without streams) idle for this long. */
  idleSocketTimeoutMs?: number;
  /** How long one read of the token and CA files serves (default {@link FILE_RECHECK_MS}; 0: every request reads them). */
  fileRecheckMs?: number;
  /** Offer HTTP/2 to an https kube-apiserver (default true; false: HTTP/1.1 only). */
  apiserverHttp2?: boolean;
  /** Name resolution for Services (default: the system resolver). */
  serviceLookup?: LookupFunction;
  /**
   * The agent's destination policy: every address a Service name resolves to is judged by it
   * before connecting. Absent or open: every address.
   */
  destinationPolicy?: DestinationPolicy;
}

/** The ServiceAccount token file's content without trailing line breaks. */
function tokenText(data: Buffer): string {
  return data.toString("utf8").replace(/[\r\n]+$/, "");
}

/** A connection pool per trust bundle, rebuilt when the bundle's content changes. */
class PoolByCa {
  private digest = "";
  /** The bundle of the last {@link get} (the file cache hands the same Buffer until it reads again). */
  private lastCa: Buffer | undefined;
  private agent: https.Agent | undefined;
  private h2: H2Upstream | undefined;
  private h2Digest = "";

  constructor(private readonly idleMs: number) {}

  get(ca: Buffer): https.Agent {
    if (this.agent && ca === this.lastCa) return this.agent;
    this.lastCa = ca;
    const digest = createHash("sha256").update(ca).digest("hex");
    if (!this.agent || digest !== this.digest) {
      // The old pool's busy connections finish; its idle ones time out.
      this.agent = new https.Agent({ keepAlive: true, ca, minVersion: "TLSv1.2", timeout: this.idleMs });
      this.digest = digest;
    }
    return this.agent;
  }

  /** The HTTP/2 sessions to `origin` for the bundle `ca` (the one of the last {@link get}). */
  h2For(origin: URL, ca: Buffer): H2Upstream {
    this.get(ca);
    if (!this.h2 || this.h2Digest !== this.digest) {
      // The old sessions' running streams finish; they take no new ones.
      this.h2?.retireAll();
      this.h2 = new H2Upstream({ origin, ca, idleMs: this.idleMs });
      this.h2Digest = this.digest;
    }
    return this.h2;
  }

  destroy(): void {
    this.agent?.destroy();
    this.agent = undefined;
    this.h2?.close();
    this.h2 = undefined;
  }
}

/** The unbracketed host and the port of a URL (its default port when none is given). */
function hostAndPort(url: URL): { host: string; port: number } {
  const host = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
  const port = url.port ? Number(url.port) : url.protocol === "https:" ? 443 : 80;
  return { host, port };
}

/** Upstreams of the gateway endpoint; see the module comment. */
export class ClusterUpstreams {
  private readonly kubePool: PoolByCa;
  private readonly servicePool: PoolByCa;
  private readonly plain: http.Agent;

  /** The last read of each file: when it began, and its content (or error). */
  private readonly files = new Map<string, { at: number; data: Promise<Buffer> }>();

  constructor(
    private readonly settings: UpstreamSettings,
    private readonly read: (path: string) => Promise<Buffer> = readFile,
    private readonly now: () => number = () => performance.now(),
  ) {
    const idle = settings.idleSocketTimeoutMs ?? 60_000;
    this.kubePool = new PoolByCa(idle);
    this.servicePool = new PoolByCa(idle);
    this.plain = new http.Agent({ keepAlive: true, timeout: idle });
  }

  /** The ServiceAccount token file. */
  get tokenFile(): string {
    return join(this.settings.serviceAccountDir, "token");
  }

  /** The ServiceAccount CA file. */
  get caFile(): string {
    return join(this.settings.serviceAccountDir, "ca.crt");
  }

  /** Where a request for `target` goes now (reads the token and CA files; rejects when unreadable). */
  async resolve(target: GatewayTarget): Promise<Upstream> {
    if (target.kind === "kube") {
      const url = this.settings.apiserverUrl;
      const { host, port } = hostAndPort(url);
      const token =
        target.credential === "impersonate"
          ? tokenText(await this.reread(this.tokenFile, () => this.readToken()))
          : undefined;
      const ca = url.protocol === "https:" ? await this.readCa("--service-account-dir", this.caFile) : undefined;
      const agent = ca ? this.kubePool.get(ca) : this.plain;
      const h2 = ca && this.settings.apiserverHttp2 !== false ? this.kubePool.h2For(url, ca) : undefined;
      return {
        name: `kube-apiserver ${url.origin}`,
        protocol: url.protocol,
        host,
        port,
        hostHeader: url.host,
        agent,
        ...(token !== undefined ? { token } : {}),
        ...(h2 ? { h2 } : {}),
      };
    }
    const { host, port } = hostAndPort(target.url);
    let agent: http.Agent = this.plain;
    if (target.url.protocol === "https:") {
      const bundle = [await this.readCa("--service-account-dir", this.caFile)];
      if (this.settings.serviceCaFile) bundle.push(await this.readCa("--service-ca-file", this.settings.serviceCaFile));
      agent = this.servicePool.get(Buffer.concat(bundle.flatMap((b) => [b, Buffer.from("\n")])));
    }
    const lookup = this.serviceLookup(port);
    return {
      name: `service ${target.url.origin}`,
      protocol: target.url.protocol,
      host,
      port,
      hostHeader: target.url.host,
      agent,
      ...(lookup ? { lookup } : {}),
    };
  }

  /** How a Service name is resolved for a dial to `port`: through the destination policy unless it is open. */
  private serviceLookup(port: number): LookupFunction | undefined {
    const { destinationPolicy: policy, serviceLookup } = this.settings;
    if (policy === undefined || policy.isOpen) return serviceLookup;
    // The refusal is the dial's error: the endpoint answers 502 with it and logs it.
    const ignore = (): void => {};
    return serviceLookup
      ? guardedLookup(policy, port, ignore, resolverOf(serviceLookup))
      : guardedLookup(policy, port, ignore);
  }

  /** Close the pooled connections. */
  close(): void {
    this.kubePool.destroy();
    this.servicePool.destroy();
    this.plain.destroy();
  }

  /**
   * A CA file a flag names, by the one TLS file reader (as at start): a `TlsFileError` naming the
   * flag when it cannot be read or holds no usable certificate.
   */
  private readCa(flag: string, path: string): Promise<Buffer> {
    return this.reread(path, () => loadCaFile({ flag, path }, this.read));
  }

  private async readToken(): Promise<Buffer> {
    try {
      return await this.read(this.tokenFile);
    } catch (err) {
      throw new Error(`cannot read ${this.tokenFile}: ${(err as NodeJS.ErrnoException).code ?? errorMessage(err)}`, {
        cause: err,
      });
    }
  }

  /** `path`'s content as `load` gave it at most {@link UpstreamSettings.fileRecheckMs} ago (see the module comment). */
  private reread(path: string, load: () => Promise<Buffer>): Promise<Buffer> {
    const now = this.now();
    const last = this.files.get(path);
    if (last && now - last.at < (this.settings.fileRecheckMs ?? FILE_RECHECK_MS)) return last.data;
    const data = load();
    this.files.set(path, { at: now, data });
    data.catch(() => {
      if (this.files.get(path)?.data === data) this.files.delete(path);
    });
    return data;
  }
}
