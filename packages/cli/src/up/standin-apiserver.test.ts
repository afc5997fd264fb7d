import assert from "node:assert/strict";
import http from "node:http";
import https from "node:https";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { once } from "node:events";
import { test } from "node:test";
import { WebSocket } from "ws";
import { startSampleService } from "./sample-service.js";
import { ensureStandinCerts, standinToken } from "./standin-apiserver.js";

function get(
  url: string,
  options: https.RequestOptions,
  mod: typeof http | typeof https,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    mod
      .get(url, options, (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => (body += d));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on("error", reject);
  });
}

test("a demo cluster's port serves the sample service over HTTP and a stand-in apiserver over TLS", async () => {
  const dir = mkdtempSync(join(tmpdir(), "cp-standin-"));
  try {
    const paths = await ensureStandinCerts(dir);
    const again = await ensureStandinCerts(dir);
    assert.deepEqual(again, paths, "reused");
    const service = await startSampleService("east", {
      cluster: "east",
      cert: readFileSync(paths.cert, "utf8"),
      key: readFileSync(paths.key, "utf8"),
      token: standinToken("east"),
    });
    try {
      const plain = await get(`http://127.0.0.1:${service.port}/`, {}, http);
      assert.match(plain.body, /^hello from east/);
      const tlsOptions = { ca: readFileSync(paths.ca), servername: "kubernetes.default.svc", agent: false as const };
      const url = `https://127.0.0.1:${service.port}/api/v1/namespaces`;
      assert.equal((await get(url, tlsOptions, https)).status, 401, "no token");
      const list = await get(url, { ...tlsOptions, headers: { authorization: "Bearer demo-token-east" } }, https);
      assert.equal(list.status, 200);
      const names = (JSON.parse(list.body) as { items: { metadata: { name: string } }[] }).items.map(
        (n) => n.metadata.name,
      );
      assert.deepEqual(names, ["default", "kube-system", "east-apps"]);
      const health = await get(`https://127.0.0.1:${service.port}/healthz`, tlsOptions, https);
      assert.deepEqual(health, { status: 200, body: "ok" });
      // kubectl exec / port-forward: the pod is there; an upgrade other than exec over WebSocket
      // is answered with a Status saying it reached the stand-in (which runs no containers).
      const auth = { authorization: "Bearer demo-token-east" };
      const pod = await get(
        `https://127.0.0.1:${service.port}/api/v1/namespaces/default/pods/sample`,
        { ...tlsOptions, headers: auth },
        https,
      );
      assert.equal((JSON.parse(pod.body) as { status: { phase: string } }).status.phase, "Running");
      for (const [sub, upgrade] of [
        ["exec?command=date", "websocket"],
        ["portforward", "SPDY/3.1"],
      ] as const) {
        const answer = await get(
          `https://127.0.0.1:${service.port}/api/v1/namespaces/default/pods/sample/${sub}`,
          { ...tlsOptions, headers: { ...auth, connection: "Upgrade", upgrade } },
          https,
        );
        assert.equal(answer.status, 400, sub);
        assert.match(
          answer.body,
          /(exec|portforward) reached the stand-in kube-apiserver of cluster east through the hub/,
        );
      }
      // exec over WebSocket (kubectl's v5/v4 channel protocol) runs in the pretend container.
      for (const [command, expected] of [
        [
          ["echo", "hi", "there"],
          [
            [1, /^hi there\n$/],
            [3, /^\{"metadata":\{\},"status":"Success"\}$/],
          ],
        ],
        [
          ["date"],
          [
            [2, /^date: command not found/],
            [3, /"reason":"NonZeroExitCode".*"message":"127"/],
          ],
        ],
      ] as const) {
        const query = command.map((c) => `command=${c}`).join("&");
        const ws = new WebSocket(
          `wss://127.0.0.1:${service.port}/api/v1/namespaces/default/pods/sample/exec?${query}&stdout=true&stderr=true`,
          ["v5.channel.k8s.io", "v4.channel.k8s.io"],
          { ca: tlsOptions.ca, headers: auth },
        );
        const messages: Buffer[] = [];
        ws.on("message", (data: Buffer) => messages.push(data));
        await once(ws, "close");
        assert.equal(ws.protocol, "v5.channel.k8s.io");
        assert.equal(messages.length, expected.length, messages.join(" | "));
        for (const [i, [channel, text]] of expected.entries()) {
          assert.equal(messages[i]![0], channel);
          assert.match(messages[i]!.subarray(1).toString(), text);
        }
      }
    } finally {
      await service.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
