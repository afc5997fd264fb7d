/**
 * The gateway's hostile suite, part 1: the desync corpus of issue 39 (docs/testing/hostile-clients.md, "The gateway").
 *
 * Invariant: one caller request is exactly one request at the kube-apiserver stand-in (or the
 * Service), carrying exactly the identity the hub checked (the caller's user and groups with the
 * impersonation prefix, the agent's own token) -- or a 4xx (or a refused stream) and nothing sent.
 *
 * Real proxy-server, agent and gateway processes (test/infra/gateway/hostile-world.ts). The caller
 * is a hub user with only `get` on `managedclusters/proxy` of mc1 (and, so that bodies of writes
 * reach the agent, a second user with every verb). Each case hides more requests in the body --
 * `POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings` with `Cluster-Proxy-Target: kube`,
 * `Impersonate-User: system:admin`, `Impersonate-Group: system:masters`, after the same POST with
 * the reader's own prefixed identity (which an agent checking the prefix lets through, so the hop
 * is tested on its own); or a `Cluster-Proxy-Target: service` one -- behind a framing trick, over HTTP/1.1 (bytes written by
 * hand on a TLS socket) and HTTP/2 (node's client, raw frames where node refuses), with every
 * method. After each case a legitimate request goes through (and marks the end of the case at the
 * stand-ins); then what the stand-ins received for the case is counted and checked. Every case of a
 * kind runs, the failures are listed together.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type * as http2 from "node:http2";
import {
  CLUSTER,
  IMPERSONATION_PREFIX,
  READER,
  SERVICE,
  WRITER,
  headerValues,
  startHostileWorld,
  type Caller,
  type HostileWorld,
  type Received,
} from "../infra/gateway/hostile-world.js";
import {
  headerBlock,
  http2Call,
  http2Calls,
  legitimateGet,
  rawHttp1,
  rawHttp2,
  type H2Answer,
  type RawAnswer,
  type RawH2Answer,
} from "../infra/gateway/callers.js";
import { errorMessage } from "@cluster-proxy/errors";

const METHODS = ["GET", "HEAD", "DELETE", "OPTIONS", "POST", "PUT", "PATCH"] as const;
type Method = (typeof METHODS)[number];
/** Methods the reader's `get` grant covers; the writer is used for the others too. */
const WRITES: readonly Method[] = ["DELETE", "POST", "PUT", "PATCH"];

let caseNo = 0;

/**
 * The hidden requests. `kube`: a cluster-admin ClusterRoleBinding POST as `system:admin` /
 * `system:masters`, preceded by one carrying the reader's own prefixed identity (which an agent
 * that checks the prefix lets through: the hop alone must hold). `service`: a request to the
 * Service without the gateway's allowlist check.
 */
function smuggled(id: number, servicePort: number, target: "kube" | "service" = "kube"): string {
  const body = '{"kind":"ClusterRoleBinding","roleRef":{"name":"cluster-admin"},"subjects":[{"name":"mallory"}]}';
  const request = (lines: string[]): string =>
    [...lines, "Content-Type: application/json", `Content-Length: ${body.length}`, "", body].join("\r\n");
  const binding = `POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings?smuggled=${id} HTTP/1.1`;
  if (target === "service")
    return request([
      `POST /smuggled?smuggled=${id} HTTP/1.1`,
      `Host: ${SERVICE.name}.${SERVICE.namespace}.svc`,
      "Cluster-Proxy-Target: service",
      `Cluster-Proxy-Service: https://${SERVICE.name}.${SERVICE.namespace}.svc:${servicePort}`,
    ]);
  return (
    request([
      binding,
      "Host: kubernetes.default.svc",
      "Cluster-Proxy-Target: kube",
      `Impersonate-User: ${IMPERSONATION_PREFIX}${READER.username}`,
      `Impersonate-Group: ${IMPERSONATION_PREFIX}${READER.groups[0]}`,
    ]) +
    request([
      binding,
      "Host: kubernetes.default.svc",
      "Cluster-Proxy-Target: kube",
      "Impersonate-User: system:admin",
      "Impersonate-Group: system:masters",
    ])
  );
}

