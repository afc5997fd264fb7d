/**
 * The retry of a request whose endpoint stream failed before any response byte (relay.ts,
 * docs/design/gateway.md "Retry"): once, on another session, only when the endpoint provably did
 * not process it or the method is safe; never after a response byte; counted and explained.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import type * as http from "node:http";
import * as http2 from "node:http2";
import * as https from "node:https";
import { after, before, beforeEach, describe, test } from "node:test";
import { DialError } from "@cluster-proxy/client";
import { RETRY_BODY_BUFFER } from "./relay.js";
import { startGatewayFixture, type GatewayFixture } from "./testing/gateway-fixture.js";

const ALICE = "system:serviceaccount:default:alice";
const TOKEN = "alice-token-secret-value";
const bearer = { authorization: `Bearer ${TOKEN}` };

/** Cut the TCP connection under a request's session (an agent replica gone), no GOAWAY. */
function cut(res: http2.Http2ServerResponse): void {
  res.stream.session?.socket.destroy();
}

describe("a request whose endpoint stream fails before its answer", { timeout: 120_000 }, () => {
  let f: GatewayFixture;
  /** Dials that fail before the next one goes through. */
  let failDials = 0;
  before(async () => {
    f = await startGatewayFixture({
      options: { clientCaFile: "" },
      dialer: (endpoint) => (address, signal) => {
        if (failDials > 0) {
          failDials--;
          return Promise.reject(new DialError("the agent went away", "endpoint"));
        }
        return endpoint(address, signal);
      },
    });
    f.hub.tokens.set(TOKEN, { username: ALICE, uid: "u-1", groups: [], extra: {} });
    f.hub.grantProxy(ALICE, "mc1", "get", "create", "update", "patch", "delete");
  });
  after(() => f.close());
  beforeEach(() => {
    f.endpoint.fault = undefined;
    f.endpoint.served.length = 0;
    failDials = 0;
  });

  /** `cluster_proxy_gateway_endpoint_retries_total` by reason. */
  async function retries(): Promise<Record<string, number>> {
    const text = await (await fetch(`http://127.0.0.1:${f.healthPort}/metrics`)).text();
    const out: Record<string, number> = {};
    for (const m of text.matchAll(/^cluster_proxy_gateway_endpoint_retries_total\{[^}]*reason="(\w+)"[^}]*\} (\d+)/gm))
      out[m[1]!] = Number(m[2]);
    return out;
  }

  /**
   * Faults for the first `n` requests (`what`), then the endpoint serves; `passed` resolves when the
   * first request after them reaches the endpoint (rejects after 30 s).
   */
  function faultFirst(
    n: number,
    what: (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void,
  ): { seen: string[]; passed: Promise<void> } {
    const seen: string[] = [];
    let pass: () => void = () => undefined;
    const passed = new Promise<void>((resolve, reject) => {
      pass = resolve;
      setTimeout(
        () => reject(new Error("no request reached the endpoint after the fault within 30 s")),
        30_000,
      ).unref();
    });
    passed.catch(() => undefined);
    f.endpoint.fault = (req, res) => {
      if (seen.length >= n) {
        pass();
        return false;
      }
      seen.push(`${req.method} ${req.url}`);
      what(req, res);
      return true;
    };
    return { seen, passed };
  }

  test("a GET cut before its answer is sent again on a new session and answered; counted as safe", async () => {
    // A session carried a request before (the cut one is then a session the gateway held open).
    assert.equal((await f.request("/mc1/api", { headers: bearer })).status, 200);
    f.endpoint.served.length = 0;
    const before = await retries();
    const sessions = f.endpoint.sessions;
    const { seen } = faultFirst(1, (_req, res) => cut(res));
    const r = await f.request("/mc1/api/v1/namespaces/default/pods", { headers: bearer });
    assert.equal(r.status, 200, r.body);
    assert.deepEqual(seen, ["GET /api/v1/namespaces/default/pods"]);
    assert.deepEqual(f.endpoint.served, ["GET /api/v1/namespaces/default/pods "]);
    assert.equal(f.endpoint.sessions - sessions, 1, "the retry went on a new session");
    assert.equal((await retries()).safe, (before.safe ?? 0) + 1, JSON.stringify([before, await retries()]));
  });

  test("a POST whose body reached the endpoint is not sent again: 502 saying why, processed at most once", async () => {
    const before = await retries();
    // The endpoint read the whole request (it may have acted on it), then its connection went away.
    const { seen } = faultFirst(1, (req, res) => {
      req.resume();
      req.once("end", () => cut(res));
    });
    const r = await f.request("/mc1/api/v1/namespaces/default/configmaps", {
      method: "POST",
      headers: { ...bearer, "content-type": "application/json" },
      body: '{"kind":"ConfigMap"}',
    });
    assert.equal(r.status, 502, r.body);
    assert.match(
      r.body,
      /cluster "mc1": gateway endpoint error: .*\(not retried: the POST request had reached the agent and may have been processed\)/,
    );
    assert.equal(seen.length, 1, "one attempt only");
    assert.deepEqual(f.endpoint.served, []);
    assert.deepEqual(await retries(), before);
    // Nothing else is affected: the next request is answered.
    assert.equal((await f.request("/mc1/api", { headers: bearer })).status, 200);
  });

  test("a POST refused by a GOAWAY that excludes it is sent again, whole, on a new session", async () => {
    // A stream before it on the same session, so the POST's stream is not the session's first.
    assert.equal((await f.request("/mc1/api", { headers: bearer })).status, 200);
    f.endpoint.served.length = 0;
    const before = await retries();
    const { seen } = faultFirst(1, (_req, res) => {
      const session = res.stream.session;
      res.stream.on("error", () => undefined);
      // "Streams up to the one before yours were processed": the POST's stream provably was not
      // (RFC 9113 8.7); the endpoint then goes away.
      session?.goaway(http2.constants.NGHTTP2_NO_ERROR, (res.stream.id ?? 3) - 2);
      setTimeout(() => session?.destroy(), 50);
    });
    const body = JSON.stringify({ kind: "ConfigMap", data: { big: "x".repeat(40_000) } });
    const r = await f.request("/mc1/api/v1/namespaces/default/configmaps", {
      method: "POST",
      headers: { ...bearer, "content-type": "application/json" },
      body,
    });
    assert.equal(r.status, 200, r.body);
    assert.equal(seen.length, 1);
    assert.deepEqual(f.endpoint.served, [`POST /api/v1/namespaces/default/configmaps ${body}`]);
    assert.equal((await retries()).refused, (before.refused ?? 0) + 1);
  });

  test("a body over the 64 KiB kept for a retry: a refused POST is not sent again (502 saying so); one under it is", async () => {
    const before = await retries();
    // Refused once the endpoint has read more than the gateway keeps of a body.
    const refuseAfter = (bytes: number) =>
      faultFirst(1, (req, res) => {
        let got = 0;
        req.on("data", (c: Buffer) => {
          got += c.length;
          if (got > bytes && !res.stream.closed) res.stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
        });
      });
    const post = (body: string) =>
      f.request("/mc1/api/v1/namespaces/default/configmaps", {
        method: "POST",
        headers: { ...bearer, "content-type": "application/json" },
        body,
      });
    const { seen } = refuseAfter(RETRY_BODY_BUFFER);
    const big = "x".repeat(RETRY_BODY_BUFFER * 2);
    const r = await post(big);
    assert.equal(r.status, 502, r.body);
    assert.match(r.body, /\(not retried: more of its body had been sent than the 64 KiB kept for a retry\)/);
    assert.equal(seen.length, 1);
    assert.deepEqual(f.endpoint.served, []);
    assert.deepEqual(await retries(), before);
    // Just under the limit, refused after it was all read: sent again, whole.
    const fits = "y".repeat(RETRY_BODY_BUFFER - 1);
    refuseAfter(RETRY_BODY_BUFFER - 2);
    const ok = await post(fits);
    assert.equal(ok.status, 200, ok.body);
    assert.deepEqual(f.endpoint.served, [`POST /api/v1/namespaces/default/configmaps ${fits}`]);
    assert.equal((await retries()).refused, (before.refused ?? 0) + 1);
  });

  test("a POST whose stream was refused (REFUSED_STREAM) is sent again", async () => {
    faultFirst(1, (_req, res) => res.stream.close(http2.constants.NGHTTP2_REFUSED_STREAM));
    const r = await f.request("/mc1/api/v1/namespaces/default/configmaps", {
      method: "POST",
      headers: { ...bearer, "content-type": "application/json" },
      body: "{}",
    });
    assert.equal(r.status, 200, r.body);
    assert.deepEqual(f.endpoint.served, ["POST /api/v1/namespaces/default/configmaps {}"]);
  });

  test("a POST cut before any byte of its body was sent is sent again (the endpoint never had a complete request)", async () => {
    const before = await retries();
    let sawHead: () => void = () => undefined;
    const headSeen = new Promise<void>((resolve) => (sawHead = resolve));
    const { seen, passed } = faultFirst(1, (_req, res) => {
      sawHead();
      cut(res);
    });
    const body = '{"kind":"ConfigMap"}';
    const req = https.request({
      host: "127.0.0.1",
      port: f.port,
      path: "/mc1/api/v1/namespaces/default/configmaps",
      method: "POST",
      ca: f.servingCa,
      agent: false,
      headers: { ...bearer, "content-type": "application/json", "content-length": String(body.length) },
    });
    req.flushHeaders();
    const answered = once(req, "response") as Promise<[http.IncomingMessage]>;
    await headSeen;
    // The body only once the retry's stream reached the endpoint's handler.
    await passed;
    assert.equal((await retries()).incomplete, (before.incomplete ?? 0) + 1);
    req.end(body);
    const [res] = await answered;
    res.resume();
    assert.equal(res.statusCode, 200);
    await once(res, "end");
    assert.equal(seen.length, 1);
    assert.deepEqual(f.endpoint.served, [`POST /api/v1/namespaces/default/configmaps ${body}`]);
  });

  test("a dial that fails is made once more (a plain request and an upgrade); two failures are a clear error", async () => {
    const before = await retries();
    // No open session: the next request dials.
    f.gateway.pool.forget("mc1");
    failDials = 1;
    assert.equal((await f.request("/mc1/api", { headers: bearer })).status, 200);
    failDials = 1;
    const socket = await f.tlsConnect();
    let got = "";
    socket.on("data", (c: Buffer) => (got += c.toString("latin1")));
    socket.write(
      `GET /mc1/api/v1/namespaces/default/pods/p/attach HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${TOKEN}\r\n` +
        "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    );
    while (!got.includes("\r\n\r\n")) await once(socket, "data");
    assert.match(got, /^HTTP\/1\.1 101 /);
    socket.destroy();
    assert.equal((await retries()).unsent, (before.unsent ?? 0) + 2);
    f.gateway.pool.forget("mc1");
    failDials = 2;
    const twice = await f.request("/mc1/api", { headers: bearer });
    assert.equal(twice.status, 502, twice.body);
    assert.match(twice.body, /the agent went away \(after one retry on another connection\)/);
  });

  test("never after a response byte: a stream cut after its head is not sent again", async () => {
    const before = await retries();
    const { seen } = faultFirst(2, (_req, res) => {
      res.writeHead(200, { "content-type": "text/plain" });
      res.write("partial");
      setTimeout(() => cut(res), 20);
    });
    const r = await f.request("/mc1/api/v1/pods", { headers: bearer }).catch((err: Error) => err);
    assert.ok(r instanceof Error || r.status === 200, "the caller got the head, then a cut");
    assert.equal(seen.length, 1, "not sent again");
    assert.deepEqual(await retries(), before);
  });
});
