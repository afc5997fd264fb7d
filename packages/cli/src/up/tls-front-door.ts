/**
 * A mutual-TLS listener that forwards each authenticated connection, byte for byte, to a
 * loopback TCP address. `cluster-proxy up` uses it to offer the HTTP CONNECT door over mTLS
 * next to the plain loopback one (a single ProxyServer serves one TCP CONNECT port): the client
 * certificate is verified here, against the client CA the server's front doors trust, before
 * any byte reaches the server.
 */
import { once } from "node:events";
import net from "node:net";
import tls from "node:tls";
import { guardPlainHttp } from "@cluster-proxy/kit";

/** A connection must send its first bytes within this (ms), as node's default TLS handshake timeout. */
const FIRST_BYTES_TIMEOUT_MS = 120_000;

/** Options of {@link startTlsFrontDoor}. */
export interface TlsFrontDoorOptions {
  /** Address and port to listen on. */
  host: string;
  port: number;
  /** Serving certificate and key (PEM), and the CA client certificates must chain to. */
  cert: string | Buffer;
  key: string | Buffer;
  ca: string | Buffer;
  /** Where authenticated connections are forwarded to. */
  target: { host: string; port: number };
  /** How the answer to plain HTTP names this port (default "--port-base + 13", up's). */
  flag?: string;
  /** A connection must send its first bytes within this (ms; default 120 s). */
  firstBytesTimeoutMs?: number;
}

/** A running front door. */
export interface TlsFrontDoor {
  port: number;
  close(): Promise<void>;
}

/** Listen with mutual TLS and forward every accepted connection to `target`. */
export async function startTlsFrontDoor(options: TlsFrontDoorOptions): Promise<TlsFrontDoor> {
  /** Every accepted connection still open, handshaking or not: what close() destroys. */
  const open = new Set<net.Socket>();
  const server = tls.createServer(
    {
      cert: options.cert,
      key: options.key,
      ca: options.ca,
      requestCert: true,
      rejectUnauthorized: true,
      // Not half-open while handshaking: a client that gives up on the handshake (it refused
      // our certificate) ends its side, and this socket must close with it, not sit in
      // CLOSE-WAIT until node's handshake timeout. Half-close is allowed once authenticated.
      allowHalfOpen: false,
      ALPNProtocols: ["http/1.1"],
    },
    (client) => {
      client.allowHalfOpen = true;
      const upstream = net.connect({ ...options.target, allowHalfOpen: true });
      open.add(client).add(upstream);
      const teardown = (): void => {
        client.destroy();
        upstream.destroy();
      };
      client.on("error", teardown).on("close", () => open.delete(client));
      upstream.on("error", teardown).on("close", () => open.delete(upstream));
      client.pipe(upstream);
      upstream.pipe(client);
      // When both directions have ended, release both sockets.
      let ended = 0;
      const onEnd = (): void => {
        if (++ended === 2) teardown();
      };
      client.once("end", onEnd);
      upstream.once("end", onEnd);
    },
  );
  server.on("connection", (socket: net.Socket) => {
    open.add(socket);
    socket.once("close", () => open.delete(socket));
  });
  // A client without a valid certificate fails the handshake; nothing to do but drop it.
  server.on("tlsClientError", () => undefined);
  // Plain HTTP gets a 400 naming the port at once, as the server's own TLS ports answer it.
  const listener = guardPlainHttp(server, {
    flag: options.flag ?? "--port-base + 13",
    firstBytesTimeoutMs: options.firstBytesTimeoutMs ?? FIRST_BYTES_TIMEOUT_MS,
  });
  listener.listen(options.port, options.host);
  await once(listener, "listening"); // rejects with the listen error (e.g. EADDRINUSE)
  const address = listener.address() as net.AddressInfo;
  return {
    port: address.port,
    close: () =>
      new Promise<void>((resolve) => {
        listener.close(() => resolve());
        for (const socket of open) socket.destroy();
      }),
  };
}
