/**
 * The fleet view served by the gateway, end to end on the test environment with the chart, driven
 * by the fleet blocks of docs/guides/gateway.md run as written (as gateway.test.ts runs the
 * others): the README's chart install; the guide's hub grants (alice: mc1; the fleet view's viewer
 * bob: mc1; its auditor audrey: mc2 and mc2's audit records); the guide's port-forward to the
 * Service, from the lab as an operator's machine. Then, through that port-forward: bob's API and
 * alice's event stream list only mc1, installed, Available and probed; alice's request to mc2 is
 * refused; and in Debian's Chromium (run in the lab, where the port-forward listens) alice enters
 * her token in the page's form and sees only mc1's row, while audrey sees alice's refusal in mc2's
 * audit view, marked denied. Screenshots: test-artifacts/fleet/gateway-*.png.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { createHash, X509Certificate } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { ClusterDetail, FleetSnapshot } from "@cluster-proxy/fleet";
import { KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "@cluster-proxy/addon-manager";
import { MANAGED, nsOf } from "../infra/env/config.js";
import { waitFor } from "../infra/env/exec.js";
import { type TestEnv, startTestEnv } from "../infra/env/fixture.js";
import { GuideOperator } from "../infra/addon/guide-operator.js";
import { RELEASE, hubHelm, removeLeftRelease } from "../infra/chart.js";
import { docBlock, runAsOperator } from "../infra/addon/readme-install.js";
import { Browser, CHROMIUM, chromiumMissing } from "../framework/browser.js";
import { GATEWAY, NS, gatewayPods, installChartAndWaitAvailable } from "../infra/gateway/gateway-setup.js";

const ALICE = "system:serviceaccount:default:alice";
/** What the guide's blocks create, for the cleanup before and after. */
const HUB_OBJECTS = [
  ["serviceaccount", "alice", "default"],
  ["serviceaccount", "bob", "default"],
  ["serviceaccount", "audrey", "default"],
  ["clusterrolebinding", "alice-cluster-proxy-mc1"],
  ["clusterrolebinding", "bob-cluster-proxy-view-mc1"],
  ["clusterrolebinding", "audrey-cluster-proxy-audit-mc2"],
  ["clusterrole", "cluster-proxy-user-mc1"],
  ["clusterrole", "cluster-proxy-view-mc1"],
  ["clusterrole", "cluster-proxy-audit-mc2"],
] as const;
/** Where the guide's port-forward listens, on the operator's machine (the lab). */
const LOCAL = "https://localhost:9092";
/** The gateway's name in its serving certificate (curl verifies it against the serving CA). */
const SERVICE_HOST = `${GATEWAY}.${NS}.svc`;

interface Secret extends KubeObject {
  data?: Record<string, string>;
}

