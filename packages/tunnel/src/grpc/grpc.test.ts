import { test } from "node:test";
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import { once } from "node:events";
import type { AddressInfo } from "node:net";
import { serveGrpc, type ServerCall } from "./server.js";
import { openCall } from "./client.js";
import { frameMessage } from "./framing.js";
import { GrpcStatus } from "./status.js";
import { TUNNEL_HTTP2_OPTIONS } from "./session.js";
import { waitUntil } from "../testing/index.js";

async function withServer(
  handlers: Record<string, (call: ServerCall) => void>,
  body: (session: http2.ClientHttp2Session) => Promise<void>,
): Promise<void> {
  const server = http2.createServer(TUNNEL_HTTP2_OPTIONS);
  serveGrpc(server, handlers);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  const session = http2.connect(`http://127.0.0.1:${port}`);
  try {
    await body(session);
  } finally {
    session.destroy();
    server.close();
  }
}

test("bidi echo with response metadata sent before any message, then trailers", async () => {
  await withServer(
    {
      "/Echo/Bidi": (call) => {
        assert.equal(call.metadataValues("agentid")[0], "a1");
        call.sendHeaders({ serverid: "s1", servercount: "2" });
        call.on("message", (frame) => call.send(Buffer.from(frame)));
        call.on("halfClose", () => call.finish({ code: GrpcStatus.OK, details: "" }));
      },
    },
    async (session) => {
      const call = openCall(session, "/Echo/Bidi", { metadata: { agentid: "a1" } });
      const headers = await call.waitForHeaders();
      assert.equal(headers["serverid"], "s1");
      assert.equal(headers["servercount"], "2");
      const got: string[] = [];
      call.on("message", (f) => got.push(f.subarray(5).toString()));
      call.send(frameMessage(Buffer.from("one")));
      call.send(frameMessage(Buffer.alloc(200_000, 0x61)));
      call.end();
      const [status] = (await once(call, "close")) as [{ code: number }];
      assert.equal(status.code, GrpcStatus.OK);
      assert.equal(got[0], "one");
      assert.equal(got[1]?.length, 200_000);
    },
  );
});

test("unknown method gets UNIMPLEMENTED as a trailers-only response", async () => {
  await withServer({}, async (session) => {
    const call = openCall(session, "/Nope/Nope");
    const [status] = (await once(call, "close")) as [{ code: number; details: string }];
    assert.equal(status.code, GrpcStatus.UNIMPLEMENTED);
    assert.match(status.details, /unknown method \/Nope\/Nope/);
  });
});

test("server error text survives percent-encoding", async () => {
  await withServer(
    { "/X/Y": (call) => call.finish({ code: GrpcStatus.UNKNOWN, details: "bad ;agentidentifiers 100%" }) },
    async (session) => {
      const call = openCall(session, "/X/Y");
      const [status] = (await once(call, "close")) as [{ code: number; details: string }];
      assert.equal(status.details, "bad ;agentidentifiers 100%");
    },
  );
});

test("a message over the limit ends the call with RESOURCE_EXHAUSTED; later bytes are never parsed", async () => {
  let delivered = 0;
  await withServer(
    {
      "/X/Y": (call) => {
        call.sendHeaders();
        call.on("message", () => delivered++);
      },
    },
    async (session) => {
      const call = openCall(session, "/X/Y");
      call.send(frameMessage(Buffer.alloc(4 * 1024 * 1024 + 1)));
      const [status] = (await once(call, "close")) as [{ code: number }];
      assert.equal(status.code, GrpcStatus.RESOURCE_EXHAUSTED);
    },
  );
  // the zero bytes after the refused header would parse as ~800k empty frames
  assert.equal(delivered, 0);
});

test("client cancel is seen by the server as CANCELLED", async () => {
  let serverClosed: Promise<unknown[]> | undefined;
  await withServer(
    {
      "/X/Y": (call) => {
        serverClosed = once(call, "close");
        call.sendHeaders();
      },
    },
    async (session) => {
      const call = openCall(session, "/X/Y");
      await call.waitForHeaders();
      call.abort({ code: GrpcStatus.CANCELLED, details: "bye" });
      const [status] = (await serverClosed!) as [{ code: number }];
      assert.equal(status.code, GrpcStatus.CANCELLED);
    },
  );
});

test("a client that destroys its session under open calls cannot make finish/send/sendHeaders throw", async () => {
  // Issue 25: two or more calls with nothing sent, then the session destroyed: node emits "end"
  // on each stream after it closed, and responding from that half-close threw
  // ERR_HTTP2_INVALID_STREAM out of the event loop (the process exited).
  const calls: ServerCall[] = [];
  const ended: Promise<unknown[]>[] = [];
  const halfClosed: ServerCall[] = [];
  await withServer(
    {
      "/X/Y": (call) => {
        calls.push(call);
        ended.push(once(call, "close"));
        call.on("halfClose", () => {
          halfClosed.push(call);
          call.send(frameMessage(Buffer.from("late")));
          call.sendHeaders({ late: "1" });
          call.finish({ code: GrpcStatus.OK, details: "" });
        });
      },
    },
    async (session) => {
      for (let i = 0; i < 3; i++) openCall(session, "/X/Y");
      await waitUntil("the server has the three calls", () => calls.length === 3);
      session.destroy();
      const statuses = (await Promise.all(ended)).map(([s]) => (s as { code: number }).code);
      assert.equal(statuses.length, 3);
      // Whatever each call saw first (the peer's end or the close), none of them threw.
      for (const call of calls) assert.equal(call.closed, true);
    },
  );
});
