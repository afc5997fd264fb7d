import assert from "node:assert/strict";
import { once } from "node:events";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import type * as http from "node:http";
import type * as tls from "node:tls";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { AGENT_UPGRADE_PROTOCOL, ConfigError } from "@cluster-proxy/api";
import { KubeResources, type KubeObject } from "@cluster-proxy/kube";
import { FakeApiServer } from "@cluster-proxy/kube/testing";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { silentLogger } from "@cluster-proxy/kit";
import { waitUntil } from "@cluster-proxy/tunnel/testing";
import { explainRefusal, HubAccess, openHubTunnel, readyPods, ReplicaWatch } from "./hub-tunnel.js";

/** A request to the hub, with the CN of the client certificate it came with. */
interface Seen {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  user: string;
}

/**
 * The hub apiserver: the faithful fake over mTLS (client certificates of the test client CA), its
 * EndpointSlices listed and watched; the upgrade of `pods/good:8096/proxy/` (a pod's proxy, which the
 * fake does not model) is answered 101 and then echoes, other pods get the apiserver's refusals.
 */
async function startHub(pki: TestPki): Promise<{ fake: FakeApiServer; upgrades: Seen[] }> {
  const fake = await FakeApiServer.start([], {
    tls: { cert: pki.serverCert, key: pki.serverKey, ca: pki.clientCa, requestCert: true, rejectUnauthorized: true },
  });
  const upgrades: Seen[] = [];
  fake.upgrade = (req, socket) => {
    const cert = (req.socket as tls.TLSSocket).getPeerCertificate();
    upgrades.push({
      method: req.method ?? "",
      url: req.url ?? "",
      headers: req.headers,
      user: String(cert.subject?.CN ?? ""),
    });
    const pod = /\/pods\/([^/:]+):8096\/proxy\/$/.exec(req.url ?? "")?.[1];
    const status = (code: number, message: string): void => {
      const body = JSON.stringify({ kind: "Status", status: "Failure", message, code });
      socket.end(
        `HTTP/1.1 ${code} X\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
      );
    };
    if (pod === "forbidden") status(403, 'pods "forbidden" is forbidden: User "x" cannot get resource "pods/proxy"');
    else if (pod === "gone") status(404, 'pods "gone" not found');
    else if (pod === "wrong")
      socket.write("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
    else if (pod === "good") {
      socket.write(
        `HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${AGENT_UPGRADE_PROTOCOL}\r\n\r\n`,
      );
      socket.pipe(socket);
    } else status(503, "error trying to reach service: dial tcp 10.0.0.1:8096: connect: connection refused");
  };
  return { fake, upgrades };
}

const slice = (
  name: string,
  endpoints: { pod: string; ready?: boolean; terminating?: boolean }[],
  service = "proxy-entrypoint",
): KubeObject => ({
  metadata: { name, namespace: "ns", labels: { "kubernetes.io/service-name": service } },
  endpoints: endpoints.map((e) => ({
    conditions: {
      ...(e.ready === undefined ? {} : { ready: e.ready }),
      ...(e.terminating === undefined ? {} : { terminating: e.terminating }),
    },
    targetRef: { kind: "Pod", name: e.pod },
  })),
});

describe("through the hub kube-apiserver (--hub-kubeconfig)", () => {
  let pki: TestPki;
  let hub: FakeApiServer;
  let upgrades: Seen[];
  let access: HubAccess;
  const { endpointSlice } = KubeResources;

  before(async () => {
    pki = await createTestPki();
    ({ fake: hub, upgrades } = await startHub(pki));
    const port = new URL(hub.url).port;
    // As OCM's registration agent writes it: the certificate files named relative to the kubeconfig.
    copyFileSync(pki.paths.client.cert, join(pki.dir, "tls.crt"));
    copyFileSync(pki.paths.client.key, join(pki.dir, "tls.key"));
    writeFileSync(
      join(pki.dir, "kubeconfig"),
      [
        "apiVersion: v1",
        "kind: Config",
        "clusters:",
        "- name: hub",
        "  cluster:",
        `    server: https://127.0.0.1:${port}`,
        `    certificate-authority-data: ${pki.ca.toString("base64")}`,
        "contexts:",
        "- name: default-context",
        "  context: {cluster: hub, user: default-auth, namespace: configuration}",
        "current-context: default-context",
        "users:",
        "- name: default-auth",
        "  user: {client-certificate: tls.crt, client-key: tls.key}",
        "",
      ].join("\n"),
    );
    access = new HubAccess(join(pki.dir, "kubeconfig"));
  });
  after(async () => {
    await hub.close();
    pki.cleanup();
  });

  test("the upgrade GET carries the token and the agent's client certificate; the 101 socket is a byte stream to the door", async () => {
    const socket = await openHubTunnel(await access.load(), { namespace: "ns", pod: "good", port: 8096 }, 5_000);
    const request = upgrades.at(-1)!;
    assert.equal(request.method, "GET");
    assert.equal(request.url, "/api/v1/namespaces/ns/pods/good:8096/proxy/");
    assert.equal(request.headers.upgrade, AGENT_UPGRADE_PROTOCOL);
    assert.match(String(request.headers.connection), /upgrade/i);
    assert.ok(request.user, "authenticated with the kubeconfig's client certificate");
    socket.resume();
    socket.write("ping");
    const [echo] = (await once(socket, "data")) as [Buffer];
    assert.equal(echo.toString(), "ping");
    socket.destroy();
  });

  test("refusals say why: RBAC, a pod gone, the pod unreachable, another protocol", async () => {
    const hubEndpoint = await access.load();
    const fail = (pod: string): Promise<string> =>
      openHubTunnel(hubEndpoint, { namespace: "ns", pod, port: 8096 }, 5_000).then(
        () => "opened",
        (err: Error) => err.message,
      );
    assert.match(
      await fail("forbidden"),
      /answered 403 .* refused by RBAC \(the agent needs get on pods\/proxy in namespace ns/,
    );
    assert.match(await fail("gone"), /answered 404 .* the proxy-server pod is gone: pods "gone" not found/);
    assert.match(
      await fail("down"),
      /answered 503 .* cannot reach the pod's agent upgrade door: error trying to reach service/,
    );
    assert.match(await fail("wrong"), /upgraded to "websocket"/);
    assert.match(explainRefusal(429, "", { namespace: "ns", pod: "p" }), /limiting requests/);
    assert.match(explainRefusal(401, "Unauthorized", { namespace: "ns", pod: "p" }), /hub credentials .* not accepted/);
  });

  test("a kubeconfig that cannot be loaded is a ConfigError naming --hub-kubeconfig", async () => {
    await assert.rejects(new HubAccess(join(pki.dir, "missing")).load(), (err: Error) => {
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /^--hub-kubeconfig: cannot load/);
      return true;
    });
  });

  /** A started replica watch of ns/proxy-entrypoint through `access`, with what it reported. */
  const startReplicaWatch = (): { watch: ReplicaWatch; seen: string[][]; errors: (string | undefined)[] } => {
    const seen: string[][] = [];
    const errors: (string | undefined)[] = [];
    const watch = new ReplicaWatch({
      access,
      namespace: "ns",
      service: "proxy-entrypoint",
      timeoutMs: 5_000,
      retryMs: 50,
      logger: silentLogger,
      onChange: (pods) => seen.push(pods),
      onError: (e) => errors.push(e),
    });
    watch.start();
    return { watch, seen, errors };
  };

  test("ready pods from EndpointSlices: listed, then followed by the watch, re-listed when it ends", async () => {
    assert.deepEqual(
      readyPods(slice("s", [{ pod: "a" }, { pod: "b", ready: false }, { pod: "c", ready: true }]) as never),
      ["a", "c"],
    );
    // A proxy-server a rollout starts (not ready, not terminating) gets agents before it is ready;
    // a draining one (terminating) does not.
    assert.deepEqual(
      readyPods(
        slice("s", [
          { pod: "new", ready: false, terminating: false },
          { pod: "old", ready: false, terminating: true },
          { pod: "up", ready: true, terminating: false },
        ]) as never,
      ),
      ["new", "up"],
    );
    hub.put(endpointSlice, slice("s1", [{ pod: "p-b" }, { pod: "p-a" }]));
    // Another Service's slice: not its replicas.
    hub.put(endpointSlice, slice("other", [{ pod: "x" }], "other-service"));
    const { watch, seen, errors } = startReplicaWatch();
    try {
      await waitUntil("the listed pods", () => seen.length === 1 && hub.openWatches() === 1);
      assert.deepEqual(seen[0], ["p-a", "p-b"]);
      const list = hub.requests.find((r) => r.path.endsWith("/endpointslices"))!;
      assert.equal(list.path, "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices");
      assert.equal(list.query.get("labelSelector"), "kubernetes.io/service-name=proxy-entrypoint");
      hub.put(endpointSlice, slice("s2", [{ pod: "p-c" }]));
      await waitUntil("a new replica", () => seen.length === 2);
      assert.deepEqual(seen[1], ["p-a", "p-b", "p-c"]);
      hub.put(endpointSlice, slice("s1", [{ pod: "p-a", ready: false }, { pod: "p-b" }]));
      await waitUntil("a replica no longer ready", () => seen.length === 3);
      assert.deepEqual(seen[2], ["p-b", "p-c"]);
      hub.put(endpointSlice, slice("s1", [{ pod: "p-a", ready: false }, { pod: "p-b" }]));
      hub.remove(endpointSlice, "s2", "ns");
      await waitUntil("a slice deleted", () => seen.length === 4);
      assert.deepEqual(seen[3], ["p-b"], "an unchanged set is not reported again");
      // The watch ends (apiserver timeout): the agent lists again, changes made meanwhile included.
      // (The re-list is held until the change is made, so that only the re-list can tell of it.)
      let release: (() => void) | undefined;
      hub.intercept = (req, _res, serve) => {
        if (req.query.get("watch") === "1") return serve();
        hub.intercept = undefined;
        release = serve;
      };
      hub.closeWatches();
      await waitUntil("the re-list", () => release !== undefined);
      hub.put(endpointSlice, slice("s1", [{ pod: "p-b" }, { pod: "p-d" }]));
      release?.();
      await waitUntil("the re-listed pods", () => seen.length === 5);
      assert.deepEqual(seen[4], ["p-b", "p-d"]);
      assert.ok(
        errors.every((e) => e === undefined),
        JSON.stringify(errors),
      );
    } finally {
      watch.stop();
    }
  });
  test("the replica watch reads the kubeconfig again for every request: a broken one is reported, a mended one recovers", async () => {
    const kubeconfig = join(pki.dir, "kubeconfig");
    const good = readFileSync(kubeconfig, "utf8");
    hub.put(endpointSlice, slice("s1", [{ pod: "p-a" }]));
    const { watch, seen, errors } = startReplicaWatch();
    try {
      await waitUntil("the listed pods", () => seen.length === 1 && hub.openWatches() === 1);
      writeFileSync(kubeconfig, "clusters: [not a kubeconfig");
      hub.closeWatches();
      await waitUntil("the failure reported", () => errors.some((e) => e !== undefined));
      assert.match(
        errors.find((e) => e !== undefined)!,
        /^cannot learn the proxy-server replicas from the EndpointSlices of ns\/proxy-entrypoint on the hub: --hub-kubeconfig: cannot load/,
      );
      hub.put(endpointSlice, slice("s1", [{ pod: "p-b" }]));
      writeFileSync(kubeconfig, good);
      await waitUntil("the re-list with the mended kubeconfig", () => seen.length === 2);
      assert.deepEqual(seen[1], ["p-b"]);
      assert.equal(errors.at(-1), undefined, "a successful list clears the reported error");
    } finally {
      watch.stop();
      writeFileSync(kubeconfig, good);
    }
  });
});
