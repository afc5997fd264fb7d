import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { once } from "node:events";
import fc from "fast-check";
import { ConfigError, agentOptionsSchema, withDefaults, type AgentOptions } from "@cluster-proxy/api";
import { loadDestinationPolicy } from "../agent-config.js";
import { guardedConnector, type Resolver } from "./destination-guard.js";
import { canonicalAddress } from "./destination-address.js";
import {
  DESTINATION_POLICY_REFUSAL,
  DestinationPolicy,
  POLICY_MEMO_ENTRIES,
  parseAllowEntry,
} from "./destination-policy.js";
import { dialEndpoint, type DialFailure } from "./endpoint-dialer.js";

const policy = DestinationPolicy.parse({
  allow: [
    { hosts: ["kubernetes.default.svc", "*.svc.cluster.local"], ports: [443, "8000-8999"] },
    { cidrs: ["10.96.0.0/12", "fd00:10::/32"], ports: [443] },
    { hosts: ["*.db.internal"], cidrs: ["192.168.0.0/16"] },
  ],
  deny: [{ cidrs: ["169.254.0.0/16", "fe80::/10"] }, { ports: ["22"] }],
});

const verdict = (name: string | undefined, ip: string | undefined, port: number): boolean | "unknown" =>
  policy.check({ ...(name ? { name } : {}), ...(ip ? { ip } : {}), port }).allowed;

test("host patterns: exact and *.suffix wildcards, case-insensitive, ports and ranges", () => {
  assert.equal(verdict("kubernetes.default.svc", "10.0.0.1", 443), true);
  assert.equal(verdict("KUBERNETES.default.svc.", "10.0.0.1", 443), true);
  assert.equal(verdict("kubernetes.default.svc", "10.0.0.1", 80), false, "port not listed");
  assert.equal(verdict("a.b.svc.cluster.local", "10.0.0.1", 8500), true, "range 8000-8999");
  assert.equal(verdict("a.b.svc.cluster.local", "10.0.0.1", 9000), false);
  assert.equal(verdict("svc.cluster.local", "10.0.0.1", 443), false, "*.suffix needs a label before the suffix");
  assert.equal(verdict("evilsvc.cluster.local", "10.0.0.1", 443), false, "the suffix starts at a dot");
  assert.equal(verdict("other.example", "10.0.0.1", 443), false);
});

test("CIDRs: IPv4, IPv6 and IPv4-mapped addresses; host patterns never match IP literals", () => {
  assert.equal(verdict(undefined, "10.96.0.1", 443), true);
  assert.equal(verdict(undefined, "10.111.255.255", 443), true, "last address of 10.96.0.0/12");
  assert.equal(verdict(undefined, "10.112.0.0", 443), false, "first address after it");
  assert.equal(verdict(undefined, "::ffff:10.96.0.1", 443), true, "IPv4-mapped counts as IPv4");
  assert.equal(verdict(undefined, "fd00:10::1", 443), true);
  assert.equal(verdict(undefined, "fd00:10:ffff:ffff:ffff:ffff:ffff:ffff", 443), true);
  assert.equal(verdict(undefined, "fd00:11::1", 443), false);
  assert.equal(verdict(undefined, "fd00:10::1", 8443), false, "port not in that rule");
  // a name's resolved address is judged like a literal
  assert.equal(verdict("anything.example", "10.96.0.10", 443), true);
});

test("a rule's fields all have to match; deny wins over allow; unknown until the IP is known", () => {
  assert.equal(verdict("pg.db.internal", "192.168.1.5", 5432), true);
  assert.equal(verdict("pg.db.internal", "10.0.0.5", 5432), false, "name matches but not the CIDR");
  assert.equal(verdict("pg.db.internal", undefined, 5432), "unknown");
  assert.equal(verdict("x.svc.cluster.local", "169.254.169.254", 443), false, "denied range behind an allowed name");
  assert.equal(verdict(undefined, "fe80::1", 443), false);
  assert.equal(verdict("kubernetes.default.svc", undefined, 22), false, "deny by port needs no address");
  const r = policy.check({ ip: "10.0.0.5", port: 22 });
  assert.deepEqual(r, { allowed: false, because: "denied by deny[1]: *:22" });
  const r2 = policy.check({ ip: "10.0.0.5", port: 443 });
  assert.equal(r2.allowed, false);
  assert.match(
    r2.allowed === false ? r2.because : "",
    /^allowed: kubernetes\.default\.svc\|\*\.svc\.cluster\.local:443,8000-8999; 10\.96/,
  );
});

