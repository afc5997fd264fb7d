/**
 * Property tests (fast-check) for the HTTP CONNECT head parser. Bounded and seeded; override
 * with FC_SEED=<n> / FC_RUNS=<n>. fast-check prints the seed and path of a failure.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { parseHostPort } from "@cluster-proxy/protocol";
import { MAX_CONNECT_HEAD_BYTES, parseConnectHead, type ConnectHead } from "./connect-request.js";

const SEED = Number(process.env["FC_SEED"] ?? 0x5eed_cafe);
const RUNS = Number(process.env["FC_RUNS"] ?? 2000);
const params = (numRuns = RUNS): fc.Parameters<unknown> => ({ seed: SEED, numRuns });

const REJECT_STATUSES = new Set([400, 405, 431]);

/** Check a result has one of the documented shapes; returns it for chaining. */
function checkShape(input: Buffer, r: ConnectHead): ConnectHead {
  switch (r.kind) {
    case "incomplete":
      assert.ok(input.length <= MAX_CONNECT_HEAD_BYTES, "incomplete only while under the head limit");
      assert.equal(input.indexOf("\r\n\r\n"), -1);
      break;
    case "connect": {
      assert.ok(parseHostPort(r.address), `address ${JSON.stringify(r.address)} is host:port`);
      const end = input.indexOf("\r\n\r\n");
      assert.ok(end >= 0);
      assert.ok(r.rest.equals(input.subarray(end + 4)), "rest is exactly the bytes after the head");
      break;
    }
    case "reject": {
      const text = r.response.toString("latin1");
      const m = /^HTTP\/1\.1 (\d{3}) [^\r\n]+\r\n/.exec(text);
      assert.ok(m, `response starts with a status line: ${JSON.stringify(text.slice(0, 80))}`);
      assert.ok(REJECT_STATUSES.has(Number(m[1])), `status ${m[1]}`);
      const cl = /\r\nContent-Length: (\d+)\r\n/.exec(text);
      const sep = r.response.indexOf("\r\n\r\n");
      assert.ok(cl && sep > 0, "Content-Length and end of head");
      assert.equal(r.response.length - sep - 4, Number(cl[1]), "Content-Length matches the body");
      assert.equal(typeof r.reason, "string");
      break;
    }
    default:
      assert.fail(`unexpected result ${JSON.stringify(r)}`);
  }
  return r;
}

/** Feed `input` in the given chunks like the CONNECT door does; the first decisive result. */
function feedChunks(input: Buffer, cuts: number[]): { result: ConnectHead; unread: Buffer } {
  const points = [...new Set(cuts.map((c) => c % (input.length + 1)))].sort((a, b) => a - b);
  let buffered = Buffer.alloc(0);
  let from = 0;
  for (const to of [...points, input.length]) {
    if (to < from) continue;
    buffered = Buffer.concat([buffered, input.subarray(from, to)]);
    from = to;
    const result = checkShape(buffered, parseConnectHead(buffered));
    if (result.kind !== "incomplete") return { result, unread: input.subarray(from) };
  }
  return { result: { kind: "incomplete" }, unread: Buffer.alloc(0) };
}

/** Bytes that often look like HTTP: tokens, spaces, CR/LF and arbitrary bytes. */
const httpish = fc
  .array(
    fc.oneof(
      fc.constantFrom("CONNECT", "GET", " ", "\r\n", "\r\n\r\n", "HTTP/1.1", "HTTP/1.0", ":", "[", "]", "443", "host"),
      fc.constantFrom("a:1", "[::1]:8443", "x:0", "x:65536", "\n", "\r", "\0", "\xff", "é"),
      fc.string({ maxLength: 8 }),
    ),
    { maxLength: 40 },
  )
  .map((parts) => Buffer.from(parts.join(""), "latin1"));

const anyInput = fc.oneof(
  fc.uint8Array({ maxLength: 512 }).map((a) => Buffer.from(a)),
  httpish,
  fc
    .tuple(fc.integer({ min: MAX_CONNECT_HEAD_BYTES - 8, max: MAX_CONNECT_HEAD_BYTES + 64 }), fc.boolean())
    .map(([n, end]) => Buffer.concat([Buffer.alloc(n, 0x61), end ? Buffer.from("\r\n\r\n") : Buffer.alloc(0)])),
);

