/**
 * The gateway's hostile suite, part 2: what a managed cluster answers (docs/testing/hostile-clients.md, "The gateway").
 *
 * A "pod" reached through `pods/proxy` (the kube-apiserver stand-in answers for it, as the real
 * one relays a pod's answer) and the Service stand-in answer with raw bytes: statuses outside
 * 100-599, 1xx, hop-by-hop and HTTP/2-forbidden headers (`HTTP2-Settings`, `Connection`,
 * `Transfer-Encoding`, `Upgrade`, ...), invalid characters, huge values, duplicates, bad chunking,
 * wrong Content-Length, early close. Through the real agent and gateway to HTTP/1.1 and HTTP/2
 * callers, the gateway process never exits, every caller gets a well-formed answer (a status of
 * 100-599 it can parse; a reset or close after that head is clean), and a legitimate request
 * works after each batch.
 *
 * First the crash cases of issue 39 (a pod answering `HTTP2-Settings` or status 600), then a
 * seeded fast-check sample (FC_SEED / FC_RUNS override it), bounded in count and time. A crash is
 * recorded and the gateway started again, so every failing answer is listed, not only the first.
 */
import assert from "node:assert/strict";
import * as https from "node:https";
import { after, before, describe, test } from "node:test";
import fc from "fast-check";
import {
  CLUSTER,
  READER,
  gatewayRequestOptions,
  startHostileWorld,
  type HostileWorld,
} from "../infra/gateway/hostile-world.js";
import { http2Call, legitimateGet } from "../infra/gateway/callers.js";
import { errorMessage } from "@cluster-proxy/errors";

const SEED = Number(process.env["FC_SEED"] ?? 0x39_f00d);
const RUNS = Number(process.env["FC_RUNS"] ?? 120);
/** The fuzz stops starting new answers after this long (what has run is checked). */
const FUZZ_BUDGET_MS = 60_000;
/** One caller exchange must be answered within this. */
const ANSWER_MS = 8_000;

type Framing = "length" | "short" | "long" | "chunked" | "bad-chunked" | "close" | "early-close" | "interim";

/** One generated upstream answer. */
interface AnswerSpec {
  status: string;
  reason: string;
  headers: [string, string][];
  framing: Framing;
  body: string;
}

const HEADER_NAMES = [
  "HTTP2-Settings",
  "http2-settings",
  "Connection",
  "Transfer-Encoding",
  "Upgrade",
  "Keep-Alive",
  "Proxy-Connection",
  "TE",
  "Trailer",
  "Content-Length",
  "Host",
  "Set-Cookie",
  "Location",
  "X-Ok",
  "Content-Type",
  ":status",
  "X Space",
  "X\tTab",
  "X-\u007fDel",
  "X-\u00dcmlaut",
  "",
  "X-Dup",
];

/** Values an upstream may send that the agent's parser takes (most answers must pass it to test the gateway). */
const HEADER_VALUES = [
  "AAMAAABkAAQAAP__",
  "close",
  "keep-alive, Upgrade",
  "Upgrade, HTTP2-Settings",
  "Upgrade",
  "chunked",
  "gzip, chunked",
  "h2c",
  "websocket",
  "",
  "-1",
  "99999999999999999999",
  "\u00fc\u00ff",
  "trailers",
  "timeout=5",
  "ok",
];

/** Values no parser should let through. */
const INVALID_VALUES = ["a\u0000b", "a\u0001b", "\u007f", "a\rb", "a\nb"];

const statusArb = fc.oneof(
  { weight: 5, arbitrary: fc.integer({ min: 200, max: 599 }).map(String) },
  { weight: 3, arbitrary: fc.integer({ min: 600, max: 999 }).map(String) },
  { weight: 2, arbitrary: fc.integer({ min: 100, max: 199 }).map(String) },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: 99 }).map((x) => String(x).padStart(3, "0")) },
  { weight: 1, arbitrary: fc.constantFrom("600", "101", "100", "103", "204", "304", "0x1", "2000", "20", "-1", "") },
);

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,16}$/;

const headerArb = fc.tuple(
  fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...HEADER_NAMES) },
    { weight: 2, arbitrary: fc.stringMatching(TOKEN) },
    { weight: 1, arbitrary: fc.string({ minLength: 1, maxLength: 12 }) },
  ),
  fc.oneof(
    { weight: 8, arbitrary: fc.constantFrom(...HEADER_VALUES) },
    { weight: 1, arbitrary: fc.constantFrom(...INVALID_VALUES) },
    { weight: 1, arbitrary: fc.string({ maxLength: 40 }) },
    { weight: 1, arbitrary: fc.integer({ min: 1_000, max: 20_000 }).map((n) => "x".repeat(n)) },
  ),
);

