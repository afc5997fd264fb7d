import { test } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { PROXY_METHOD } from "@cluster-proxy/protocol";
import { TUNNEL_HTTP2_OPTIONS, openCall, serveGrpc } from "@cluster-proxy/tunnel";
import { silentLogger } from "@cluster-proxy/kit";
import { TunnelSocket } from "./tunnel-socket.js";

test("an error before the caller's await continuation reaches a listener attached after it", async () => {
  const server = http2.createServer(TUNNEL_HTTP2_OPTIONS);
  serveGrpc(server, { [PROXY_METHOD]: (call) => call.sendHeaders() });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const session = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  try {
    const call = openCall(session, PROXY_METHOD);
    // What dial() does when the tunnel dies in the same read as the DIAL_RSP: inside one I/O
    // callback the socket is handed over through a promise and destroyed; Node runs the
    // destroy's nextTick (the 'error' emit) before the caller's await continuation.
    const socket = await new Promise<TunnelSocket>((resolve) =>
      setImmediate(() => {
        const s = new TunnelSocket({
          call,
          connectID: 1n,
          address: "east:443",
          random: 1n,
          logger: silentLogger,
          release: () => undefined,
        });
        resolve(s);
        s.destroy(new Error("connection to east:443 cut: agent gone"));
      }),
    );
    const [err] = (await once(socket, "error")) as [Error];
    assert.match(err.message, /agent gone/);
  } finally {
    session.destroy();
    server.close();
  }
});
