/**
 * The gateway's hostile suite, part 3: the trust boundaries of the aggregated path and of
 * `Connection` (docs/testing/hostile-clients.md, "The gateway: trust boundaries"; the invariants in
 * docs/design/gateway.md, "The aggregated path" and "Hop-by-hop headers").
 *
 * Invariants, each attacked with a corpus on the real gateway, agent and proxy-server processes
 * (test/infra/gateway/hostile-world.ts, with the hub's front proxy: a requestheader CA and the hub
 * apiserver's client certificate, and a second cluster mc2 that only the writer may see):
 * - The viewer (and the caller) is exactly the user the front proxy states, believed only on a
 *   connection with its certificate: X-Remote-* claims in any spelling from anyone else get
 *   nothing of someone else's, and many users multiplexed on the front proxy's one HTTP/2
 *   connection each get exactly their own answers. The fleet view shows only the clusters the
 *   viewer may use, and serves exactly the path it was asked (no dot segment or backslash makes a
 *   request for one path answer as another); its redirect stays relative and constant.
 * - Whatever extra keys the front proxy states (`constructor`, `__proto__`, ...) are that user's
 *   extras, carried to the cluster as they are.
 * - One request in, one request out, exactly the identity checked: headers a caller names in
 *   `Connection` never remove what the gateway adds (Impersonate-*, the contract headers) nor the
 *   framing of the agent leg.
 * - `/openapi/v2` and `/openapi/v3...` are answered 404 by the gateway itself, and no other path is:
 *   a cluster's own OpenAPI documents are reached as any cluster path.
 * - One user's cancelled requests never cut another user's: neither the gateway's one HTTP/2 session
 *   to a cluster's agent nor the front proxy's one connection to the gateway is closed for the
 *   streams a user resets, before or after their answers began.
 */
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import * as tls from "node:tls";
import { after, before, describe, test } from "node:test";
import { GATEWAY_API_ROOT } from "@cluster-proxy/api";
import {
  CLUSTER,
  IMPERSONATION_PREFIX,
  OTHER_CLUSTER,
  READER,
  WRITER,
  headerValues,
  startHostileWorld,
  type Caller,
  type HostileWorld,
  type Received,
} from "../infra/gateway/hostile-world.js";
import { gatewaySession, headerBlock, rawHttp2 } from "../infra/gateway/callers.js";
import { waitFor } from "../framework/waits.js";

/** A hub user without any grant. */
const NOBODY = { username: "eve", groups: ["team-c", "system:authenticated"] };
/** The aggregated prefix of cluster `c`. */
const agg = (c: string): string => `${GATEWAY_API_ROOT}/clusters/${c}/proxy`;
/** What each user may see in the fleet view. */
const VISIBLE: Record<string, string[]> = {
  [READER.username]: [CLUSTER],
  [WRITER.username]: [CLUSTER, OTHER_CLUSTER],
  [NOBODY.username]: [],
};

/** One HTTP/1.1 answer read off a raw TLS connection. */
interface Answer1 {
  status: number;
  head: string;
  body: string;
  /** Response heads read (pipelined requests get one each). */
  statuses: number[];
}

let caseNo = 0;

