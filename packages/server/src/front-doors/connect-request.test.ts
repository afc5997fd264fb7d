import { test } from "node:test";
import assert from "node:assert/strict";
import {
  CONNECT_ESTABLISHED,
  NO_AGENT_RESPONSE,
  noAgentResponse,
  backendGoneResponse,
  dialErrorResponse,
  dialErrorStatus,
  parseConnectHead,
} from "./connect-request.js";

const b = (s: string): Buffer => Buffer.from(s, "latin1");

test("parseConnectHead: CONNECT host:port with pipelined bytes", () => {
  const r = parseConnectHead(b("CONNECT east:443 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nHELLO"));
  assert.equal(r.kind, "connect");
  if (r.kind !== "connect") return;
  assert.equal(r.address, "east:443");
  assert.equal(r.rest.toString(), "HELLO");
  const v6 = parseConnectHead(b("CONNECT [fd00::1]:8443 HTTP/1.1\r\n\r\n"));
  assert.equal(v6.kind === "connect" && v6.address, "[fd00::1]:8443");
});

test("parseConnectHead: incomplete until the blank line", () => {
  assert.equal(parseConnectHead(b("CONNECT east:443 HTTP/1.1\r\nHost: x\r\n")).kind, "incomplete");
});

test("parseConnectHead: non-CONNECT gets 405", () => {
  const r = parseConnectHead(b("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  assert.equal(r.kind, "reject");
  if (r.kind !== "reject") return;
  const text = r.response.toString();
  assert.match(text, /^HTTP\/1\.1 405 Method Not Allowed\r\n/);
  assert.match(text, /this proxy only supports CONNECT passthrough/);
});

test("parseConnectHead: a target without a port gets 400 with a clear body", () => {
  for (const target of ["east", "east:", "east:99999", "[fd00::1]"]) {
    const r = parseConnectHead(b(`CONNECT ${target} HTTP/1.1\r\n\r\n`));
    assert.equal(r.kind, "reject", target);
    if (r.kind !== "reject") continue;
    assert.match(r.response.toString(), /^HTTP\/1\.1 400 Bad Request\r\n/);
    assert.match(r.response.toString(), /must be host:port/);
  }
});

test("parseConnectHead: garbage and oversized heads are refused", () => {
  const garbage = parseConnectHead(b("\x16\x03\x01garbage\r\n\r\n"));
  assert.equal(garbage.kind, "reject");
  const big = parseConnectHead(Buffer.alloc(20_000, 0x41));
  assert.equal(big.kind, "reject");
  if (big.kind === "reject") assert.match(big.response.toString(), /^HTTP\/1\.1 431 /);
});

test("dial error text maps to 502/503/504", () => {
  assert.equal(dialErrorStatus("dial tcp 10.0.0.1:80: connect: connection refused"), 502);
  assert.equal(dialErrorStatus("dial tcp: lookup nope: no such host"), 502);
  assert.equal(dialErrorStatus("dial tcp 198.18.0.254:1234: i/o timeout"), 504);
  assert.equal(dialErrorStatus("context deadline exceeded"), 504);
  assert.equal(dialErrorStatus("socket: too many open files"), 503);
  assert.equal(dialErrorStatus("tls: bad certificate"), 502);
  assert.equal(dialErrorStatus("something else"), 502);
  const refused = "dial to 10.0.0.5:22 refused by the agent's destination policy (allowed: *.svc:443)";
  assert.equal(dialErrorStatus(refused), 403);
  assert.match(
    dialErrorResponse(refused).toString(),
    /^HTTP\/1\.1 403 Forbidden\r\n[^]*\r\n\r\ndial to 10\.0\.0\.5:22 refused/,
  );
  const res = dialErrorResponse("dial tcp 127.0.0.1:1: connect: connection refused").toString();
  assert.match(res, /^HTTP\/1\.1 502 Bad Gateway\r\n/);
  assert.match(res, /Content-Type: text\/plain; charset=utf-8\r\n/);
  assert.ok(res.endsWith("\r\n\r\ndial tcp 127.0.0.1:1: connect: connection refused"));
});

test("fixed responses", () => {
  assert.equal(CONNECT_ESTABLISHED.toString(), "HTTP/1.1 200 Connection Established\r\n\r\n");
  assert.equal(
    NO_AGENT_RESPONSE.toString(),
    "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n\r\ncurrently no tunnels available: No agent available",
  );
  assert.match(
    backendGoneResponse("agent x disconnected").toString(),
    /^HTTP\/1\.1 503 Service Unavailable\r\n[^]*\r\n\r\nagent x disconnected\n$/,
  );
  assert.match(
    backendGoneResponse("no agent of cluster mc1 is connected: ...", "mc1").toString(),
    /^HTTP\/1\.1 503 No agent available for cluster mc1\r\n[^]*\r\n\r\nno agent of cluster mc1 is connected: \.\.\.\n$/,
  );
});

test("no agent: Go's bytes without a header, the reason in the status line when a cluster is meant", () => {
  assert.equal(noAgentResponse("nowhere:443"), NO_AGENT_RESPONSE, "no header: exactly Go's answer");
  const named = noAgentResponse("mc1:443", "mc1").toString();
  assert.match(named, /^HTTP\/1\.1 503 No agent available for cluster mc1\r\n/);
  assert.match(
    named,
    /\r\n\r\ncurrently no tunnels available: No agent available for mc1:443 \(no agent of cluster mc1/,
  );
  // A kubeconfig whose proxy URL lost the cluster: Go's status and body, the fix in the reason
  // phrase (the only part of the answer kubectl shows).
  const unnamed = noAgentResponse("kubernetes.default.svc:443").toString();
  assert.match(
    unnamed,
    /^HTTP\/1\.1 500 No agent available for kubernetes\.default\.svc:443: name the cluster in the proxy URL \(https:\/\/<cluster>:@host:port\)\r\n/,
  );
  assert.ok(unnamed.endsWith("\r\n\r\ncurrently no tunnels available: No agent available"));
});

test("parseConnectHead: the proxy URL's user name picks the cluster (kubectl proxy-url https://mc1:@hub:8093)", () => {
  const auth = (user: string): string => `Proxy-Authorization: Basic ${Buffer.from(user).toString("base64")}\r\n`;
  const connect = (target: string, header: string): ReturnType<typeof parseConnectHead> =>
    parseConnectHead(b(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n${header}\r\n`));
  const address = (r: ReturnType<typeof parseConnectHead>): string | undefined =>
    r.kind === "connect" ? r.address : undefined;
  assert.equal(address(connect("kubernetes.default.svc:443", auth("mc1:"))), "mc1:443", "the cluster's apiserver");
  const named = connect("kubernetes.default.svc:443", auth("mc1:"));
  assert.equal(named.kind === "connect" ? named.cluster : "-", "mc1");
  const plain = connect("east:443", "");
  assert.equal(plain.kind === "connect" ? plain.cluster : "-", undefined);
  assert.equal(address(connect("web.default.svc:80", auth("mc1:"))), "web.default.svc.mc1:80");
  assert.equal(address(connect("10.0.0.5:80", auth("mc1:"))), "10.0.0.5.mc1:80");
  assert.equal(address(connect("mc1:443", auth("mc1:"))), "mc1:443", "already the cluster");
  assert.equal(address(connect("web.mc1:80", auth("mc1:"))), "web.mc1:80", "already qualified");
  assert.equal(address(connect("east:443", "")), "east:443", "no header: unchanged (Go's behaviour)");
  assert.equal(address(connect("east:443", "Proxy-Authorization: Bearer x\r\n")), "east:443", "other schemes ignored");
  for (const bad of ["MC1:", "mc1:secret", ":", "a b:"]) {
    const r = connect("kubernetes.default.svc:443", auth(bad));
    assert.equal(r.kind, "reject", bad);
    assert.match(r.kind === "reject" ? r.response.toString() : "", /^HTTP\/1\.1 400 /);
  }
  assert.equal(connect("[fd00::1]:443", auth("mc1:")).kind, "reject");
});
