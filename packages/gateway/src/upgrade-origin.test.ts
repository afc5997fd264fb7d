/**
 * Upgrades from browser pages: a foreign Origin is refused with 403 naming the flag, before
 * anything reaches the cluster; no Origin (kubectl, client-go) and an allowed one work.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { after, before, describe, test } from "node:test";
import type * as tls from "node:tls";
import { checkUpgradeOrigin } from "./upgrade-origin.js";
import { startGatewayFixture, type GatewayFixture } from "./testing/gateway-fixture.js";

const ALICE = "system:serviceaccount:default:alice";
const TOKEN = "alice-token";
const CONSOLE = "https://console.example.com";

/** Send an exec upgrade with `extra` header lines; the answer's head. */
async function upgrade(f: GatewayFixture, extra: string): Promise<string> {
  const socket: tls.TLSSocket = await f.tlsConnect();
  socket.write(
    `GET /mc1/api/v1/namespaces/default/pods/p/exec?command=sh HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n${extra}\r\n`,
  );
  let got = "";
  socket.on("data", (c: Buffer) => (got += c.toString()));
  const closed = once(socket, "close");
  const deadline = Date.now() + 10_000;
  while (!got.includes("\r\n\r\n") && Date.now() < deadline && !socket.destroyed)
    await new Promise<void>((r) => socket.once("data", () => r()).once("close", () => r()));
  socket.destroy();
  await closed;
  return got;
}

describe("upgrade origin", () => {
  test("no Origin passes; an Origin must be listed", () => {
    checkUpgradeOrigin({}, []);
    checkUpgradeOrigin({ origin: CONSOLE }, [CONSOLE]);
    assert.throws(() => checkUpgradeOrigin({ origin: "https://evil.example" }, [CONSOLE]), /--allowed-upgrade-origins/);
    assert.throws(() => checkUpgradeOrigin({ origin: "null" }, []), { status: 403 });
  });

  describe("through the gateway", () => {
    let f: GatewayFixture;
    before(async () => {
      f = await startGatewayFixture({ options: { allowedUpgradeOrigins: [CONSOLE] } });
      f.hub.tokens.set(TOKEN, { username: ALICE, groups: [], extra: {} });
      f.hub.grantProxy(ALICE, "mc1", "get", "create");
    });
    after(() => f.close());

    test("a foreign Origin is 403 naming the flag, and nothing reaches the cluster", async () => {
      const before = f.endpoint.connections;
      const head = await upgrade(f, "Origin: https://evil.example\r\n");
      assert.match(head, /^HTTP\/1.1 403/);
      assert.match(head, /--allowed-upgrade-origins/);
      assert.equal(f.endpoint.connections, before);
      assert.equal(f.audit.at(-1)?.decision, "deny");
      assert.match(f.audit.at(-1)?.reason ?? "", /--allowed-upgrade-origins/);
    });

    test("without Origin (kubectl) and from an allowed origin, the upgrade works", async () => {
      assert.match(await upgrade(f, ""), /^HTTP\/1.1 101/);
      assert.match(await upgrade(f, `Origin: ${CONSOLE}\r\n`), /^HTTP\/1.1 101/);
    });
  });

  test("by default every browser origin is refused", async () => {
    const f = await startGatewayFixture();
    try {
      f.hub.tokens.set(TOKEN, { username: ALICE, groups: [], extra: {} });
      f.hub.grantProxy(ALICE, "mc1", "get", "create");
      assert.match(await upgrade(f, `Origin: ${CONSOLE}\r\n`), /^HTTP\/1.1 403/);
      assert.match(await upgrade(f, ""), /^HTTP\/1.1 101/);
    } finally {
      await f.close();
    }
  });
});
