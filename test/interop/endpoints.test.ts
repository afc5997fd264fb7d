/**
 * The health ports and metrics answer like the Go proxy-server and proxy-agent: the same status
 * and body for /healthz, /readyz, /ready and an unknown path (agent readiness in both states, with
 * `?verbose`), and every `konnectivity_network_proxy_*` metric family the Go binaries export after
 * a dial exists here with the same type and label names.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { GO_AGENT_FLAGS, GO_SERVER_FLAGS } from "@cluster-proxy/api";
import { after, before, describe, test } from "node:test";
import { Harness, echoServer, freePort } from "../framework/harness.js";
import { httpGet } from "../framework/http.js";
import { waitFor } from "../framework/waits.js";
import {
  goBin,
  notePairing,
  ready,
  reportPairings,
  startGoAgent,
  startGoServer,
  startTsAgent,
  startTsServer,
  tsClient,
  type AgentCtl,
  type ServerCtl,
} from "../framework/go-harness.js";

/** Metric families of a /metrics page: type and the label names of their samples (`le` aside). */
function families(text: string, prefix: string): Map<string, { type: string; labels: string }> {
  const types = new Map<string, string>();
  const labels = new Map<string, Set<string>>();
  for (const line of text.split("\n")) {
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (t) {
      types.set(t[1]!, t[2]!);
      continue;
    }
    if (line.startsWith("#") || !line.startsWith(prefix)) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? /.exec(line);
    if (!m) continue;
    let name = m[1]!;
    if (!types.has(name)) name = name.replace(/_(bucket|sum|count)$/, "");
    const set = labels.get(name) ?? new Set<string>();
    for (const kv of (m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) if (kv[1] !== "le") set.add(kv[1]!);
    labels.set(name, set);
  }
  const out = new Map<string, { type: string; labels: string }>();
  for (const [name, set] of labels) out.set(name, { type: types.get(name) ?? "?", labels: [...set].sort().join(",") });
  return out;
}

/** Flags and defaults a Go binary's `--help` prints (pflag's format). */
function goHelpFlags(binary: string): { flag: string; type: string; default: string }[] {
  let text: string;
  try {
    text = execFileSync(binary, ["--help"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (err) {
    text = String((err as { stdout?: string }).stdout ?? "");
  }
  const out: { flag: string; type: string; default: string }[] = [];
  for (const line of text.split("\n")) {
    const m = /^\s+(?:-\w, )?--([\w-]+)(?: (\w+))?\s{2,}(.*)$/.exec(line);
    if (!m || m[1] === "help") continue;
    let def = /\(default (.*)\)$/.exec(m[3]!)?.[1] ?? "";
    if (def.startsWith('"') && def.endsWith('"')) def = def.slice(1, -1);
    // Random per run: the UUID defaults of --server-id / --agent-id.
    if (m[1] === "server-id" || m[1] === "agent-id") def = "";
    out.push({ flag: m[1]!, type: m[2] ?? "bool", default: def });
  }
  return out;
}

describe("the Go flag table is the Go binaries' --help", () => {
  test("proxy-server and proxy-agent v0.36.0: same flags, types and defaults", () => {
    for (const [binary, table] of [
      ["proxy-server", GO_SERVER_FLAGS],
      ["proxy-agent", GO_AGENT_FLAGS],
    ] as const) {
      const visible = table.filter((f) => !f.hidden).map(({ flag, type, default: d }) => ({ flag, type, default: d }));
      assert.deepEqual(goHelpFlags(join(goBin(), binary)), visible, binary);
    }
  });
});

async function page(port: number, path: string): Promise<{ status: number; body: string }> {
  return httpGet(`http://127.0.0.1:${port}${path}`);
}

describe("health ports and metrics answer like Go's", { timeout: 120_000 }, () => {
  const h = new Harness();
  let goServer: ServerCtl;
  let tsServer: ServerCtl;
  let echo: number;

  before(async () => {
    await h.init(["east"]);
    echo = await echoServer(h);
    goServer = await startGoServer(h, { strategies: "default" });
    tsServer = await startTsServer(h, ["--proxy-strategies=default"]);
  });
  after(async () => {
    await h.close();
    reportPairings("endpoints.test.ts");
  });

  test("server health port without agents: /healthz, /readyz, /ready and an unknown path", async () => {
    for (const path of ["/healthz", "/readyz", "/ready", "/no-such-page"]) {
      assert.deepEqual(await page(tsServer.healthPort, path), await page(goServer.healthPort, path), path);
    }
  });

  test("agent health port before it reaches a server", async () => {
    const nowhere = await freePort();
    const agents: AgentCtl[] = [
      await startGoAgent(h, nowhere, { cluster: "east", identifiers: "host=east", waitReady: false }),
      await startTsAgent(h, nowhere, { cluster: "east", identifiers: "host=east", waitReady: false }),
    ];
    const [go, ts] = agents as [AgentCtl, AgentCtl];
    await waitFor("both agents' health ports", async () => {
      const [a, b] = await Promise.all([page(go.healthPort, "/healthz"), page(ts.healthPort, "/healthz")]);
      return a.status === 200 && b.status === 200;
    });
    for (const path of ["/healthz", "/readyz", "/ready", "/readyz?verbose", "/no-such-page"]) {
      assert.deepEqual(await page(ts.healthPort, path), await page(go.healthPort, path), path);
    }
    for (const a of agents) await a.kill();
  });

  test("connected agents, one dial each: readiness and every Go metric family", async () => {
    const go = await startGoAgent(h, goServer.agentPort, { cluster: "east", identifiers: "host=east" });
    const ts = await startTsAgent(h, tsServer.agentPort, { cluster: "east", identifiers: "host=east" });
    await waitFor(
      "both servers ready",
      async () => (await ready(goServer.healthPort)) && (await ready(tsServer.healthPort)),
    );
    for (const path of ["/healthz", "/readyz", "/readyz?verbose", "/ready"]) {
      assert.deepEqual(await page(ts.healthPort, path), await page(go.healthPort, path), `agent ${path}`);
      assert.deepEqual(await page(tsServer.healthPort, path), await page(goServer.healthPort, path), `server ${path}`);
    }
    for (const server of [goServer, tsServer]) {
      const client = tsClient(h, server.grpcPort);
      const socket = await client.dial(`127.0.0.1:${echo}`);
      socket.write("ping");
      await new Promise<void>((resolve) => socket.once("data", () => resolve()));
      socket.destroy();
    }
    notePairing("health and metrics: Go server/agent vs ours, side by side");
    for (const [what, goPort, tsPort, prefix] of [
      ["server", goServer.healthPort, tsServer.healthPort, "konnectivity_network_proxy_server_"],
      ["agent", go.healthPort, ts.healthPort, "konnectivity_network_proxy_agent_"],
    ] as const) {
      // Go's vectors show up once a series exists: wait until the dial's series are in.
      let goFamilies = new Map<string, { type: string; labels: string }>();
      await waitFor(`Go ${what}'s dial metrics`, async () => {
        goFamilies = families((await page(goPort, "/metrics")).body, prefix);
        return goFamilies.has(`${prefix}dial_duration_seconds`) || goFamilies.has(`${prefix}stream_packets_total`);
      });
      const ours = families((await page(tsPort, "/metrics")).body, prefix);
      const differ = [...goFamilies]
        .filter(([name, family]) => JSON.stringify(ours.get(name)) !== JSON.stringify(family))
        .map(
          ([name, family]) => `${name}: Go ${family.type} {${family.labels}}, ours ${JSON.stringify(ours.get(name))}`,
        );
      assert.deepEqual(differ, [], `${what} metric families that differ from Go's`);
      assert.ok(goFamilies.size >= 4, `Go ${what} exported ${[...goFamilies.keys()].join(", ")}`);
    }
    await go.kill();
    await ts.kill();
  });
});
