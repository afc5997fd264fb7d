/** Test-only: TCP endpoints on 127.0.0.1 that track their sockets. */
import { once } from "node:events";
import * as net from "node:net";

/** A listening TCP server and the sockets it accepted. */
export interface TcpEndpoint {
  port: number;
  sockets: Set<net.Socket>;
  /** Destroy every accepted socket and stop listening. */
  close(): Promise<void>;
}

/** Listen on 127.0.0.1 (any free port) and hand each accepted socket to `onSocket`. */
export async function listenTcp(
  onSocket: (socket: net.Socket) => void,
  options: net.ServerOpts = {},
): Promise<TcpEndpoint> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer(options, (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
    s.on("error", () => undefined);
    onSocket(s);
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return {
    port: (server.address() as net.AddressInfo).port,
    sockets,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** An endpoint that accepts and never reads. */
export function deafEndpoint(): Promise<TcpEndpoint> {
  return listenTcp(() => undefined, { pauseOnConnect: true });
}

/** An endpoint that writes to each connection for as long as it is open, as fast as it is read. */
export function endlessSource(): Promise<TcpEndpoint> {
  const chunk = Buffer.alloc(256 * 1024, 0x61);
  return listenTcp((s) => {
    const pump = (): void => {
      while (!s.destroyed && s.write(chunk));
    };
    s.on("drain", pump);
    pump();
  });
}
