import assert from "node:assert/strict";
import { test } from "node:test";
import { renderServiceTable, resolveTargetPort } from "../infra/env/services.js";

test("the Service table DNATs frontends over ready endpoints and rejects Services without any", () => {
  const text = renderServiceTable("10.200.0.2", [
    {
      id: "default/web/http",
      proto: "tcp",
      frontends: [
        { ip: "10.200.101.5", port: 80 },
        { ip: "10.200.31.1", port: 80 },
      ],
      endpoints: [
        { ip: "10.200.21.2", port: 8080 },
        { ip: "10.200.21.3", port: 8080 },
      ],
    },
    { id: "default/empty/x", proto: "tcp", frontends: [{ ip: "10.200.101.6", port: 81 }], endpoints: [] },
  ]);
  // Atomic replace of the whole table, also when it does not exist yet.
  assert.match(text, /^add table ip cpenv-svc\ndelete table ip cpenv-svc\ntable ip cpenv-svc \{/);
  assert.match(text, /ip daddr 10\.200\.101\.5 tcp dport 80 jump svc-0/);
  assert.match(text, /ip daddr 10\.200\.31\.1 tcp dport 80 jump svc-0/);
  assert.match(text, /numgen random mod 2 vmap \{ 0 : jump ep-0-0, 1 : jump ep-0-1 \}/);
  assert.match(text, /meta l4proto tcp dnat to 10\.200\.21\.3:8080/);
  assert.match(text, /ip saddr 10\.200\.21\.2 meta mark set meta mark \| 0x4000/);
  assert.match(text, /snat to 10\.200\.0\.2/);
  assert.equal(text.match(/ip daddr 10\.200\.101\.6 tcp dport 81 reject with tcp reset/g)?.length, 3);
  assert.doesNotMatch(text, /10\.200\.101\.6 tcp dport 81 jump/);
});

test("targetPort resolves by number, name or defaults to the Service port", () => {
  const ports = [{ name: "http", containerPort: 8080 }];
  assert.equal(resolveTargetPort(undefined, 80, ports), 80);
  assert.equal(resolveTargetPort(9090, 80, ports), 9090);
  assert.equal(resolveTargetPort("http", 80, ports), 8080);
  assert.equal(resolveTargetPort("nope", 80, ports), null);
});