function chunk(data: string, ext = ""): string {
  return `${data.length.toString(16)}${ext}\r\n${data}\r\n`;
}

/** What one case's caller saw, summarised. */
interface Outcome {
  /** Status codes of response heads the caller read. */
  statuses: number[];
  /** The caller got no response head but a refusal: a reset stream, GOAWAY, or a closed connection. */
  refused: boolean;
  detail: string;
}

function fromRaw1(a: RawAnswer): Outcome {
  return {
    statuses: a.statuses,
    refused: a.statuses.length === 0 && a.end !== "timeout",
    detail: `${a.end}: ${JSON.stringify(a.text.slice(0, 160))}`,
  };
}

function fromH2(a: H2Answer): Outcome {
  return {
    statuses: a.status !== undefined ? [a.status] : [],
    refused: a.status === undefined && a.error !== "timeout",
    detail: `status ${a.status ?? "-"} rst ${a.rstCode ?? "-"} ${a.error ?? ""} ${JSON.stringify(a.body.slice(0, 120))}`,
  };
}

function fromRawH2(a: RawH2Answer): Outcome {
  return {
    statuses: a.headers ? [a.status] : [],
    refused: !a.headers && a.end !== "timeout",
    detail: `${a.end} headers=${a.headers} status=${a.status} rst=${a.rstCode ?? "-"} goaway=${a.goaway}`,
  };
}

/** Why `r` does not carry exactly `caller`'s hub-checked identity, or undefined. */
function identityProblem(r: Received, caller: Caller): string | undefined {
  const user = headerValues(r.rawHeaders, "impersonate-user");
  if (user.length !== 1 || user[0] !== IMPERSONATION_PREFIX + caller.username)
    return `Impersonate-User ${JSON.stringify(user)}`;
  const groups = headerValues(r.rawHeaders, "impersonate-group")
    .flatMap((g) => g.split(","))
    .map((g) => g.trim());
  const allowed = new Set(caller.groups.map((g) => IMPERSONATION_PREFIX + g));
  allowed.add("system:authenticated");
  const bad = groups.filter((g) => !allowed.has(g));
  if (bad.length > 0 || !groups.includes(IMPERSONATION_PREFIX + caller.groups[0]!))
    return `Impersonate-Group ${JSON.stringify(groups)}`;
  const auth = headerValues(r.rawHeaders, "authorization");
  if (auth.length !== 1 || auth[0] !== "Bearer mc1-agent-sa-token") return `Authorization ${JSON.stringify(auth)}`;
  const leaked = r.rawHeaders.filter((_, i) => i % 2 === 0 && /^cluster-proxy-/i.test(r.rawHeaders[i] ?? ""));
  if (leaked.length > 0) return `contract headers reached the upstream: ${leaked.join(", ")}`;
  return undefined;
}

