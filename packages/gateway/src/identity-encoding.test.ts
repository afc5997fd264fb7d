/**
 * Identities a header cannot carry unchanged (found by an attack review): Node's HTTP/2 client keeps
 * only the low byte of each character, so a hub user `šlice` would reach the cluster as `alice`,
 * and its HTTP/1.1 client throws on characters above U+00FF, which crashed the gateway on an
 * upgrade. Such identities are refused before anything is sent; the gateway keeps serving.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { after, before, describe, test } from "node:test";
import { startGatewayFixture, type GatewayFixture } from "./testing/gateway-fixture.js";

const CASES: [what: string, user: { username: string; groups: string[] }][] = [
  ["a user name that truncates to another's", { username: "\u0161lice", groups: [] }],
  ["a group that truncates to another", { username: "bob", groups: ["\u0161dmins"] }],
  ["a user name above U+00FF", { username: "\u7528\u6237", groups: [] }],
  ["a Latin-1 user name", { username: "j\u00f6e", groups: [] }],
];

describe("identities impersonation headers cannot carry", () => {
  let f: GatewayFixture;
  before(async () => {
    f = await startGatewayFixture({ options: { clientCaFile: "" } });
    CASES.forEach(([, user], i) => {
      f.hub.tokens.set(`token-${i}`, { ...user, extra: {} });
      f.hub.grantProxy(user.username, "mc1", "get", "create");
    });
  });
  after(() => f.close());

  test("a plain request is 403 naming the characters, and nothing reaches the cluster", async () => {
    for (const [i, [what]] of CASES.entries()) {
      const dials = f.endpoint.dialed.length;
      const r = await f.request("/mc1/api/v1/namespaces", { headers: { authorization: `Bearer token-${i}` } });
      assert.equal(r.status, 403, `${what}: ${r.body}`);
      assert.match(r.body, /outside printable ASCII/, what);
      assert.equal(f.endpoint.dialed.length, dials, `${what}: the endpoint was dialled`);
    }
  });

  test("an upgrade is 403 too, and the gateway keeps serving", async () => {
    for (const [i, [what]] of CASES.entries()) {
      const socket = await f.tlsConnect();
      socket.write(
        `POST /mc1/api/v1/namespaces/default/pods/p/exec?command=sh HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-${i}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n`,
      );
      let got = "";
      socket.on("data", (c: Buffer) => (got += c.toString()));
      socket.on("error", () => undefined);
      await once(socket, "close");
      assert.equal(Number(got.slice(9, 12)), 403, `${what}: ${got}`);
    }
    f.hub.tokens.set("plain", { username: "plain", groups: [], extra: {} });
    f.hub.grantProxy("plain", "mc1", "get");
    const ok = await f.request("/mc1/api/v1/namespaces", { headers: { authorization: "Bearer plain" } });
    assert.equal(ok.status, 200, ok.body);
  });
});