test("no rules: open; deny only: everything else allowed; an empty allow list allows nothing", () => {
  assert.ok(DestinationPolicy.open().isOpen);
  assert.ok(DestinationPolicy.parse({}).isOpen);
  const denyOnly = DestinationPolicy.parse({ deny: [{ cidrs: ["10.0.0.0/8"] }] });
  assert.equal(denyOnly.check({ ip: "192.168.0.1", port: 1 }).allowed, true);
  assert.equal(denyOnly.check({ ip: "10.1.2.3", port: 1 }).allowed, false);
  assert.equal(DestinationPolicy.parse({ allow: [] }).check({ ip: "127.0.0.1", port: 1 }).allowed, false);
});

test("verdicts are kept per destination, and the memo starts over past its bound with the same answers", () => {
  const policy = DestinationPolicy.parse({
    allow: [{ cidrs: ["10.0.0.0/8"], ports: [443] }, { hosts: ["*.svc"] }],
    deny: [{ cidrs: ["10.0.0.9/32"] }],
  });
  const first = policy.check({ ip: "10.1.2.3", port: 443 });
  assert.deepEqual(first, { allowed: true });
  // Judged once: the same verdict object comes back.
  assert.equal(policy.check({ ip: "10.1.2.3", port: 443 }), first);
  // The key keeps name, address and port apart.
  assert.equal(policy.check({ ip: "10.1.2.3", port: 80 }).allowed, false);
  assert.equal(policy.check({ name: "a.svc", port: 80 }).allowed, "unknown");
  assert.equal(policy.check({ name: "a.svc", ip: "192.168.1.1", port: 80 }).allowed, true);
  assert.equal(policy.check({ name: "a.svc", ip: "10.0.0.9", port: 80 }).allowed, false);
  assert.equal(policy.check({ name: "a.svcx", ip: "192.168.1.1", port: 80 }).allowed, false);
  // Ever new destinations: the memo is cleared at its bound, the answers stay right.
  for (let i = 0; i < POLICY_MEMO_ENTRIES * 2 + 7; i++) {
    const ip = `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
    assert.equal(policy.check({ ip, port: 443 }).allowed, ip !== "10.0.0.9", ip);
    assert.equal(policy.check({ ip, port: 444 }).allowed, false, ip);
  }
  assert.deepEqual(policy.check({ ip: "10.1.2.3", port: 443 }), { allowed: true });
  assert.deepEqual(policy.check({ ip: "10.0.0.9", port: 443 }).allowed, false);
});

test("bad policies are errors naming the entry", () => {
  const bad: [unknown, RegExp][] = [
    [[], /must be a JSON object/],
    [{ alow: [] }, /unknown key "alow"/],
    [{ allow: {} }, /allow: must be a list/],
    [{ allow: [{}] }, /allow\[0\]: an empty rule/],
    [{ allow: [{ host: ["a"] }] }, /allow\[0\]: unknown key "host"/],
    [{ allow: [{ hosts: [] }] }, /allow\[0\]\.hosts: must be a non-empty list/],
    [{ allow: [{ hosts: ["a", "bad name"] }] }, /allow\[0\]\.hosts\[1\]: "bad name" is not a host pattern/],
    [
      { allow: [{ hosts: ["10.0.0.1"] }] },
      /is an IP address: list addresses under "cidrs" \(e\.g\. "10\.0\.0\.1\/32"\)/,
    ],
    [
      { deny: [{ cidrs: ["10.0.0.0/33"] }] },
      /deny\[0\]\.cidrs\[0\]: "10\.0\.0\.0\/33" is not a CIDR \(prefix length 0-32/,
    ],
    [{ deny: [{ cidrs: ["fd00::/129"] }] }, /prefix length 0-128 for IPv6/],
    [{ deny: [{ cidrs: ["nope/8"] }] }, /not a CIDR/],
    [{ allow: [{ ports: [0] }] }, /ports\[0\]: 0 is not a port/],
    [{ allow: [{ ports: ["9-1"] }] }, /"9-1" is not a port or "low-high" range/],
    [{ allow: [{ ports: [true] }] }, /true is not a port/],
  ];
  for (const [spec, re] of bad) assert.throws(() => DestinationPolicy.parse(spec), re, JSON.stringify(spec));
});

test("--allow-destinations entries", () => {
  assert.deepEqual(parseAllowEntry("*.svc.cluster.local:443"), { hosts: ["*.svc.cluster.local"], ports: ["443"] });
  assert.deepEqual(parseAllowEntry("10.96.0.0/12"), { cidrs: ["10.96.0.0/12"] });
  assert.deepEqual(parseAllowEntry("10.0.0.5:8000-8999"), { cidrs: ["10.0.0.5"], ports: ["8000-8999"] });
  assert.deepEqual(parseAllowEntry("[fd00::/8]:443"), { cidrs: ["fd00::/8"], ports: ["443"] });
  assert.deepEqual(parseAllowEntry("fd00::/8"), { cidrs: ["fd00::/8"] });
  assert.deepEqual(parseAllowEntry("*:443"), { ports: ["443"] });
  assert.deepEqual(parseAllowEntry("*"), { ports: ["1-65535"] });
  assert.deepEqual(parseAllowEntry("db.internal:*"), { hosts: ["db.internal"] });
});

function opts(over: Partial<AgentOptions>): AgentOptions {
  return { ...withDefaults(agentOptionsSchema, {}), caCert: "/ca.crt", ...over };
}

test("loadDestinationPolicy: file plus flag rules; errors name the flag, the file and the entry", async () => {
  const dir = await mkdtemp(join(tmpdir(), "cp-policy-"));
  try {
    const builtIn = await loadDestinationPolicy(opts({ healthServerPort: 8093, adminServerPort: 8094 }), () => [
      "10.1.2.3",
    ]);
    assert.equal(builtIn.isOpen, false, "no policy configured: the built-in default, not the open one");
    assert.equal(builtIn.check({ ip: "10.1.2.3", port: 8094 }).allowed, false, "own admin port on a local address");
    assert.equal(builtIn.check({ ip: "10.1.2.3", port: 443 }).allowed, true);
    assert.equal(builtIn.check({ ip: "169.254.169.254", port: 80 }).allowed, false);
    assert.ok((await loadDestinationPolicy(opts({ allowDestinations: ["*"] }))).isOpen, "'*' alone: open, as Go");
    const good = join(dir, "good.json");
    await writeFile(good, JSON.stringify({ allow: [{ hosts: ["a.example"] }] }));
    const p = await loadDestinationPolicy(opts({ destinationPolicy: good, allowDestinations: ["10.0.0.0/8:80"] }));
    assert.equal(p.check({ name: "a.example", ip: "1.1.1.1", port: 1 }).allowed, true);
    assert.equal(p.check({ ip: "10.1.1.1", port: 80 }).allowed, true);
    assert.equal(p.check({ ip: "10.1.1.1", port: 81 }).allowed, false);

    const bad = join(dir, "bad.json");
    await writeFile(bad, JSON.stringify({ allow: [{ hosts: ["ok"] }, { cidrs: ["10.0.0.0/99"] }] }));
    await assert.rejects(loadDestinationPolicy(opts({ destinationPolicy: bad })), (err: Error) => {
      assert.ok(err instanceof ConfigError);
      assert.equal(
        err.message,
        `--destination-policy: ${bad}: allow[1].cidrs[0]: "10.0.0.0/99" is not a CIDR (prefix length 0-32 for IPv4)`,
      );
      return true;
    });
    const notJson = join(dir, "policy.yaml");
    await writeFile(notJson, "allow:\n  - hosts: [a]\n");
    await assert.rejects(
      loadDestinationPolicy(opts({ destinationPolicy: notJson })),
      new RegExp(`^ConfigError: --destination-policy: ${notJson} is not valid JSON`),
    );
    await assert.rejects(
      loadDestinationPolicy(opts({ destinationPolicy: join(dir, "missing.json") })),
      /^ConfigError: --destination-policy: cannot read .*missing\.json/,
    );
    await assert.rejects(
      loadDestinationPolicy(opts({ allowDestinations: ["10.0.0.0/8:http"] })),
      /^ConfigError: --allow-destinations: "10\.0\.0\.0\/8:http": .*"http" is not a port/,
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

/** Dial through a guarded connector with a fake resolver; resolves with the failure or the socket's remote address. */
async function guardedDial(p: DestinationPolicy, target: string, resolver: Resolver): Promise<DialFailure | string> {
  const refusals: string[] = [];
  const connect = guardedConnector(
    p,
    (o) => net.connect(o),
    (m) => refusals.push(m),
    resolver,
  );
  return new Promise((resolve) => {
    dialEndpoint(
      "tcp",
      target,
      2000,
      (failure, socket) => {
        if (failure) {
          assert.equal(refusals.length, failure.reason === "policy" ? 1 : 0);
          resolve(failure);
        } else {
          resolve(`${socket!.remoteAddress}:${socket!.remotePort}`);
          socket!.destroy();
        }
      },
      connect,
    );
  });
}

test("guarded dials: literals and names are judged; a name is dialled at the address that was judged", async () => {
  const srv = net.createServer((s) => s.destroy());
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const port = (srv.address() as net.AddressInfo).port;
  try {
    const p = DestinationPolicy.parse({
      allow: [
        { cidrs: ["127.0.0.0/8"], ports: [port] },
        { hosts: ["*.allowed.test"], ports: [port] },
      ],
      deny: [{ cidrs: ["127.0.0.99/32"] }],
    });
    const lookups: string[] = [];
    const resolver: Resolver = (name, _o, cb) => {
      lookups.push(name);
      if (name === "evil.test") cb(null, [{ address: "127.0.0.99", family: 4 }]);
      else if (name === "mixed.allowed.test")
        cb(null, [
          { address: "127.0.0.99", family: 4 },
          { address: "127.0.0.1", family: 4 },
        ]);
      else cb(null, [{ address: "127.0.0.1", family: 4 }]);
    };
    assert.equal(await guardedDial(p, `127.0.0.1:${port}`, resolver), `127.0.0.1:${port}`);
    assert.equal(await guardedDial(p, `ok.allowed.test:${port}`, resolver), `127.0.0.1:${port}`);
    assert.equal(
      await guardedDial(p, `mixed.allowed.test:${port}`, resolver),
      `127.0.0.1:${port}`,
      "only the allowed address",
    );

    const literal = await guardedDial(p, `127.0.0.1:${port + 1}`, resolver);
    assert.deepEqual(literal, {
      reason: "policy",
      message: `dial to 127.0.0.1:${port + 1} ${DESTINATION_POLICY_REFUSAL} (allowed: 127.0.0.0/8:${port}; *.allowed.test:${port})`,
    });
    const evil = await guardedDial(p, `evil.test:${port}`, resolver);
    assert.equal(typeof evil === "object" && evil.reason, "policy");
    assert.equal(
      typeof evil === "object" && evil.message,
      `dial to evil.test:${port} (resolves to 127.0.0.99) ${DESTINATION_POLICY_REFUSAL} (denied by deny[0]: 127.0.0.99/32)`,
    );
    lookups.length = 0;
    assert.equal(
      await guardedDial(p, `127.1:${port}`, resolver),
      `127.0.0.1:${port}`,
      "a short form is dialled canonical",
    );
    const spelled = await guardedDial(p, `0x7f.0.0.99:${port}`, resolver);
    assert.equal(typeof spelled === "object" && spelled.reason, "policy", "a hex spelling of a denied address");
    assert.deepEqual(lookups, [], "address spellings are never looked up");
    const early = await guardedDial(p, `x.allowed.test:22`, resolver);
    assert.equal(typeof early === "object" && early.reason, "policy");
    assert.deepEqual(lookups, [], "a port no rule allows is refused before any lookup");
    const v6 = await guardedDial(
      DestinationPolicy.parse({ allow: [{ cidrs: ["fd00::/8"] }] }),
      `[::1]:${port}`,
      resolver,
    );
    assert.match(
      typeof v6 === "object" ? v6.message : "",
      /^dial to \[::1\]:\d+ refused by the agent's destination policy \(allowed: fd00::\/8\)$/,
    );
  } finally {
    srv.close();
  }
});

test("every spelling of an address is judged as the address the kernel connects to", () => {
  const deny = DestinationPolicy.parse({
    deny: [{ cidrs: ["127.0.0.0/8", "::1/128", "169.254.0.0/16", "fe80::/10"] }],
  });
  const loopback = [
    "127.0.0.1",
    "::ffff:127.0.0.1",
    "::ffff:7f00:1",
    "0:0:0:0:0:ffff:7f00:1",
    "::127.0.0.1",
    "0.0.0.0",
    "0.1.2.3",
    "::",
    "::0",
    "::ffff:0.0.0.0",
    "0:0:0:0:0:0:0:1",
  ];
  for (const ip of loopback) assert.equal(deny.check({ ip, port: 80 }).allowed, false, ip);
  assert.equal(deny.check({ ip: "fe80::1%eth0", port: 80 }).allowed, false, "a zone does not hide link-local");
  assert.equal(deny.check({ ip: "::ffff:a9fe:a9fe", port: 80 }).allowed, false, "mapped metadata address");
  assert.equal(deny.check({ ip: "10.0.0.1", port: 80 }).allowed, true);
  // 0.0.0.0 is judged as loopback by allow rules, and still by a deny rule written for it
  const allowLoopback = DestinationPolicy.parse({ allow: [{ cidrs: ["127.0.0.1/32"] }] });
  assert.equal(allowLoopback.check({ ip: "0.0.0.0", port: 80 }).allowed, true);
  const denyZero = DestinationPolicy.parse({ deny: [{ cidrs: ["0.0.0.0/32"] }] });
  assert.equal(denyZero.check({ ip: "0.0.0.0", port: 80 }).allowed, false);
});

test("IPv6 translator and tunnel spellings (NAT64, SIIT, 6to4, Teredo) are judged as the IPv4 address they reach", () => {
  const p = DestinationPolicy.builtIn([8093], ["10.1.2.3"]);
  const allowed = (ip: string, port = 80): boolean | "unknown" => p.check({ ip, port }).allowed;
  const metadata = [
    "64:ff9b::a9fe:a9fe",
    "64:ff9b::169.254.169.254",
    "64:FF9B:0:0:0:0:A9FE:A9FE",
    "64:ff9b:1::a9fe:a9fe",
    "64:ff9b:1:abcd::a9fe:a9fe",
    "::ffff:0:a9fe:a9fe",
    "2002:a9fe:a9fe::",
    "2002:a9fe:a9fe:1::1",
    "2001:0:4136:e378:8000:63bf:5601:5601",
  ];
  for (const ip of metadata) assert.equal(allowed(ip), false, ip);
  for (const ip of ["64:ff9b::7f00:1", "64:ff9b::1", "2002:7f00:1::", "64:ff9b::a01:203"])
    assert.equal(allowed(ip, 8093), false, `${ip}: the agent's own port on this host`);
  const r = p.check({ ip: "64:ff9b::a9fe:a9fe", port: 80 });
  assert.match(r.allowed === false ? r.because : "", /^denied by the default policy \(link-local/);
  // Their other addresses stay reachable, and so do ordinary IPv6 addresses.
  for (const ip of ["64:ff9b::808:808", "2002:808:808::1", "fd00::1", "2001:db8::1", "2606:4700::1111"])
    assert.equal(allowed(ip), true, ip);
  assert.equal(allowed("64:ff9b::7f00:1", 8095), true, "another port");
  // A deny rule for the IPv6 form still holds; allow rules must match the IPv4 address reached.
  const denyNat64 = DestinationPolicy.parse({ deny: [{ cidrs: ["64:ff9b::/96"] }] });
  assert.equal(denyNat64.check({ ip: "64:ff9b::808:808", port: 80 }).allowed, false);
  const allowV4 = DestinationPolicy.parse({ allow: [{ cidrs: ["10.0.0.0/8"] }] });
  assert.equal(allowV4.check({ ip: "64:ff9b::a00:1", port: 80 }).allowed, true);
  assert.equal(allowV4.check({ ip: "64:ff9b::b00:1", port: 80 }).allowed, false);
});

test("guarded dials: NAT64 and 6to4 literals and names resolving to them are refused before connecting", async () => {
  const p = DestinationPolicy.builtIn([8093], []);
  const resolver: Resolver = (name, _o, cb) =>
    cb(null, [{ address: name === "dns64.test" ? "64:ff9b::a9fe:a9fe" : "2002:a9fe:a9fe::1", family: 6 }]);
  for (const target of ["[64:ff9b::a9fe:a9fe]:80", "[2002:a9fe:a9fe::1]:80", "dns64.test:80", "sixtofour.test:80"]) {
    const r = await guardedDial(p, target, resolver);
    assert.equal(typeof r === "object" && r.reason, "policy", target);
  }
});

test("the built-in default: no link-local or metadata address, not the agent's own ports on this host", () => {
  const p = DestinationPolicy.builtIn([8093, 8094, 0], ["10.1.2.3", "fd00::5"]);
  const allowed = (ip: string, port: number): boolean | "unknown" => p.check({ ip, port }).allowed;
  for (const ip of ["127.0.0.1", "127.9.9.9", "0.0.0.0", "::", "::1", "::ffff:7f00:1", "10.1.2.3", "fd00::5"]) {
    assert.equal(allowed(ip, 8094), false, `${ip}:8094`);
    assert.equal(allowed(ip, 8093), false, `${ip}:8093`);
    assert.equal(allowed(ip, 8095), true, `${ip}:8095: other local ports stay reachable`);
  }
  for (const ip of ["169.254.169.254", "::ffff:169.254.169.254", "fe80::1", "fd00:ec2::254"]) {
    assert.equal(allowed(ip, 80), false, ip);
  }
  assert.equal(allowed("10.9.9.9", 8094), true, "another host's port 8094");
  const r = p.check({ ip: "169.254.169.254", port: 80 });
  assert.match(r.allowed === false ? r.because : "", /^denied by the default policy \(link-local.*'\*' for every/);
  assert.match(p.describe(), /deny 169\.254\.0\.0\/16/);
});

test("property: an IPv4 address in any resolver spelling gets the verdict of its dotted form", () => {
  const p = DestinationPolicy.builtIn([8094], []);
  const spellings = (o: number[]): string[] => {
    const n = ((o[0]! << 24) | (o[1]! << 16) | (o[2]! << 8) | o[3]!) >>> 0;
    return [
      o.join("."),
      String(n),
      `0x${n.toString(16)}`,
      o.map((b) => `0${b.toString(8)}`).join("."),
      o.map((b) => `0x${b.toString(16)}`).join("."),
      `${o[0]}.${(o[1]! << 16) | (o[2]! << 8) | o[3]!}`,
      `${o[0]}.${o[1]}.${(o[2]! << 8) | o[3]!}`,
      `::ffff:${o.join(".")}`,
      `::ffff:${((o[0]! << 8) | o[1]!).toString(16)}:${((o[2]! << 8) | o[3]!).toString(16)}`,
    ];
  };
  const octet = fc.integer({ min: 0, max: 255 });
  const interesting = fc.oneof(
    fc.tuple(octet, octet, octet, octet),
    fc.tuple(fc.constantFrom(0, 127, 169), fc.constantFrom(0, 254), octet, octet),
  );
  fc.assert(
    fc.property(interesting, fc.constantFrom(80, 8094), (o, port) => {
      const [dotted, ...others] = spellings(o);
      const expected = p.check({ ip: dotted!, port }).allowed;
      for (const s of others) {
        const canonical = canonicalAddress(s);
        assert.ok(canonical, s);
        assert.equal(canonical.ip, dotted, s);
        assert.equal(p.check({ ip: canonical.ip, port }).allowed, expected, s);
      }
    }),
    { numRuns: 500 },
  );
});
