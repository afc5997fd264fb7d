/**
 * A TLS session (and the ticket it carries) of a throwaway TLS server with `pki`'s serving
 * certificate, for tests of what a resuming ClientHello looks like.
 */
import { once } from "node:events";
import type * as net from "node:net";
import * as tls from "node:tls";
import type { TestPki } from "@cluster-proxy/pki/testing";

/**
 * Connect once to a TLS server with session tickets (node's default; `serverOptions` adds to its
 * options, e.g. a door's ticket key); its session and ticket.
 */
export async function tlsSession(
  pki: TestPki,
  serverOptions: tls.TlsOptions = {},
): Promise<{ session: Buffer; ticket: Buffer | undefined }> {
  const server = tls.createServer({ cert: pki.serverCert, key: pki.serverKey, ...serverOptions }, (s) =>
    s.end("hello"),
  );
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  try {
    const c = tls.connect({
      port: (server.address() as net.AddressInfo).port,
      host: "127.0.0.1",
      ca: pki.ca,
      servername: "localhost",
    });
    const [session] = (await once(c, "session")) as [Buffer];
    const ticket = c.getTLSTicket();
    c.destroy();
    return { session, ticket };
  } finally {
    server.close();
  }
}