const answerArb: fc.Arbitrary<AnswerSpec> = fc.record({
  status: statusArb,
  reason: fc.constantFrom("OK", "", "Weird Status", "\u00ff"),
  headers: fc.array(headerArb, { minLength: 1, maxLength: 5 }),
  framing: fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom<Framing>("length", "chunked", "close") },
    { weight: 3, arbitrary: fc.constantFrom<Framing>("short", "long", "bad-chunked", "early-close", "interim") },
  ),
  body: fc.constantFrom("", "hello", '{"kind":"Pod"}', "x".repeat(5_000)),
});

/** The bytes of `a` (latin1), the connection closed after them by the stand-in. */
function render(a: AnswerSpec): Buffer {
  const lines = [`HTTP/1.1 ${a.status} ${a.reason}`, ...a.headers.map(([n, v]) => `${n}: ${v}`)];
  let body = a.body;
  switch (a.framing) {
    case "length":
      lines.push(`Content-Length: ${Buffer.byteLength(a.body, "latin1")}`);
      break;
    case "short":
      lines.push(`Content-Length: ${a.body.length + 10}`);
      break;
    case "long":
      lines.push(`Content-Length: ${Math.max(0, a.body.length - 3)}`);
      break;
    case "chunked":
      lines.push("Transfer-Encoding: chunked");
      body = (a.body ? `${a.body.length.toString(16)}\r\n${a.body}\r\n` : "") + "0\r\n\r\n";
      break;
    case "bad-chunked":
      lines.push("Transfer-Encoding: chunked");
      body = `zz\r\n${a.body}\r\n0\r\n\r\n`;
      break;
    case "early-close":
      return Buffer.from(lines.slice(0, 2).join("\r\n"), "latin1");
    case "interim": {
      // `a` as an interim answer (the status made 1xx when it is not), then a final 200.
      if (!/^1\d\d$/.test(a.status)) lines[0] = `HTTP/1.1 103 ${a.reason}`;
      const final = `HTTP/1.1 200 OK\r\nContent-Length: ${a.body.length}\r\n\r\n${a.body}`;
      return Buffer.from(`${lines.join("\r\n")}\r\n\r\n${final}`, "latin1");
    }
    case "close":
      break;
  }
  return Buffer.from(`${lines.join("\r\n")}\r\n\r\n${body}`, "latin1");
}

/** A short description of `a` for failure messages (huge values abbreviated). */
function describeAnswer(a: AnswerSpec): string {
  const short = (v: string): string =>
    v.length > 40 ? `${JSON.stringify(v.slice(0, 10))}x${v.length}` : JSON.stringify(v);
  return `status ${JSON.stringify(a.status)} ${a.framing} headers [${a.headers.map(([n, v]) => `${short(n)}: ${short(v)}`).join(", ")}] body ${a.body.length}B`;
}