test(`fuzz: arbitrary bytes give only documented results, never a throw (seed ${SEED})`, () => {
  fc.assert(
    fc.property(anyInput, (input) => {
      checkShape(input, parseConnectHead(input));
    }),
    params(),
  );
});

// --- valid heads ---

const label = fc.stringMatching(/^[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?$/);
const host = fc.oneof(
  fc.domain(),
  fc.ipV4(),
  fc.ipV6().map((a) => `[${a}]`),
  fc.tuple(fc.oneof(fc.domain(), fc.ipV4()), label).map(([h, cluster]) => `${h}.${cluster}`),
  label,
);
const port = fc.integer({ min: 1, max: 65535 });
const headerName = fc.stringMatching(/^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,20}$/);
/** Header values: latin1 without CR/LF. */
const headerValue = fc
  .array(
    fc.integer({ min: 0, max: 255 }).filter((c) => c !== 13 && c !== 10),
    { maxLength: 60 },
  )
  .map((codes) => String.fromCharCode(...codes));
const headers = fc.array(fc.tuple(headerName, headerValue), { maxLength: 12 });
const pipelined = fc.oneof(
  fc.uint8Array({ maxLength: 2048 }).map((a) => Buffer.from(a)),
  fc.constant(Buffer.from("CONNECT x:1 HTTP/1.1\r\n\r\nmore\r\n\r\n")),
  fc.constant(Buffer.alloc(0)),
);

const validRequest = fc
  .record({ host, port, version: fc.constantFrom("1.1", "1.0"), headers, pipelined })
  .map(({ host: h, port: p, version, headers: hs, pipelined: rest }) => {
    const address = `${h}:${p}`;
    const head = [`CONNECT ${address} HTTP/${version}`, ...hs.map(([n, v]) => `${n}: ${v}`)].join("\r\n");
    return { address, rest, input: Buffer.concat([Buffer.from(`${head}\r\n\r\n`, "latin1"), rest]) };
  });

test(`fuzz: valid CONNECT heads parse to the target and keep pipelined bytes exactly (seed ${SEED})`, () => {
  fc.assert(
    fc.property(validRequest, ({ address, rest, input }) => {
      const r = checkShape(input, parseConnectHead(input));
      assert.equal(r.kind, "connect");
      if (r.kind !== "connect") return;
      assert.equal(r.address, address);
      assert.ok(r.rest.equals(rest), "pipelined bytes kept exactly");
    }),
    params(),
  );
});

test(`fuzz: a valid head split at any positions parses like the whole (seed ${SEED})`, () => {
  fc.assert(
    fc.property(validRequest, fc.array(fc.nat(), { maxLength: 6 }), ({ address, rest, input }, cuts) => {
      const { result, unread } = feedChunks(input, cuts);
      assert.equal(result.kind, "connect");
      if (result.kind !== "connect") return;
      assert.equal(result.address, address);
      assert.ok(Buffer.concat([result.rest, unread]).equals(rest), "pipelined bytes, wherever the cut");
    }),
    params(),
  );
});

test(`fuzz: arbitrary bytes split at any positions behave like the whole (seed ${SEED})`, () => {
  const upToLimit = anyInput.filter((b) => b.length <= MAX_CONNECT_HEAD_BYTES);
  fc.assert(
    fc.property(upToLimit, fc.array(fc.nat(), { maxLength: 6 }), (input, cuts) => {
      const whole = parseConnectHead(input);
      const { result, unread } = feedChunks(input, cuts);
      assert.equal(result.kind, whole.kind);
      if (whole.kind === "reject" && result.kind === "reject") assert.ok(result.response.equals(whole.response));
      if (whole.kind === "connect" && result.kind === "connect") {
        assert.equal(result.address, whole.address);
        assert.ok(Buffer.concat([result.rest, unread]).equals(whole.rest));
      }
    }),
    params(),
  );
});
