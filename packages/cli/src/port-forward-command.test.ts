import assert from "node:assert/strict";
import { test } from "node:test";
import { forwardAddress, parseForwardSpec } from "./port-forward-command.js";

test("port-forward specs: <local-port>:<host>:<port>, addressed inside the cluster", () => {
  assert.deepEqual(parseForwardSpec("8080:web.default.svc:80"), { localPort: 8080, host: "web.default.svc", port: 80 });
  assert.deepEqual(parseForwardSpec("0:[fd00::1]:443"), { localPort: 0, host: "fd00::1", port: 443 });
  for (const bad of ["8080", "8080:web", "x:web:80", "8080:web:0", "70000:web:80", "8080::80"])
    assert.throws(() => parseForwardSpec(bad), /want <local-port>:<host>:<port>/, bad);
  assert.equal(forwardAddress({ localPort: 0, host: "web.default.svc", port: 80 }, "mc1"), "web.default.svc.mc1:80");
  assert.equal(forwardAddress({ localPort: 0, host: "mc1", port: 443 }, "mc1"), "mc1:443", "the cluster's apiserver");
  assert.equal(forwardAddress({ localPort: 0, host: "web.mc1", port: 80 }, "mc1"), "web.mc1:80");
});