/** The error a crashed process printed last (its message line and code), from its output. */
function crashOf(output: string): string {
  const lines = output.split("\n");
  const at = lines.findLastIndex((l) => /^\w*Error\b|^\s*code: /.test(l) || /Error \[ERR_/.test(l));
  const message = lines.findLast((l) => /(^|\s)(\w*Error)( \[\w+\])?:/.test(l)) ?? "";
  return `${message.trim()} ${at >= 0 ? (lines[at] ?? "").trim() : ""}`.trim() || output.slice(-300);
}

/** What an HTTP/1.1 caller (node's client, which parses strictly) got from the gateway. */
function http1Call(
  world: HostileWorld,
  path: string,
): Promise<{ status?: number; error?: string; afterHead?: string }> {
  return new Promise((resolve) => {
    let status: number | undefined;
    const timer = setTimeout(() => {
      req.destroy();
      resolve(status === undefined ? { error: "timeout" } : { status, afterHead: "timeout" });
    }, ANSWER_MS);
    const req = https.request(gatewayRequestOptions(world, path, READER.token), (res) => {
      status = res.statusCode;
      res.on("data", () => undefined);
      res.on("end", () => {
        clearTimeout(timer);
        resolve({ status });
      });
      res.on("error", (err) => {
        clearTimeout(timer);
        resolve({ status, afterHead: err.message });
      });
    });
    req.on("error", (err) => {
      clearTimeout(timer);
      resolve(status === undefined ? { error: err.message } : { status, afterHead: err.message });
    });
    req.end();
  });
}

describe("gateway hostile suite: upstream responses", { timeout: 600_000 }, () => {
  let world: HostileWorld;
  const scripts = new Map<string, Buffer>();

  before(async () => {
    world = await startHostileWorld();
    world.apiserver.script = (req) => scripts.get(req.url ?? "");
    world.service.script = (req) => scripts.get(req.url ?? "");
  });
  after(async () => {
    await world?.close();
  });

  let n = 0;
  /** Scripts `bytes` for a fresh pod (or Service) path and returns the gateway path that reaches it. */
  function scripted(bytes: Buffer, via: "pod" | "service"): string {
    const id = ++n;
    if (via === "pod") {
      const path = `/api/v1/namespaces/default/pods/fuzz-${id}/proxy/answer`;
      scripts.set(path, bytes);
      return `/${CLUSTER}${path}`;
    }
    scripts.set(`/answer-${id}`, bytes);
    return world.servicePath(`/answer-${id}`);
  }

  /** Why the gateway or the agent is not serving after `label` (each restarted when it exited), or nothing. */
  async function survivors(label: string): Promise<string[]> {
    const problems: string[] = [];
    if (!(await world.gatewayAlive())) {
      problems.push(`${label}: the gateway exited: ${crashOf(world.gateway.output())}`);
      await world.restartGatewayIfExited();
    }
    if (!(await world.agentAlive())) {
      problems.push(`${label}: the agent exited: ${crashOf(world.agent.proc.output())}`);
      await world.restartAgentIfExited();
    }
    return problems;
  }

  /** Sends the answer's path as HTTP/1.1 and HTTP/2; returns what broke the rules (empty when none). */
  async function exchange(bytes: Buffer, via: "pod" | "service", what: string): Promise<string[]> {
    const verbose = process.env["FC_VERBOSE"] !== undefined;
    const final = (s: number | undefined): boolean => s !== undefined && s >= 200 && s <= 599;
    const h1 = await http1Call(world, scripted(bytes, via));
    if (verbose) console.log(what, "HTTP/1.1:", JSON.stringify(h1));
    const problems = await survivors(`${what} via ${via}, HTTP/1.1 caller`);
    if (problems.length === 0 && !final(h1.status))
      problems.push(`${what} via ${via}, HTTP/1.1 caller: ${JSON.stringify(h1)}`);
    const h2 = await http2Call(world, { ":path": scripted(bytes, via), authorization: `Bearer ${READER.token}` }, [], {
      timeoutMs: ANSWER_MS,
    });
    if (verbose) console.log(what, "HTTP/2:", JSON.stringify({ ...h2, body: h2.body.slice(0, 80) }));
    const after2 = await survivors(`${what} via ${via}, HTTP/2 caller`);
    problems.push(...after2);
    if (after2.length === 0 && !final(h2.status))
      problems.push(
        `${what} via ${via}, HTTP/2 caller: status ${h2.status ?? "-"} rst ${h2.rstCode ?? "-"} ${h2.error ?? ""}`,
      );
    return problems;
  }

  async function legitimateWorks(): Promise<void> {
    await world.restartGatewayIfExited();
    await world.restartAgentIfExited();
    const r = await legitimateGet(world, `/${CLUSTER}/version`, READER.token);
    assert.equal(r.status, 200, r.body);
  }

  for (const via of ["pod", "service"] as const) {
    test(`issue 39 item 3: ${via === "pod" ? "a pod through pods/proxy" : "a Service"} answering HTTP2-Settings leaves the gateway serving`, async () => {
      const problems = await exchange(
        Buffer.from("HTTP/1.1 200 OK\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\nContent-Length: 2\r\n\r\nok"),
        via,
        "HTTP2-Settings",
      ).then(async (p) => [
        ...p,
        ...(await exchange(
          Buffer.from(
            "HTTP/1.1 200 OK\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\nContent-Length: 2\r\n\r\nok",
          ),
          via,
          "Upgrade: h2c with HTTP2-Settings",
        )),
      ]);
      await legitimateWorks();
      assert.deepEqual(problems, []);
    });
  }

  test("issue 39 item 3: a pod answering status 600 (or 999, 000, 042, 42) leaves the gateway and the agent serving", async () => {
    const problems: string[] = [];
    for (const status of ["600", "999", "000", "042", "42"])
      problems.push(
        ...(await exchange(
          Buffer.from(`HTTP/1.1 ${status} Odd\r\nContent-Length: 2\r\n\r\nok`),
          "pod",
          `status ${status}`,
        )),
      );
    await legitimateWorks();
    assert.deepEqual(problems, []);
  });

  test(`fuzzed upstream answers (seed ${SEED}, ${RUNS} answers, each to an HTTP/1.1 and an HTTP/2 caller)`, async () => {
    const answers = fc.sample(answerArb, { seed: SEED, numRuns: RUNS });
    const deadline = Date.now() + FUZZ_BUDGET_MS;
    const problems: string[] = [];
    let ran = 0;
    for (const [i, a] of answers.entries()) {
      if (Date.now() > deadline) break;
      ran++;
      problems.push(...(await exchange(render(a), i % 2 === 0 ? "pod" : "service", `#${i} ${describeAnswer(a)}`)));
      if (i % 10 === 9) {
        try {
          await legitimateWorks();
        } catch (err) {
          problems.push(`after answer #${i}: a legitimate GET failed: ${errorMessage(err)}`);
        }
      }
    }
    await legitimateWorks();
    assert.ok(ran >= Math.min(RUNS, 20), `only ${ran} answers ran within ${FUZZ_BUDGET_MS} ms`);
    assert.deepEqual(problems, [], `${problems.length} bad answer(s):\n${problems.join("\n")}`);
  });
});