describe("gateway hostile suite: trust boundaries", { timeout: 600_000 }, () => {
  let world: HostileWorld;
  let frontProxy: { cert: Buffer; key: Buffer };

  before(async () => {
    world = await startHostileWorld({ frontProxy: true });
    frontProxy = world.frontProxy!;
  });
  after(async () => {
    await world?.close();
  });

  /** Writes `bytes` on a fresh HTTP/1.1 TLS connection (with `cert`, if given) and reads until it closes. */
  async function raw1(bytes: string, cert?: { cert: Buffer; key: Buffer }, timeoutMs = 5_000): Promise<Answer1> {
    const socket = tls.connect({
      host: "127.0.0.1",
      port: world.port,
      ca: world.servingCa,
      servername: "localhost",
      ALPNProtocols: ["http/1.1"],
      ...(cert ?? {}),
    });
    const chunks: Buffer[] = [];
    socket.on("data", (c: Buffer) => chunks.push(c));
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      socket.once("secureConnect", () => socket.write(Buffer.from(bytes, "latin1")));
      socket.once("close", () => {
        clearTimeout(timer);
        resolve();
      });
      socket.once("error", () => undefined);
    });
    socket.destroy();
    const text = Buffer.concat(chunks).toString("latin1");
    const statuses = [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
    const split = text.indexOf("\r\n\r\n");
    return {
      status: statuses[0] ?? 0,
      head: split < 0 ? text : text.slice(0, split),
      body: split < 0 ? "" : text.slice(split + 4),
      statuses,
    };
  }

  /** A GET head with `lines`, closing the connection. */
  const get1 = (path: string, lines: string[]): string =>
    [`GET ${path} HTTP/1.1`, "Host: localhost", ...lines, "Connection: close", "", ""].join("\r\n");

  /** The cluster names of a fleet snapshot body, or undefined when it is not one. */
  function snapshotClusters(body: string): string[] | undefined {
    try {
      const s = JSON.parse(body.trim()) as { clusters?: { cluster: string }[] };
      return s.clusters?.map((c) => c.cluster).sort();
    } catch {
      return undefined;
    }
  }

  /** Requests of case `id` at the kube-apiserver stand-in. */
  const arrivalsOf = (id: number): Received[] =>
    world.apiserver.received.filter((r) => new RegExp(`[?&]case=${id}(?:&|$)`).test(r.url));

  /** Why `r` does not carry exactly `user`'s identity, as the hub stated or checked it; or undefined. */
  function identityProblem(r: Received, user: { username: string; groups: string[] }): string | undefined {
    const u = headerValues(r.rawHeaders, "impersonate-user");
    if (u.length !== 1 || u[0] !== IMPERSONATION_PREFIX + user.username) return `Impersonate-User ${JSON.stringify(u)}`;
    const groups = headerValues(r.rawHeaders, "impersonate-group").flatMap((g) => g.split(",").map((x) => x.trim()));
    const allowed = new Set([...user.groups.map((g) => IMPERSONATION_PREFIX + g), "system:authenticated"]);
    if (groups.some((g) => !allowed.has(g)) || !groups.includes(IMPERSONATION_PREFIX + user.groups[0]!))
      return `Impersonate-Group ${JSON.stringify(groups)}`;
    const leaked = r.rawHeaders.filter((_, i) => i % 2 === 0 && /^(x-remote-|cluster-proxy-)/i.test(r.rawHeaders[i]!));
    if (leaked.length > 0) return `leaked ${leaked.join(",")}`;
    const auth = headerValues(r.rawHeaders, "authorization");
    if (auth.length !== 1 || auth[0] !== "Bearer mc1-agent-sa-token") return `Authorization ${JSON.stringify(auth)}`;
    return undefined;
  }

  /** One HTTP/2 connection with the front proxy's certificate (or none); `send` runs on it. */
  async function onH2<T>(
    cert: { cert: Buffer; key: Buffer } | undefined,
    send: (request: (headers: http2.OutgoingHttpHeaders) => Promise<{ status: number; body: string }>) => Promise<T>,
  ): Promise<T> {
    const session = gatewaySession(world, cert);
    const request = (headers: http2.OutgoingHttpHeaders): Promise<{ status: number; body: string }> =>
      new Promise((resolve) => {
        const s = session.request(headers);
        let status = 0;
        let body = "";
        const timer = setTimeout(() => s.close(http2.constants.NGHTTP2_CANCEL), 10_000);
        s.on("response", (h) => (status = Number(h[":status"])));
        s.on("data", (c: Buffer) => (body += c.toString()));
        s.on("error", () => undefined);
        s.on("close", () => {
          clearTimeout(timer);
          resolve({ status, body });
        });
      });
    try {
      return await send(request);
    } finally {
      session.close();
    }
  }

  /** Identity claims in every spelling a caller might try (raw HTTP/1.1 header lines). */
  const CLAIMS: Record<string, string[]> = {
    "X-Remote-User": [`X-Remote-User: ${WRITER.username}`],
    "lower case": [`x-remote-user: ${WRITER.username}`],
    "upper case": [`X-REMOTE-USER: ${WRITER.username}`],
    "mixed case": [`x-ReMoTe-uSeR: ${WRITER.username}`],
    duplicated: [`X-Remote-User: ${WRITER.username}`, `X-Remote-User: ${READER.username}`],
    "comma-joined": [`X-Remote-User: ${WRITER.username}, system:admin`],
    "groups too": [`X-Remote-User: ${WRITER.username}`, "X-Remote-Group: system:masters", "X-Remote-Group: team-b"],
    "comma-joined groups": [`X-Remote-User: ${WRITER.username}`, "X-Remote-Group: system:masters, team-b"],
    "extras, encoded names": [
      `X-Remote-User: ${WRITER.username}`,
      "X-Remote-Extra-Scopes: admin",
      "X-Remote-Extra-acme.com%2Fteam: root",
      "X-Remote-Extra-%41dmin: yes",
      "X-Remote-Extra-__proto__: x",
    ],
    uid: [`X-Remote-User: ${WRITER.username}`, "X-Remote-Uid: 0"],
    "named in Connection": [`X-Remote-User: ${WRITER.username}`, "Connection: X-Remote-User"],
  };

  test("identity claims without the front proxy's certificate: nothing without credentials, the caller's own view with them (fleet and clusters, HTTP/1.1 and HTTP/2)", async () => {
    const failures: string[] = [];
    const fleetPaths = [
      "/-/fleet/api/clusters",
      `${agg("-")}/fleet/api/clusters`,
      `/-/fleet/api/clusters/${OTHER_CLUSTER}`,
      `${agg("-")}/fleet/api/clusters/${OTHER_CLUSTER}`,
      "/-/fleet/api/events",
      `${agg("-")}/fleet/api/events`,
    ];
    for (const [name, claim] of Object.entries(CLAIMS)) {
      for (const path of fleetPaths) {
        // No credentials: 401 whatever the claim.
        const none = await raw1(get1(path, claim));
        if (none.status !== 401)
          failures.push(`${name} ${path} without credentials: ${none.status} ${none.body.slice(0, 80)}`);
        if (path.endsWith("/events")) continue;
        // The reader's token: the reader's view, never the claimed writer's.
        const own = await raw1(get1(path, [...claim, `Authorization: Bearer ${READER.token}`]));
        const expected = path.endsWith(OTHER_CLUSTER) ? 404 : 200;
        if (own.status !== expected) failures.push(`${name} ${path} as the reader: ${own.status}, not ${expected}`);
        if (expected === 200 && JSON.stringify(snapshotClusters(own.body)) !== JSON.stringify(VISIBLE[READER.username]))
          failures.push(`${name} ${path} as the reader saw ${own.body.slice(0, 120)}`);
      }
      // A cluster request: exactly the reader at the cluster, or 401 without credentials.
      for (const prefix of [`/${CLUSTER}`, agg(CLUSTER)]) {
        const none = await raw1(get1(`${prefix}/version?case=${++caseNo}`, claim));
        if (none.status !== 401 || arrivalsOf(caseNo).length !== 0)
          failures.push(`${name} ${prefix} without credentials: ${none.status}, ${arrivalsOf(caseNo).length} sent`);
        const id = ++caseNo;
        const own = await raw1(
          get1(`${prefix}/version?case=${id}`, [...claim, `Authorization: Bearer ${READER.token}`]),
        );
        const sent = arrivalsOf(id);
        if (own.status !== 200 || sent.length !== 1)
          failures.push(`${name} ${prefix}: ${own.status}, ${sent.length} sent`);
        for (const r of sent) {
          const p = identityProblem(r, READER);
          if (p) failures.push(`${name} ${prefix}: ${p}`);
        }
      }
    }
    // HTTP/2: names are lower case on the wire; duplicates and commas still.
    const h2Claims: http2.OutgoingHttpHeaders[] = [
      { "x-remote-user": WRITER.username },
      { "x-remote-user": [WRITER.username, READER.username], "x-remote-group": ["system:masters", "team-b"] },
      { "x-remote-user": `${WRITER.username}, system:admin`, "x-remote-extra-acme.com%2fteam": "root" },
    ];
    await onH2(undefined, async (request) => {
      for (const claim of h2Claims)
        for (const path of fleetPaths.filter((p) => !p.endsWith("/events"))) {
          const none = await request({ ":path": path, ...claim });
          if (none.status !== 401)
            failures.push(`h2 ${JSON.stringify(claim)} ${path} without credentials: ${none.status}`);
          const own = await request({ ":path": path, ...claim, authorization: `Bearer ${READER.token}` });
          if (!path.endsWith(OTHER_CLUSTER) && JSON.stringify(snapshotClusters(own.body)) !== JSON.stringify([CLUSTER]))
            failures.push(`h2 ${JSON.stringify(claim)} ${path} as the reader: ${own.status} ${own.body.slice(0, 80)}`);
          if (path.endsWith(OTHER_CLUSTER) && own.status !== 404)
            failures.push(`h2 ${JSON.stringify(claim)} ${path} as the reader: ${own.status}`);
        }
    });
    assert.deepEqual(failures, []);
  });

  test("many users on the front proxy's one HTTP/2 connection, interleaved: each gets exactly its own fleet view and its own identity at the cluster", async () => {
    const users = [
      { ...READER, spelling: "x-remote-user" },
      { ...WRITER, spelling: "x-remote-user" },
      { ...NOBODY, spelling: "x-remote-user" },
    ];
    const failures: string[] = [];
    await onH2(frontProxy, async (request) => {
      const runs = Array.from({ length: 90 }, (_, i) => async () => {
        const u = users[i % users.length]!;
        const who: http2.OutgoingHttpHeaders = { "x-remote-user": u.username, "x-remote-group": u.groups };
        const kind = Math.floor(i / users.length) % 3;
        if (kind === 0) {
          const r = await request({ ":path": `${agg("-")}/fleet/api/clusters`, ...who });
          const seen = snapshotClusters(r.body);
          if (r.status !== 200 || JSON.stringify(seen) !== JSON.stringify(VISIBLE[u.username]))
            failures.push(`${u.username} saw ${r.status} ${JSON.stringify(seen)}`);
        } else if (kind === 1) {
          const r = await request({ ":path": `${agg("-")}/fleet/api/clusters/${OTHER_CLUSTER}`, ...who });
          const expected = VISIBLE[u.username]!.includes(OTHER_CLUSTER) ? 200 : 404;
          if (r.status !== expected) failures.push(`${u.username} detail of ${OTHER_CLUSTER}: ${r.status}`);
        } else {
          const id = ++caseNo;
          const r = await request({ ":path": `${agg(CLUSTER)}/version?case=${id}`, ...who });
          const sent = arrivalsOf(id);
          const may = VISIBLE[u.username]!.includes(CLUSTER);
          if (r.status !== (may ? 200 : 403) || sent.length !== (may ? 1 : 0))
            failures.push(`${u.username} on ${CLUSTER}: ${r.status}, ${sent.length} sent`);
          for (const s of sent) {
            const p = identityProblem(s, u);
            if (p) failures.push(`${u.username} on ${CLUSTER}: ${p}`);
          }
        }
      });
      await Promise.all(runs.map((run) => run()));
    });
    assert.deepEqual(failures, []);
  });

  test("the front proxy's extra keys named like Object.prototype's (constructor, __proto__, ...) are the user's extras, on the cluster and the fleet view", async () => {
    const failures: string[] = [];
    const keys = [
      "constructor",
      "__proto__",
      "%5F%5Fproto%5F%5F",
      "toString",
      "hasOwnProperty",
      "valueOf",
      "isPrototypeOf",
    ];
    for (const key of keys) {
      const id = ++caseNo;
      const who = [
        `X-Remote-User: ${READER.username}`,
        `X-Remote-Group: ${READER.groups[0]}`,
        `X-Remote-Extra-${key}: v-${id}`,
      ];
      const r = await raw1(get1(`${agg(CLUSTER)}/version?case=${id}`, who), frontProxy);
      const sent = arrivalsOf(id);
      const decoded = decodeURIComponent(key).toLowerCase();
      if (r.status !== 200 || sent.length !== 1)
        failures.push(`${key}: ${r.status} ${r.body.slice(0, 100)}, ${sent.length} sent`);
      for (const s of sent) {
        const p = identityProblem(s, READER);
        if (p) failures.push(`${key}: ${p}`);
        const extra = s.rawHeaders.filter((_, i) => i % 2 === 1 && /^impersonate-extra-/i.test(s.rawHeaders[i - 1]!));
        const names = s.rawHeaders.filter((n, i) => i % 2 === 0 && /^impersonate-extra-/i.test(n));
        if (
          JSON.stringify(extra) !== JSON.stringify([`v-${id}`]) ||
          decodeURIComponent(names[0]!.slice("impersonate-extra-".length)).toLowerCase() !== decoded
        )
          failures.push(`${key}: the cluster got extras ${JSON.stringify(names)}=${JSON.stringify(extra)}`);
      }
      const fleet = await raw1(get1(`${agg("-")}/fleet/api/clusters`, who), frontProxy);
      if (fleet.status !== 200 || JSON.stringify(snapshotClusters(fleet.body)) !== JSON.stringify([CLUSTER]))
        failures.push(`${key}: the fleet view answered ${fleet.status} ${fleet.body.slice(0, 100)}`);
    }
    assert.deepEqual(failures, []);
  });

  test("fleet view path variants: exactly the canonical paths are served; a dot segment, backslash or encoding never serves another path", async () => {
    const auth = `Authorization: Bearer ${READER.token}`;
    const canonical = ["/-/fleet/api/clusters", `${agg("-")}/fleet/api/clusters`, "/-/fleet/api/clusters?x=1"];
    const variants = [
      "/-/fleet/./api/clusters",
      "/-/fleet/%2e/api/clusters",
      "/-/fleet/%2E/api/clusters",
      "/-/fleet/api/x/../clusters",
      "/-/fleet/api/x/%2e%2e/clusters",
      "/-/fleet/api\\clusters",
      "/-/fleet/api/clusters/../clusters",
      "/-/fleet/../-/fleet/api/clusters",
      "/-/fleet/../123456api/clusters",
      "/-/fleet/..\\123456api\\clusters",
      "//-/fleet/api/clusters",
      "/%2D/fleet/api/clusters",
      "/%2d/fleet/api/clusters",
      "/-/%66leet/api/clusters",
      "/-/FLEET/api/clusters",
      "/-/fleet/api%2Fclusters",
      "/-/fleet/api//clusters",
      "/-/fleet/api/clusters;x",
      `${agg("-")}/fleet/./api/clusters`,
      `${agg("-")}/fleet/../fleet/api/clusters`,
      `${agg("-")}/../-/proxy/fleet/api/clusters`,
      `${agg("%2D")}/fleet/api/clusters`,
      `${agg("-")}//fleet/api/clusters`,
      `${agg("-")}%2Ffleet/api/clusters`,
      `${GATEWAY_API_ROOT}/clusters/-/proxy/fleet/api\\clusters`,
      `${GATEWAY_API_ROOT}/clusters/${CLUSTER}/proxy/../../-/proxy/fleet/api/clusters`,
      `${GATEWAY_API_ROOT}/clusters/-/../${CLUSTER}/proxy/version`,
    ];
    const failures: string[] = [];
    for (const path of canonical) {
      const r = await raw1(get1(path, [auth]));
      if (r.status !== 200 || JSON.stringify(snapshotClusters(r.body)) !== JSON.stringify([CLUSTER]))
        failures.push(`canonical ${path}: ${r.status} ${r.body.slice(0, 80)}`);
    }
    const before = world.apiserver.received.length;
    for (const path of variants)
      for (const cert of [undefined, frontProxy]) {
        const lines = cert ? [`X-Remote-User: ${READER.username}`] : [auth];
        const r = await raw1(get1(path, lines), cert);
        if (r.status < 400 || r.status >= 500 || snapshotClusters(r.body) !== undefined)
          failures.push(`${path}${cert ? " (front proxy)" : ""}: ${r.status} ${r.body.slice(0, 80)}`);
      }
    if (world.apiserver.received.length !== before)
      failures.push(`${world.apiserver.received.length - before} variant(s) reached the cluster`);
    assert.deepEqual(failures, []);
  });

  test("the fleet view's redirect is relative and constant: no open redirect, no header from the request", async () => {
    const failures: string[] = [];
    const paths = [
      "/-/fleet",
      "/-/fleet?next=//evil.example/",
      "/-/fleet?%0d%0aSet-Cookie:%20a=b",
      `${agg("-")}/fleet`,
      `${agg("-")}/fleet?x=%0d%0aLocation:%20https://evil.example/`,
      `${agg("-")}/fleet?//evil.example`,
    ];
    for (const path of paths)
      for (const cert of [undefined, frontProxy]) {
        const r = await raw1(
          get1(path, [cert ? `X-Remote-User: ${READER.username}` : `Authorization: Bearer ${READER.token}`]),
          cert,
        );
        const locations = [...r.head.matchAll(/\r\nlocation: ([^\r]*)/gi)].map((m) => m[1]);
        if (r.status !== 308 || JSON.stringify(locations) !== JSON.stringify(["fleet/"]) || /set-cookie/i.test(r.head))
          failures.push(`${path}: ${r.status} ${JSON.stringify(r.head)}`);
        const target = new URL("fleet/", `https://hub${path.split("?")[0]}`);
        if (target.host !== "hub" || target.pathname !== `${path.split("?")[0]}/`)
          failures.push(`${path}: resolves to ${target.href}`);
      }
    assert.deepEqual(failures, []);
  });

  test("headers named in Connection never remove what the gateway adds nor the agent leg's framing (HTTP/1.1, pipelined)", async () => {
    const tokens = [
      "Impersonate-User",
      "impersonate-group",
      "Impersonate-Extra-Scopes",
      "Impersonate-Uid",
      "Authorization",
      "Host",
      "Content-Length",
      "Transfer-Encoding",
      "Cluster-Proxy-Target",
      "Cluster-Proxy-Forwarded-For",
      "Cluster-Proxy-Forwarded-Proto",
      "X-Remote-User",
      "TE",
      "Upgrade",
      "Keep-Alive",
      "keep-alive, Impersonate-User, Impersonate-Group, Cluster-Proxy-Target, Content-Length",
      " \tIMPERSONATE-USER\t ,, ,content-length",
      Array.from({ length: 900 }, (_, i) => `x-made-up-${i}`).join(", ") + ", Impersonate-User",
    ];
    const failures: string[] = [];
    const body = '{"kind":"ConfigMap"}';
    for (const token of tokens) {
      // A GET as the reader (who may only `get`), then a POST with a body as the writer, then
      // chunked; each followed on the same connection by a second request, so a leg that lost
      // its framing would show as a missing, merged or extra request.
      const cases: { caller: Caller; method: string; lines: (id: number) => string[]; payload: string }[] = [
        { caller: READER, method: "GET", lines: () => [], payload: "" },
        { caller: WRITER, method: "POST", lines: () => [`Content-Length: ${body.length}`], payload: body },
        {
          caller: WRITER,
          method: "PUT",
          lines: () => ["Transfer-Encoding: chunked"],
          payload: `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`,
        },
      ];
      for (const c of cases) {
        const id = ++caseNo;
        const first = [
          `${c.method} /${CLUSTER}/api/v1/namespaces/default/configmaps?case=${id} HTTP/1.1`,
          "Host: localhost",
          `Authorization: Bearer ${c.caller.token}`,
          ...c.lines(id),
          `Connection: ${token}`,
          "",
          "",
        ].join("\r\n");
        const second = get1(`/${CLUSTER}/version?case=${id}&second=1`, [`Authorization: Bearer ${c.caller.token}`]);
        const r = await raw1(first + c.payload + second);
        const sent = arrivalsOf(id);
        const label = `${c.method} as ${c.caller.username} with Connection: ${token.slice(0, 60)}`;
        // Either both are served (two answers, exactly two requests) or the first is refused with a 4xx.
        const served = r.statuses.length === 2 && r.statuses.every((s) => s === 200) && sent.length === 2;
        const refused = r.statuses.length >= 1 && r.statuses[0]! >= 400 && r.statuses[0]! < 500 && sent.length <= 1;
        if (!served && !refused) failures.push(`${label}: statuses ${JSON.stringify(r.statuses)}, ${sent.length} sent`);
        for (const s of sent) {
          const p = identityProblem(s, c.caller);
          if (p) failures.push(`${label}: ${p}`);
          if (s.method === "POST" || s.method === "PUT") {
            const cl = headerValues(s.rawHeaders, "content-length");
            const te = headerValues(s.rawHeaders, "transfer-encoding");
            if (!(cl.length === 1 && cl[0] === String(body.length)) && !(te.length === 1 && te[0] === "chunked"))
              failures.push(`${label}: the body reached the cluster framed as ${JSON.stringify({ cl, te })}`);
          }
        }
      }
    }
    assert.deepEqual(failures, []);
  });

  test("HTTP/2 callers sending connection-specific headers (which HTTP/2 forbids) are refused and nothing is sent", async () => {
    const failures: string[] = [];
    const fields: [string, string][] = [
      ["connection", "impersonate-user"],
      ["connection", "content-length"],
      ["connection", "x-remote-user"],
      ["keep-alive", "timeout=5"],
      ["proxy-connection", "keep-alive"],
      ["upgrade", "websocket"],
      ["te", "gzip"],
      ["transfer-encoding", "chunked"],
    ];
    for (const field of fields) {
      const id = ++caseNo;
      const a = await rawHttp2(
        world,
        headerBlock([
          [":method", "GET"],
          [":scheme", "https"],
          [":path", `/${CLUSTER}/version?case=${id}`],
          [":authority", "localhost"],
          ["authorization", `Bearer ${READER.token}`],
          field,
        ]),
        [],
        3_000,
      );
      const refused = a.rstCode !== undefined || a.goaway || (a.headers && a.status >= 400 && a.status < 500);
      if (!refused || arrivalsOf(id).length !== 0)
        failures.push(`${field.join(": ")}: ${JSON.stringify(a)}, ${arrivalsOf(id).length} sent`);
    }
    assert.deepEqual(failures, []);
  });

  test("/openapi/v2 and /openapi/v3... are answered by the gateway alone; a cluster's own OpenAPI paths reach the cluster; no variant is mistaken either way", async () => {
    const failures: string[] = [];
    const auth = `Authorization: Bearer ${READER.token}`;
    const before = world.apiserver.received.length;
    // Anything below /openapi/v3/ is the gateway's own 404 (the hub polls each group's document
    // there); a cluster named "openapi" would lose only its /v2 and /v3..., which no kube-apiserver serves.
    for (const path of [
      "/openapi/v2",
      "/openapi/v3",
      "/openapi/v3/apis/apps/v1",
      "/openapi/v2?timeout=32s",
      "/openapi/v3/../v2",
      "/openapi/v3?hash=x",
    ])
      for (const lines of [[], [auth]]) {
        const r = await raw1(get1(path, lines));
        if (r.status !== 404 || !/publishes no OpenAPI/.test(r.body))
          failures.push(`${path}: ${r.status} ${r.body.slice(0, 60)}`);
      }
    if (world.apiserver.received.length !== before) failures.push("an OpenAPI poll reached the cluster");
    // A cluster's own documents: the cluster's path, sent as asked.
    for (const prefix of [`/${CLUSTER}`, agg(CLUSTER)])
      for (const doc of ["/openapi/v2", "/openapi/v3", "/openapi/v3/api/v1"]) {
        const id = ++caseNo;
        const r = await raw1(get1(`${prefix}${doc}?case=${id}`, [auth]));
        const sent = arrivalsOf(id);
        if (r.status !== 200 || sent.length !== 1 || sent[0]!.url !== `${doc}?case=${id}`)
          failures.push(`${prefix}${doc}: ${r.status}, sent ${JSON.stringify(sent.map((s) => s.url))}`);
      }
    // Near misses are cluster paths (a cluster named "openapi", which does not exist, or a malformed
    // one): refused before any cluster, never the gateway's 404 document nor a request sent.
    const near = [
      "/openapi/v2/",
      "/openapi/V2",
      "/OPENAPI/v2",
      "/openapi/%76%32",
      "/openapi//v2",
      "/openapi/v2;x",
      "/openapi/v3%2Fapis",
      "//openapi/v2",
      "/./openapi/v2",
    ];
    const mark = world.apiserver.received.length;
    for (const path of near) {
      const r = await raw1(get1(path, [auth]));
      if (r.status < 400 || r.status >= 500 || /publishes no OpenAPI/.test(r.body))
        failures.push(`${path}: ${r.status} ${r.body.slice(0, 80)}`);
    }
    if (world.apiserver.received.length !== mark) failures.push("a near miss reached the cluster");
    assert.deepEqual(failures, []);
  });
  /** A stream through the gateway whose answer the stand-in holds (`hold`), with what arrived on it. */
  function heldStream(
    session: http2.ClientHttp2Session,
    path: string,
    who: http2.OutgoingHttpHeaders,
  ): { stream: http2.ClientHttp2Stream; text: () => string; error: () => string | undefined } {
    const stream = session.request({ ":path": path, ...who });
    let text = "";
    let error: string | undefined;
    stream.on("data", (c: Buffer) => (text += c.toString()));
    stream.on("error", (err: Error) => (error = err.message));
    return { stream, text: () => text, error: () => error };
  }

  /** Waits for `stream`'s response head (at most 10 s); its status. */
  async function headOf(stream: http2.ClientHttp2Stream): Promise<number> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(0), 10_000);
      stream.once("response", (h) => {
        clearTimeout(timer);
        resolve(Number(h[":status"]));
      });
      stream.once("close", () => {
        clearTimeout(timer);
        resolve(0);
      });
    });
  }

  /** Ends `victim`'s held answer and checks it ran to its end untouched. */
  async function victimFinishes(victim: ReturnType<typeof heldStream>): Promise<void> {
    assert.equal(victim.error(), undefined, "the other user's stream was not cut");
    assert.equal(victim.stream.closed, false, "the other user's stream still runs");
    const ended = new Promise<void>((resolve) => victim.stream.once("close", resolve));
    world.apiserver.releaseHeld();
    await ended;
    assert.equal(victim.text(), "first\nsecond\n");
    assert.equal(victim.stream.rstCode, http2.constants.NGHTTP2_NO_ERROR);
  }

  test("a user cancelling 1,500 watches it began does not cut another user's: the gateway's session to the cluster stays", async () => {
    const victimSession = gatewaySession(world);
    try {
      const victim = heldStream(victimSession, `/${CLUSTER}/api/v1/pods?watch=1&hold=answer`, {
        authorization: `Bearer ${WRITER.token}`,
      });
      assert.equal(await headOf(victim.stream), 200);
      let answered = 0;
      // 25 at a time (under the reader's cap), each batch on a connection of its own.
      for (let batch = 0; batch < 60; batch++) {
        const session = gatewaySession(world);
        const statuses = await Promise.all(
          Array.from({ length: 25 }, async () => {
            const s = heldStream(session, `/${CLUSTER}/api/v1/pods?hold=answer`, {
              authorization: `Bearer ${READER.token}`,
            });
            const status = await headOf(s.stream);
            s.stream.close(http2.constants.NGHTTP2_CANCEL);
            return status;
          }),
        );
        answered += statuses.filter((x) => x === 200).length;
        session.destroy();
      }
      assert.equal(answered, 1_500, "every cancelled request had been answered");
      await victimFinishes(victim);
    } finally {
      victimSession.destroy();
    }
  });

  test("on the front proxy's one connection, a user cancelling 300 requests before their answers and 1,200 after does not cut it for another user", async () => {
    const session = gatewaySession(world, frontProxy);
    let goaway: number | undefined;
    session.on("goaway", (code: number) => (goaway = code));
    const by = (u: { username: string; groups: string[] }): http2.OutgoingHttpHeaders => ({
      "x-remote-user": u.username,
      "x-remote-group": u.groups,
    });
    try {
      const victim = heldStream(session, `${agg(CLUSTER)}/api/v1/pods?watch=1&hold=answer`, by(WRITER));
      assert.equal(await headOf(victim.stream), 200);
      // Before their answers: the cluster holds them; each waits until it reached the cluster.
      for (let batch = 0; batch < 12; batch++) {
        const mark = world.apiserver.received.length;
        const streams = Array.from({ length: 25 }, () =>
          heldStream(session, `${agg(CLUSTER)}/api/v1/pods?hold=head&case=${++caseNo}`, by(READER)),
        );
        await waitFor("the held requests at the cluster", () => world.apiserver.received.length >= mark + 25, 10_000);
        for (const s of streams) s.stream.close(http2.constants.NGHTTP2_CANCEL);
      }
      // After their answers began.
      for (let batch = 0; batch < 48; batch++) {
        await Promise.all(
          Array.from({ length: 25 }, async () => {
            const s = heldStream(session, `${agg(CLUSTER)}/api/v1/pods?hold=answer`, by(READER));
            await headOf(s.stream);
            s.stream.close(http2.constants.NGHTTP2_CANCEL);
          }),
        );
      }
      assert.equal(goaway, undefined, "the front proxy's connection got no GOAWAY");
      await victimFinishes(victim);
    } finally {
      session.destroy();
    }
  });
});