describe("the fleet view on the gateway: who sees what", { timeout: 60 * 60_000 }, () => {
  let env: TestEnv;
  let hub: KubeApi;
  let op: GuideOperator;
  let dir = "";
  let path = "";
  let portForward: ChildProcess | undefined;
  let portForwardOut = "";
  let browser: Browser | undefined;
  const tokens: Record<string, string> = {};

  /** A guide block as the operator runs it, in their directory; its output is logged unless it is a `secret`. */
  const operator = (what: string, script: string, secret = false): Promise<string> => op.run(what, script, { secret });
  const deleteObjects = (): void => {
    for (const [kind, name, namespace] of HUB_OBJECTS)
      env.kubectl("hub", ["delete", kind, name, "--ignore-not-found", ...(namespace ? ["-n", namespace] : [])], {
        allowFail: true,
      });
  };
  /**
   * A request to the gateway through the guide's port-forward, from the lab, TLS verified against
   * the hub's serving CA for the Service's name: the status and the body.
   */
  const viaPortForward = async (
    token: string,
    urlPath: string,
    extra: string[] = [],
  ): Promise<{ status: number; body: string }> => {
    const r = await runAsOperator(
      env,
      path,
      `curl -sS --cacert serving-ca.crt --connect-to ::127.0.0.1:9092 -H "Authorization: Bearer $TOKEN" ` +
        `-o body.out -w '%{http_code}' ${extra.join(" ")} 'https://${SERVICE_HOST}:9092${urlPath}' || true; cat body.out`,
      120_000,
      { cwd: dir, env: { TOKEN: token }, typed: true },
    );
    const m = /^(\d{3})([\s\S]*)$/.exec(r.stdout);
    assert.ok(m, `curl ${urlPath}: ${r.stdout}${r.stderr}`);
    return { status: Number(m[1]), body: m[2]! };
  };
  const snapshotOf = async (who: string): Promise<FleetSnapshot> => {
    const r = await viaPortForward(tokens[who]!, "/-/fleet/api/clusters");
    assert.equal(r.status, 200, r.body);
    return JSON.parse(r.body) as FleetSnapshot;
  };

  before(
    async () => {
      env = await startTestEnv();
      hub = new KubeApi(env.kubeConfig("hub"));
      op = GuideOperator.create(env, "cp-fleet-e2e-");
      ({ dir, path } = op);
      // What an interrupted run left: the release and the addon's CSRs, then the guide's objects.
      await removeLeftRelease(env, hub);
      deleteObjects();
    },
    { timeout: 30 * 60_000 },
  );

  after(async () => {
    await browser?.close();
    if (portForward?.pid !== undefined) {
      try {
        process.kill(-portForward.pid, "SIGTERM");
      } catch {
        // already gone
      }
    }
    if (env) {
      hubHelm(env, ["uninstall", "-n", NS, RELEASE], { allowFail: true });
      deleteObjects();
    }
    op?.remove();
    await env?.close();
  });

  test("the README's chart install, the guide's grants of alice, the viewer bob and the auditor audrey", async () => {
    await installChartAndWaitAvailable(op, MANAGED);
    await waitFor("ready gateway pods", 180_000, async () => (await gatewayPods(hub)).length >= 1, 1000);
    await operator("guide gateway-grant-hub", docBlock("gateway-grant-hub"));
    await operator("guide fleet-grant-viewer", docBlock("fleet-grant-viewer"));
    await operator("guide fleet-grant-auditor", docBlock("fleet-grant-auditor"));
    tokens.alice = (await operator("guide fleet-token", docBlock("fleet-token"), true)).trim();
    for (const who of ["bob", "audrey"])
      tokens[who] = (await operator(`a token of ${who}`, docBlock("fleet-token").replace("alice", who), true)).trim();
    const serving = await hub.get<Secret>(Resources.secret, "cluster-proxy-gateway-serving", NS);
    writeFileSync(join(dir, "serving-ca.crt"), Buffer.from(serving.data?.["ca.crt"] ?? "", "base64"));
  });

  test("the guide's port-forward: bob's API and alice's event stream list only mc1, installed, Available, probed", async () => {
    const block = docBlock("fleet-open");
    portForward = spawn(
      "ip",
      [
        "netns",
        "exec",
        nsOf("lab"),
        "env",
        `PATH=${path}`,
        `KUBECONFIG=${env.kubeconfigPath("hub")}`,
        "bash",
        "-c",
        block,
      ],
      { cwd: dir, detached: true, stdio: ["ignore", "pipe", "pipe"] },
    );
    portForward.stdout!.on("data", (d: Buffer) => (portForwardOut += d.toString()));
    portForward.stderr!.on("data", (d: Buffer) => (portForwardOut += d.toString()));
    await waitFor(`the port-forward listening (${portForwardOut})`, 60_000, () =>
      /Forwarding from/.test(portForwardOut),
    );

    const page = await viaPortForward("", "/-/fleet/");
    assert.equal(page.status, 200, "the page needs no token");
    assert.match(page.body, /<script/);
    const anon = await viaPortForward("", "/-/fleet/api/clusters");
    assert.equal(anon.status, 401);

    const bob = await waitFor(
      "bob's snapshot: mc1 Available and probed",
      120_000,
      async () => {
        const s = await snapshotOf("bob");
        return s.clusters[0]?.available === "True" && s.clusters[0].latencyMs !== null ? s : undefined;
      },
      1000,
    );
    assert.deepEqual(
      bob.clusters.map((r) => r.cluster),
      ["mc1"],
    );
    assert.equal(bob.audit, false);
    const row = bob.clusters[0]!;
    assert.equal(row.installed, true);
    assert.ok(row.agentCertExpiry && Date.parse(row.agentCertExpiry) > Date.now(), JSON.stringify(row));
    assert.ok(row.serversExpected !== null && row.serversExpected >= 1, JSON.stringify(row));
    assert.ok(
      Object.values(row.agentsByServer).some((n) => n > 0),
      JSON.stringify(row),
    );
    assert.equal((await viaPortForward(tokens.bob!, "/-/fleet/api/clusters/mc2")).status, 404);

    const audrey = await snapshotOf("audrey");
    assert.deepEqual(
      audrey.clusters.map((r) => r.cluster),
      ["mc2"],
    );
    assert.equal(audrey.audit, true);

    // alice's stream, read for 5 s: its snapshot lists mc1 only.
    const stream = await viaPortForward(tokens.alice!, "/-/fleet/api/events", ["-N", "--max-time", "5"]);
    const first = /^event: snapshot\ndata: (.*)$/m.exec(stream.body)?.[1];
    assert.ok(first, stream.body);
    assert.deepEqual(
      (JSON.parse(first) as FleetSnapshot).clusters.map((r) => r.cluster),
      ["mc1"],
    );
  });

  test("alice's request to mc2 is refused, and shows in mc2's audit view, marked denied", async () => {
    const denied = await viaPortForward(tokens.alice!, "/mc2/api/v1/namespaces");
    assert.equal(denied.status, 403, denied.body);
    const detail = await waitFor(
      "alice's refusal in mc2's audit view",
      30_000,
      async () => {
        const r = await viaPortForward(tokens.audrey!, "/-/fleet/api/clusters/mc2");
        const d = JSON.parse(r.body) as ClusterDetail;
        return d.audit?.some((e) => e.user === ALICE && e.denied) ? d : undefined;
      },
      1000,
    );
    const entry = detail.audit!.find((e) => e.user === ALICE)!;
    assert.deepEqual([entry.status, entry.verb, entry.resource], [403, "list", "namespaces"]);
    const alicesView = await viaPortForward(tokens.alice!, "/-/fleet/api/clusters/mc2");
    assert.equal(alicesView.status, 404, "alice may not see mc2");
  });

  test("in Chromium: alice enters her token and sees only mc1; audrey sees the refusal in mc2's audit view", async (t) => {
    const missing = chromiumMissing();
    if (missing) return t.skip(missing);
    // Chromium runs in the lab (the operator's machine, where the port-forward listens). The
    // serving certificate names the Service, not localhost, so even a trusted serving CA would
    // not do: the browser is told to accept exactly this certificate's key, as a user who
    // compared its fingerprint (the guide) accepts it, and nothing else.
    const serving = await hub.get<Secret>(Resources.secret, "cluster-proxy-gateway-serving", NS);
    const cert = new X509Certificate(Buffer.from(serving.data?.["tls.crt"] ?? "", "base64"));
    const spki = createHash("sha256")
      .update(cert.publicKey.export({ type: "spki", format: "der" }))
      .digest("base64");
    const wrapper = join(dir, "chromium-in-lab");
    writeFileSync(wrapper, `#!/bin/sh\nexec ip netns exec ${nsOf("lab")} ${CHROMIUM} "$@"\n`, { mode: 0o755 });
    browser = await Browser.launch({
      executablePath: wrapper,
      args: [`--ignore-certificate-errors-spki-list=${spki}`],
    });

    const alice = await browser.open(`${LOCAL}/-/fleet/`);
    await alice.getByTestId("token-form").waitFor({ timeout: 15_000 });
    await browser.screenshot(alice, "gateway-token-form");
    await alice.getByLabel("Bearer token").fill(tokens.alice!);
    await alice.getByRole("button", { name: "Show the fleet" }).click();
    await alice.locator('[data-testid="fleet-row"][data-cluster="mc1"]').waitFor({ timeout: 15_000 });
    const rows = alice.locator('[data-testid="fleet-row"]');
    assert.equal(await rows.count(), 1, "alice sees one row");
    assert.equal(await rows.first().getAttribute("data-cluster"), "mc1");
    await browser.screenshot(alice, "gateway-viewer-mc1-only");

    const audrey = await browser.open(`${LOCAL}/-/fleet/`);
    await audrey.getByTestId("token-form").waitFor({ timeout: 15_000 });
    await audrey.getByLabel("Bearer token").fill(tokens.audrey!);
    await audrey.getByRole("button", { name: "Show the fleet" }).click();
    const row = audrey.locator('[data-testid="fleet-row"][data-cluster="mc2"]');
    await row.waitFor({ timeout: 15_000 });
    await row.click();
    const denial = audrey.locator('[data-testid="cluster-detail"] [data-testid="audit-row"][data-denied="true"]');
    await denial.first().waitFor({ timeout: 15_000 });
    assert.match((await denial.first().textContent()) ?? "", /alice/);
    await denial.first().scrollIntoViewIfNeeded();
    await browser.screenshot(audrey, "gateway-audit-denied");
  });
});
