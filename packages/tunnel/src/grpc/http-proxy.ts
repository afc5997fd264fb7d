/**
 * Reaching a tunnel peer through an HTTP(S) forward proxy, as a managed cluster whose only way
 * out is a corporate proxy needs: `CONNECT host:port` to the proxy (plain `http://` or TLS
 * `https://`, verified against the proxy's CA), then the tunnel's own TLS inside. Which proxy
 * applies follows the conventions grpc-go and curl use: `HTTPS_PROXY` (the tunnel is TLS) and
 * `NO_PROXY`.
 */
import * as net from "node:net";
import * as tls from "node:tls";
import { ClusterProxyError, ErrorCodes } from "@cluster-proxy/errors";

/** A forward proxy to go through. */
export interface HttpProxy {
  /** `http://[user:password@]host:port` or `https://...`. */
  url: URL;
  /** CA bundle (PEM) that verifies an `https://` proxy; default: Node's trusted roots. */
  ca?: string | Buffer;
}

/** Raised when the proxy cannot be reached or refuses the CONNECT. */
export class ProxyConnectError extends ClusterProxyError<typeof ErrorCodes.proxy> {
  constructor(message: string, options?: ErrorOptions) {
    super(ErrorCodes.proxy, message, options);
    this.name = "ProxyConnectError";
  }
}

/**
 * The proxy URL for a TLS connection to `host:port` from `HTTPS_PROXY` (or `https_proxy`), unless
 * `NO_PROXY` (or `no_proxy`) exempts the host: `*`, a host name (which also covers its
 * subdomains; a leading `.` is allowed), `host:port`, an IP address, or a CIDR range.
 * A malformed `HTTPS_PROXY` is an error naming the variable.
 */
export function proxyFromEnvironment(
  host: string,
  port: number,
  env: NodeJS.ProcessEnv = process.env,
): URL | undefined {
  const raw = env.HTTPS_PROXY || env.https_proxy;
  if (!raw) return undefined;
  if (noProxyMatches(env.NO_PROXY || env.no_proxy || "", host, port)) return undefined;
  let url: URL;
  try {
    url = new URL(raw.includes("://") ? raw : `http://${raw}`);
  } catch {
    throw new ProxyConnectError(`HTTPS_PROXY is not a URL: ${JSON.stringify(raw)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new ProxyConnectError(`HTTPS_PROXY must be an http:// or https:// URL, not ${url.protocol}//`);
  return url;
}

function noProxyMatches(noProxy: string, host: string, port: number): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  for (let entry of noProxy.split(/[\s,]+/).filter(Boolean)) {
    entry = entry.toLowerCase();
    if (entry === "*") return true;
    const m = /^(.*?)(?::(\d+))?$/.exec(entry.replace(/^\[(.*)\](:\d+)?$/, "$1$2"))!;
    const name = m[1]!;
    if (m[2] && Number(m[2]) !== port) continue;
    if (name.includes("/")) {
      const [base, bits] = name.split("/") as [string, string];
      const family = net.isIP(base);
      if (family && net.isIP(h) === family) {
        const list = new net.BlockList();
        list.addSubnet(base, Number(bits), family === 4 ? "ipv4" : "ipv6");
        if (list.check(h, family === 4 ? "ipv4" : "ipv6")) return true;
      }
      continue;
    }
    const bare = name.replace(/^\*?\./, "");
    if (h === bare || (!net.isIP(h) && h.endsWith(`.${bare}`))) return true;
  }
  return false;
}

/**
 * Open a raw byte stream to `host:port` through `proxy` (resolves once the proxy answered 2xx to
 * the CONNECT); the caller speaks TLS over it.
 */
export function connectThroughProxy(
  proxy: HttpProxy,
  host: string,
  port: number,
  options: { timeoutMs: number; signal?: AbortSignal },
): Promise<net.Socket> {
  const url = proxy.url;
  const where = `proxy ${url.protocol}//${url.host}`;
  const proxyPort = Number(url.port) || (url.protocol === "https:" ? 443 : 80);
  const proxyHost = url.hostname.replace(/^\[|\]$/g, "");
  return new Promise((resolve, reject) => {
    const socket: net.Socket =
      url.protocol === "https:"
        ? tls.connect({
            host: proxyHost,
            port: proxyPort,
            ...(proxy.ca ? { ca: proxy.ca } : {}),
            servername: net.isIP(proxyHost) ? undefined : proxyHost,
            ALPNProtocols: ["http/1.1"],
          })
        : net.connect({ host: proxyHost, port: proxyPort });
    let received = Buffer.alloc(0);
    let settled = false;
    const finish = (err?: Error): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", onAbort);
      socket.off("data", onData);
      socket.off("error", onError);
      socket.off("close", onClose);
      if (err) {
        socket.destroy();
        reject(err);
      } else resolve(socket);
    };
    const onError = (err: Error): void =>
      finish(new ProxyConnectError(`cannot reach ${where}: ${err.message}`, { cause: err }));
    const onClose = (): void =>
      finish(new ProxyConnectError(`${where} closed the connection before answering CONNECT`));
    const onAbort = (): void => finish(new ProxyConnectError("connect aborted"));
    const timer = setTimeout(
      () =>
        finish(new ProxyConnectError(`${where} did not answer CONNECT ${host}:${port} within ${options.timeoutMs} ms`)),
      options.timeoutMs,
    );
    const onData = (chunk: Buffer): void => {
      received = Buffer.concat([received, chunk]);
      const end = received.indexOf("\r\n\r\n");
      if (end < 0) {
        if (received.length > 16_384) finish(new ProxyConnectError(`${where} sent an oversized answer to CONNECT`));
        return;
      }
      const statusLine = received.subarray(0, received.indexOf("\r\n")).toString("latin1");
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1];
      if (!status?.startsWith("2"))
        return finish(
          new ProxyConnectError(`${where} refused CONNECT ${host}:${port}: ${statusLine || "no status line"}`),
        );
      const rest = received.subarray(end + 4);
      if (rest.length) socket.unshift(rest);
      finish();
    };
    options.signal?.addEventListener("abort", onAbort, { once: true });
    if (options.signal?.aborted) return onAbort();
    socket.on("data", onData);
    socket.once("error", onError);
    socket.once("close", onClose);
    socket.once(url.protocol === "https:" ? "secureConnect" : "connect", () => {
      const target = host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
      const auth =
        url.username || url.password
          ? `Proxy-Authorization: Basic ${Buffer.from(`${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`).toString("base64")}\r\n`
          : "";
      socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n${auth}\r\n`);
    });
  });
}