describe("gateway hostile suite: desync corpus", { timeout: 600_000 }, () => {
  let world: HostileWorld;
  const arrivals = (): Received[] => [...world.apiserver.received, ...world.service.received];

  before(async () => {
    world = await startHostileWorld();
  });
  after(async () => {
    await world?.close();
  });

  /** Where the stand-ins' records are now (for {@link arrivalsSince}). */
  const recordMark = (): readonly [number, number] =>
    [world.apiserver.received.length, world.service.received.length] as const;

  /** What the stand-ins received since `mark`, legitimate marker requests left out. */
  const arrivalsSince = (mark: readonly [number, number]): Received[] =>
    [...world.apiserver.received.slice(mark[0]), ...world.service.received.slice(mark[1])].filter(
      (r) => !r.url.includes("marker="),
    );

  /** Whether `r` is case `id`'s own request (its URL ends with `case=<id>`). */
  const isCase = (r: Received, id: number): boolean => new RegExp(`[?&]case=${id}$`).test(r.url);

  /** How the arrivals of case `id` (among `fresh`, with any hidden request) break the invariant. */
  function problemsOf(id: number, caller: Caller, outcome: Outcome, fresh: Received[]): string[] {
    const mine = fresh.filter((r) => isCase(r, id));
    const stray = fresh.filter((r) => !isCase(r, id));
    const problems: string[] = [];
    if (stray.length > 0)
      problems.push(
        `${stray.length} smuggled/stray request(s): ${stray.map((r) => `${r.method} ${r.url} as ${headerValues(r.rawHeaders, "impersonate-user").join(",") || "(no Impersonate-User)"}`).join("; ")}`,
      );
    if (mine.length > 1) problems.push(`${mine.length} requests for one caller request`);
    for (const r of mine) {
      const p = identityProblem(r, caller);
      if (p) problems.push(`wrong identity: ${p}`);
    }
    const ok2xx = outcome.statuses.some((s) => s >= 200 && s < 300);
    if (mine.length === 0 && !(outcome.refused || outcome.statuses.every((s) => s >= 400 && s < 500)))
      problems.push("nothing sent, yet the caller got no 4xx or refusal");
    if (mine.length === 0 && outcome.statuses.length === 0 && !outcome.refused) problems.push("no answer");
    if (ok2xx && mine.length !== 1) problems.push(`caller got 2xx but ${mine.length} requests arrived`);
    if (outcome.statuses.some((s) => s >= 500)) problems.push("a 5xx");
    return problems;
  }

  /** A legitimate GET marking case `id`'s end: "" when it got its own 200 answer, else why not. */
  async function legitimateAfter(id: number): Promise<string> {
    try {
      const r = await legitimateGet(world, `/${CLUSTER}/version?marker=${id}`, READER.token);
      if (r.status !== 200) return `; then a legitimate GET got ${r.status} ${r.body.slice(0, 120)}`;
      // Its answer must be its own, not one of a hidden request queued before it.
      if (!r.body.includes(JSON.stringify(`/version?marker=${id}`)))
        return `; then a legitimate GET got another request's answer: ${r.body.slice(0, 160)}`;
      return "";
    } catch (err) {
      return `; then a legitimate GET failed: ${errorMessage(err)}`;
    }
  }

  /**
   * Runs `send` as `caller` for case `id` (its request carries `case=<id>`), then a legitimate
   * request, and returns why the case broke the invariant (or undefined).
   */
  async function check(
    name: string,
    caller: Caller,
    send: (id: number) => Promise<Outcome>,
  ): Promise<string | undefined> {
    const id = ++caseNo;
    const seenBefore = recordMark();
    const outcome = await send(id);
    if (!(await world.gatewayAlive())) {
      const out = world.gateway.output().slice(-1500);
      await world.restartGatewayIfExited();
      return `${name} [case ${id}]: the gateway process exited\n${out}`;
    }
    const legit = await legitimateAfter(id);
    const problems = problemsOf(id, caller, outcome, arrivalsSince(seenBefore));
    if (problems.length === 0 && legit === "") return undefined;
    return `${name} [case ${id}]: ${problems.join("; ")}${legit} (caller saw ${outcome.detail})`;
  }

  /** Failures of the running test's cases, asserted empty at its end by {@link assertNoFailures}. */
  let failures: string[] = [];

  function assertNoFailures(): void {
    const found = failures;
    failures = [];
    assert.deepEqual(found, [], `${found.length} case(s) broke the invariant:\n${found.join("\n")}`);
  }

  /** Runs `one(method, caller)` for every method as the reader, and the writes again as the writer; records failures. */
  async function everyMethod(
    kind: string,
    one: (method: Method, caller: Caller) => ((id: number) => Promise<Outcome>) | undefined,
  ): Promise<void> {
    const runs: [Method, Caller][] = [
      ...METHODS.map((m) => [m, READER] as [Method, Caller]),
      ...WRITES.map((m) => [m, WRITER] as [Method, Caller]),
    ];
    for (const [method, caller] of runs) {
      const send = one(method, caller);
      if (!send) continue;
      const f = await check(`${kind} ${method} as ${caller.username}`, caller, send);
      if (f) failures.push(f);
    }
  }

  // ---- HTTP/1.1, bytes by hand -------------------------------------------------------------

  /** A hand-written HTTP/1.1 request head of `method` for case `id` as `caller`, with `lines` added; `Connection: close`. */
  function head1(method: Method, caller: Caller, id: number, lines: string[], eol = "\r\n"): string {
    return [
      `${method} /${CLUSTER}/api/v1/namespaces/default/configmaps?case=${id} HTTP/1.1`,
      "Host: localhost",
      `Authorization: Bearer ${caller.token}`,
      ...lines,
      "Connection: close",
      "",
      "",
    ].join(eol);
  }

  const h1 =
    (method: Method, caller: Caller, lines: (id: number) => string[], body: (id: number) => string, eol?: string) =>
    async (id: number): Promise<Outcome> =>
      fromRaw1(
        await rawHttp1(world, Buffer.from(head1(method, caller, id, lines(id), eol) + body(id), "latin1"), 3_000),
      );

  const chunkedSmuggle = (id: number): string => chunk(smuggled(id, world.service.port)) + "0\r\n\r\n";

  test("HTTP/1.1: a chunked body holding a second request (kube and service targets)", async () => {
    await everyMethod("h1 chunked body", (m, c) => h1(m, c, () => ["Transfer-Encoding: chunked"], chunkedSmuggle));
    await everyMethod("h1 chunked body (service)", (m, c) =>
      h1(
        m,
        c,
        () => ["Transfer-Encoding: chunked"],
        (id) => chunk(smuggled(id, world.service.port, "service")) + "0\r\n\r\n",
      ),
    );
    assertNoFailures();
  });

  test("HTTP/1.1: a chunked body in several chunks, the second request split across them", async () => {
    await everyMethod("h1 split chunks", (m, c) =>
      h1(
        m,
        c,
        () => ["Transfer-Encoding: chunked"],
        (id) => {
          const s = smuggled(id, world.service.port);
          return chunk(s.slice(0, 20)) + chunk(s.slice(20)) + "0\r\n\r\n";
        },
      ),
    );
    assertNoFailures();
  });

  test("HTTP/1.1: CL.TE and TE.CL", async () => {
    await everyMethod("h1 CL.TE", (m, c) =>
      h1(
        m,
        c,
        (id) => [
          `Content-Length: ${("0\r\n\r\n" + smuggled(id, world.service.port)).length}`,
          "Transfer-Encoding: chunked",
        ],
        (id) => "0\r\n\r\n" + smuggled(id, world.service.port),
      ),
    );
    await everyMethod("h1 TE.CL", (m, c) =>
      h1(m, c, () => ["Transfer-Encoding: chunked", "Content-Length: 4"], chunkedSmuggle),
    );
    assertNoFailures();
  });

  /** Obfuscated Transfer-Encoding headers (each alone and beside a Content-Length). */
  const OBFUSCATED_TE: Record<string, string[]> = {
    xchunked: ["Transfer-Encoding: xchunked"],
    "leading space": ["Transfer-Encoding:  chunked"],
    "chunked, identity": ["Transfer-Encoding: chunked, identity"],
    "identity, chunked": ["Transfer-Encoding: identity, chunked"],
    tab: ["Transfer-Encoding:\tchunked"],
    "trailing tab": ["Transfer-Encoding: chunked\t"],
    "value case": ["Transfer-Encoding: ChUnKeD"],
    "name case": ["tRaNsFeR-eNcOdInG: chunked"],
    "space before colon": ["Transfer-Encoding : chunked"],
    "duplicate chunked": ["Transfer-Encoding: chunked", "Transfer-Encoding: chunked"],
    "identity then chunked": ["Transfer-Encoding: identity", "Transfer-Encoding: chunked"],
    "chunked then x": ["Transfer-Encoding: chunked", "Transfer-Encoding: x"],
    "vertical tab": ["Transfer-Encoding:\x0bchunked"],
    quoted: ['Transfer-Encoding: "chunked"'],
  };

  test("HTTP/1.1: TE.TE with obfuscated Transfer-Encoding", async () => {
    for (const [name, lines] of Object.entries(OBFUSCATED_TE)) {
      await everyMethod(`h1 TE ${name}`, (m, c) => h1(m, c, () => lines, chunkedSmuggle));
      await everyMethod(`h1 TE ${name} + CL`, (m, c) =>
        h1(m, c, (id) => [...lines, `Content-Length: ${chunkedSmuggle(id).length}`], chunkedSmuggle),
      );
    }
    assertNoFailures();
  });

  test("HTTP/1.1: duplicate, listed and signed Content-Length", async () => {
    const variants: Record<string, (n: number) => string[]> = {
      "duplicate 0 and n": (n) => ["Content-Length: 0", `Content-Length: ${n}`],
      "duplicate n and 0": (n) => [`Content-Length: ${n}`, "Content-Length: 0"],
      "list 0, n": (n) => [`Content-Length: 0, ${n}`],
      "plus sign": (n) => [`Content-Length: +${n}`],
      "minus sign": () => ["Content-Length: -1"],
      "leading zeros": (n) => [`Content-Length: 000${n}`],
      hex: (n) => [`Content-Length: 0x${n.toString(16)}`],
      huge: () => ["Content-Length: 99999999999999999999999"],
    };
    for (const [name, lines] of Object.entries(variants))
      await everyMethod(`h1 CL ${name}`, (m, c) =>
        h1(
          m,
          c,
          (id) => lines(smuggled(id, world.service.port).length),
          (id) => smuggled(id, world.service.port),
        ),
      );
    assertNoFailures();
  });

  test("HTTP/1.1: chunk-size overflow and chunk extensions", async () => {
    const variants: Record<string, (s: string) => string> = {
      "size overflow (2^64 + n)": (s) =>
        `1${"0".repeat(15)}${s.length.toString(16).padStart(1, "0")}\r\n${s}\r\n0\r\n\r\n`,
      "size overflow (17 hex digits)": (s) => `f${s.length.toString(16).padStart(16, "0")}\r\n${s}\r\n0\r\n\r\n`,
      "negative size": (s) => `-${s.length.toString(16)}\r\n${s}\r\n0\r\n\r\n`,
      extension: (s) => chunk(s, ";ext=1") + "0\r\n\r\n",
      "quoted extension with CRLF-ish text": (s) => chunk(s, ';x="a\\"b"') + "0\r\n\r\n",
      "extension with bare LF": (s) => `${s.length.toString(16)};x\n${s}\r\n0\r\n\r\n`,
      "size with spaces": (s) => `${s.length.toString(16)}  \r\n${s}\r\n0\r\n\r\n`,
      trailers: (s) => chunk(s) + "0\r\nImpersonate-User: system:admin\r\n\r\n",
    };
    for (const [name, body] of Object.entries(variants))
      await everyMethod(`h1 chunk ${name}`, (m, c) =>
        h1(
          m,
          c,
          () => ["Transfer-Encoding: chunked"],
          (id) => body(smuggled(id, world.service.port)),
        ),
      );
    assertNoFailures();
  });

  test("HTTP/1.1: an upgrade the upstream does not grant, with a hidden request right after the head", async () => {
    // The stand-ins grant no upgrade: they answer it as a plain request and keep reading the
    // connection, as a server that refuses an upgrade may. Whatever the gateway relays after the
    // head must not become a request there.
    const upgrade = [
      "Connection: Upgrade",
      "Upgrade: websocket",
      "Sec-WebSocket-Version: 13",
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
    ];
    await everyMethod("h1 refused upgrade + hidden request", (m, c) => async (id) => {
      const head = head1(m, c, id, upgrade).replace("Connection: close\r\n", "");
      return fromRaw1(await rawHttp1(world, Buffer.from(head + smuggled(id, world.service.port), "latin1"), 3_000));
    });
    assertNoFailures();
  });

  test("HTTP/1.1: bare LF and obs-fold", async () => {
    await everyMethod("h1 bare LF head", (m, c) =>
      h1(m, c, () => ["Transfer-Encoding: chunked"], chunkedSmuggle, "\n"),
    );
    await everyMethod("h1 bare LF in chunk line", (m, c) =>
      h1(
        m,
        c,
        () => ["Transfer-Encoding: chunked"],
        (id) => {
          const s = smuggled(id, world.service.port);
          return `${s.length.toString(16)}\n${s}\n0\n\n`;
        },
      ),
    );
    await everyMethod("h1 obs-fold TE", (m, c) =>
      h1(m, c, () => ["Transfer-Encoding: identity", " chunked"], chunkedSmuggle),
    );
    await everyMethod("h1 obs-fold before TE", (m, c) =>
      h1(m, c, () => ["X-Note: a", " b", "Transfer-Encoding: chunked"], chunkedSmuggle),
    );
    await everyMethod("h1 obs-fold impersonation", (m, c) =>
      h1(
        m,
        c,
        () => ["X-Note: a", " Impersonate-User: system:admin"],
        () => "",
      ),
    );
    assertNoFailures();
  });

  // ---- HTTP/2 ------------------------------------------------------------------------------

  function h2Headers(
    method: Method,
    caller: Caller,
    id: number,
    extra: http2.OutgoingHttpHeaders = {},
  ): http2.OutgoingHttpHeaders {
    return {
      ":method": method,
      ":path": `/${CLUSTER}/api/v1/namespaces/default/configmaps?case=${id}`,
      authorization: `Bearer ${caller.token}`,
      ...extra,
    };
  }

  test("HTTP/2: a body without content-length holding a second request", async () => {
    await everyMethod("h2 body without length", (m, c) => async (id) => {
      const s = smuggled(id, world.service.port);
      return fromH2(await http2Call(world, h2Headers(m, c, id), [s.slice(0, 30), s.slice(30)], { timeoutMs: 3_000 }));
    });
    await everyMethod(
      "h2 body without length (service)",
      (m, c) => async (id) =>
        fromH2(
          await http2Call(world, h2Headers(m, c, id), [smuggled(id, world.service.port, "service")], {
            timeoutMs: 3_000,
          }),
        ),
    );
    assertNoFailures();
  });

  test("HTTP/2: 33 streams at once on one connection, every method, each body hiding requests (half with a length)", async () => {
    const runs: [Method, Caller][] = [];
    for (let round = 0; round < 3; round++)
      runs.push(
        ...METHODS.map((m) => [m, READER] as [Method, Caller]),
        ...WRITES.map((m) => [m, WRITER] as [Method, Caller]),
      );
    const ids = runs.map(() => ++caseNo);
    const mark = recordMark();
    const answers = await http2Calls(
      world,
      runs.map(([m, c], i) => {
        const s = smuggled(ids[i]!, world.service.port, i % 3 === 2 ? "service" : "kube");
        // Every other stream declares its length: those bodies are relayed (the hidden bytes as inert body).
        const length = i % 2 === 0 ? { "content-length": String(Buffer.byteLength(s)) } : {};
        return { headers: h2Headers(m, c, ids[i]!, length), body: [s.slice(0, 40), s.slice(40)] };
      }),
      10_000,
    );
    assert.ok(await world.gatewayAlive(), "the gateway process runs");
    const legit = await legitimateAfter(ids.at(-1)!);
    const fresh = arrivalsSince(mark);
    runs.forEach(([m, c], i) => {
      const problems = problemsOf(
        ids[i]!,
        c,
        fromH2(answers[i] ?? { body: "", error: "no answer" }),
        fresh.filter((r) => isCase(r, ids[i]!)),
      );
      if (problems.length > 0)
        failures.push(`h2 concurrent ${m} as ${c.username} [case ${ids[i]}]: ${problems.join("; ")}`);
    });
    const hidden = fresh.filter((r) => !ids.some((id) => isCase(r, id)));
    if (hidden.length > 0)
      failures.push(
        `h2 concurrent: ${hidden.length} hidden/stray request(s) sent: ${hidden.map((r) => `${r.method} ${r.url} as ${headerValues(r.rawHeaders, "impersonate-user").join(",") || "(no Impersonate-User)"}`).join("; ")}`,
      );
    if (legit) failures.push(`h2 concurrent${legit}`);
    assertNoFailures();
  });

  test("HTTP/2: a content-length that disagrees with DATA", async () => {
    await everyMethod("h2 content-length shorter than DATA", (m, c) => async (id) => {
      const s = smuggled(id, world.service.port);
      return fromH2(
        await http2Call(world, h2Headers(m, c, id, { "content-length": "5" }), ["hello", s], { timeoutMs: 3_000 }),
      );
    });
    await everyMethod(
      "h2 content-length longer than DATA",
      (m, c) => async (id) =>
        fromH2(
          await http2Call(
            world,
            h2Headers(m, c, id, { "content-length": "4096" }),
            [smuggled(id, world.service.port)],
            {
              timeoutMs: 3_000,
            },
          ),
        ),
    );
    await everyMethod(
      "h2 raw content-length 0 with DATA",
      (m, c) => async (id) =>
        fromRawH2(
          await rawHttp2(
            world,
            rawBlock(m, c, id, [["content-length", "0"]]),
            [Buffer.from(smuggled(id, world.service.port))],
            3_000,
          ),
        ),
    );
    assertNoFailures();
  });

  /** A raw request header block for case `id` with `extra` fields. */
  function rawBlock(
    method: Method,
    caller: Caller,
    id: number,
    extra: [string, string | Buffer][] = [],
    path?: string,
  ): Buffer {
    return headerBlock([
      [":method", method],
      [":scheme", "https"],
      [":path", path ?? `/${CLUSTER}/api/v1/namespaces/default/configmaps?case=${id}`],
      [":authority", "localhost"],
      ["authorization", `Bearer ${caller.token}`],
      ...extra,
    ]);
  }

  test("HTTP/2 raw frames: transfer-encoding, NUL and CR/LF in header values and the path", async () => {
    const variants: Record<
      string,
      (id: number) => { extra: [string, string | Buffer][]; path?: string; body: boolean }
    > = {
      "transfer-encoding: chunked": () => ({ extra: [["transfer-encoding", "chunked"]], body: true }),
      "connection header": () => ({ extra: [["connection", "keep-alive"]], body: true }),
      "NUL in a value": () => ({ extra: [["x-note", "a\0b"]], body: false }),
      "CR/LF in a value (impersonation)": () => ({
        extra: [["x-note", "a\r\nImpersonate-User: system:admin"]],
        body: false,
      }),
      "CR/LF in a value (second request)": (id) => ({
        extra: [["x-note", `a\r\nContent-Length: 0\r\n\r\n${smuggled(id, world.service.port)}`]],
        body: false,
      }),
      "LF in a value": () => ({ extra: [["x-note", "a\nImpersonate-Group: system:masters"]], body: false }),
      "CR/LF in :path": (id) => ({
        extra: [],
        path: `/${CLUSTER}/version?case=${id} HTTP/1.1\r\nImpersonate-User: system:admin\r\nX: y`,
        body: false,
      }),
      "upper-case name": () => ({ extra: [["Impersonate-User", "system:admin"]], body: false }),
      "space in a name": () => ({ extra: [["impersonate-user ", "system:admin"]], body: false }),
    };
    for (const [name, v] of Object.entries(variants))
      await everyMethod(`h2 raw ${name}`, (m, c) => async (id) => {
        const { extra, path, body } = v(id);
        const data = body ? [Buffer.from(chunk(smuggled(id, world.service.port)) + "0\r\n\r\n")] : [];
        return fromRawH2(await rawHttp2(world, rawBlock(m, c, id, extra, path), data, 3_000));
      });
    assertNoFailures();
  });

  test("HTTP/2 raw frames: a body without content-length holding a second request", async () => {
    await everyMethod(
      "h2 raw body without length",
      (m, c) => async (id) =>
        fromRawH2(await rawHttp2(world, rawBlock(m, c, id), [Buffer.from(smuggled(id, world.service.port))], 3_000)),
    );
    assertNoFailures();
  });

  test("no request hidden in any case reached a stand-in, late or not; the gateway still serves", async () => {
    const smuggledSeen = arrivals().filter((r) => r.url.includes("smuggled="));
    assert.deepEqual(
      smuggledSeen.map((r) => `${r.method} ${r.url} as ${headerValues(r.rawHeaders, "impersonate-user").join(",")}`),
      [],
    );
    assert.ok(await world.gatewayAlive(), "the gateway process runs");
    assert.equal((await legitimateGet(world, `/${CLUSTER}/version`, READER.token)).status, 200);
  });
});
