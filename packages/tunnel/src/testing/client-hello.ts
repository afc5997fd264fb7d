/** Test-only: a real TLS ClientHello, to play a client that sends one and then stalls. */
import { once } from "node:events";
import * as net from "node:net";
import * as tls from "node:tls";

/**
 * The first flight of a node TLS client (a complete ClientHello record), captured from a real
 * `tls.connect` against a loopback listener that answers nothing; with `session`, the ClientHello
 * of a resumption (it offers the session's ticket); `options` adds to the client's (e.g. `ciphers`).
 */
export async function captureClientHello(
  servername = "localhost",
  session?: Buffer,
  options: tls.ConnectionOptions = {},
): Promise<Buffer> {
  const capture = net.createServer();
  capture.listen(0, "127.0.0.1");
  await once(capture, "listening");
  const client = tls.connect({
    port: (capture.address() as net.AddressInfo).port,
    host: "127.0.0.1",
    servername,
    ...(session ? { session } : {}),
    ...options,
  });
  client.on("error", () => undefined);
  try {
    const [socket] = (await once(capture, "connection")) as [net.Socket];
    let bytes = Buffer.alloc(0);
    // A record header (5 bytes) tells the length of the rest.
    while (bytes.length < 5 || bytes.length < 5 + bytes.readUInt16BE(3)) {
      const [chunk] = (await once(socket, "data")) as [Buffer];
      bytes = Buffer.concat([bytes, chunk]);
    }
    socket.destroy();
    return bytes;
  } finally {
    client.destroy();
    capture.close();
  }
}
