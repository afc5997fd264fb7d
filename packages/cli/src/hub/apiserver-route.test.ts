import assert from "node:assert/strict";
import { once } from "node:events";
import http from "node:http";
import net from "node:net";
import { after, before, test } from "node:test";
import { KubeConfig } from "@kubernetes/client-node";
import { WebSocketServer, type WebSocket } from "ws";
import { KubeApi } from "@cluster-proxy/kube";
import { managedProxyConfigurationFromApi } from "@cluster-proxy/api";
import {
  ApiserverRelay,
  GATEWAY_SELECTOR,
  PORT_FORWARD_PROTOCOL,
  PROXY_SERVER_SELECTOR,
  isReadyPod,
  openPodPortForward,
  readyProxyServerPods,
} from "./apiserver-route.js";
import { openProxyRoute, type Hub, type HubFlags } from "./hub-access.js";

const NS = "open-cluster-management-addon";

/**
 * A stand-in hub kube-apiserver: pods of the proxy-server label (`ready` says which are Ready),
 * and pods/portforward over WebSocket (v4 framing) to an echo server that prefixes each answer
 * with the pod's name. `refuse` answers every port-forward with that status.
 */
class FakeHub {
  ready = new Set(["proxy-a", "proxy-b"]);
  refuse: number | undefined;
  /** Ports that nothing listens on (the kubelet reports them on the error channel). */
  closedPorts = new Set<number>();
  readonly forwards: string[] = [];
  readonly bearer: string[] = [];
  private readonly server = http.createServer((req, res) => this.request(req, res));
  private readonly wss = new WebSocketServer({
    noServer: true,
    handleProtocols: (offered) => (offered.has(PORT_FORWARD_PROTOCOL) ? PORT_FORWARD_PROTOCOL : false),
  });

  async start(): Promise<string> {
    this.server.on("upgrade", (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
      const m = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/portforward\?ports=(\d+)$/.exec(req.url ?? "");
      this.bearer.push(req.headers.authorization ?? "");
      if (!m || this.refuse) {
        const status = this.refuse ?? 404;
        const body = JSON.stringify({ kind: "Status", message: `pods "x" is forbidden: nope (${status})` });
        socket.end(
          `HTTP/1.1 ${status} No\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
        );
        return;
      }
      this.wss.handleUpgrade(req, socket, head, (ws) => this.forward(ws, m[2]!, Number(m[3])));
    });
    this.server.listen(0, "127.0.0.1");
    await once(this.server, "listening");
    return `http://127.0.0.1:${(this.server.address() as net.AddressInfo).port}`;
  }

  close(): void {
    this.server.closeAllConnections();
    this.server.close();
  }

  private request(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = new URL(req.url ?? "/", "http://x");
    if (url.pathname === `/api/v1/namespaces/${NS}/pods`) {
      const selector = url.searchParams.get("labelSelector");
      const pod = (name: string, ready: boolean): unknown => ({
        metadata: { name, namespace: NS },
        status: { phase: "Running", conditions: [{ type: "Ready", status: ready ? "True" : "False" }] },
      });
      res.setHeader("content-type", "application/json");
      res.end(
        JSON.stringify({
          metadata: { resourceVersion: "1" },
          items:
            selector === PROXY_SERVER_SELECTOR
              ? ["proxy-a", "proxy-b"].map((n) => pod(n, this.ready.has(n)))
              : selector === GATEWAY_SELECTOR
                ? [pod("gateway-a", true)]
                : [],
        }),
      );
      return;
    }
    res.statusCode = 404;
    res.end("{}");
  }

  private forward(ws: WebSocket, pod: string, port: number): void {
    this.forwards.push(pod);
    const portBytes = Buffer.alloc(2);
    portBytes.writeUInt16LE(port);
    ws.send(Buffer.concat([Buffer.of(0), portBytes]));
    ws.send(Buffer.concat([Buffer.of(1), portBytes]));
    if (this.closedPorts.has(port)) {
      ws.send(Buffer.concat([Buffer.of(1), Buffer.from(`failed to connect to localhost:${port}: connection refused`)]));
      ws.close();
      return;
    }
    ws.on("message", (data: Buffer) => {
      if (data[0] !== 0) return;
      const text = data.subarray(1).toString();
      if (text === "bye") ws.close();
      else ws.send(Buffer.concat([Buffer.of(0), Buffer.from(`${pod}:${text}`)]));
    });
  }
}

let hub: FakeHub;
let kc: KubeConfig;

before(async () => {
  hub = new FakeHub();
  const server = await hub.start();
  kc = new KubeConfig();
  kc.loadFromOptions({
    // Plain HTTP (client-node allows it only with skipTLSVerify); the TLS options are client-go's own.
    clusters: [{ name: "hub", server, skipTLSVerify: true }],
    users: [{ name: "me", token: "hub-token" }],
    contexts: [{ name: "hub", cluster: "hub", user: "me" }],
    currentContext: "hub",
  });
});
after(() => hub.close());

/** Send `text` on `stream` and resolve with the next chunk it reads. */
async function roundTrip(stream: NodeJS.ReadWriteStream, text: string): Promise<string> {
  const answer = once(stream, "data");
  stream.write(text);
  return String((await answer)[0]);
}

test("only Running, Ready pods that are not being deleted are chosen", async () => {
  hub.ready = new Set(["proxy-b"]);
  assert.deepEqual(await readyProxyServerPods(new KubeApi(kc), NS), ["proxy-b"]);
  assert.equal(isReadyPod({ metadata: { name: "p", deletionTimestamp: "x" }, status: { phase: "Running" } }), false);
  hub.ready = new Set(["proxy-a", "proxy-b"]);
});

test("a port-forward is a byte stream to the pod's port, with the hub credentials, over v4.channel.k8s.io", async () => {
  const stream = await openPodPortForward(kc, { namespace: NS, pod: "proxy-a", port: 8090 }, 10_000);
  assert.equal(await roundTrip(stream, "hello"), "proxy-a:hello");
  assert.equal(hub.bearer.at(-1), "Bearer hub-token");
  const ended = once(stream, "end");
  stream.write("bye");
  stream.resume();
  await ended;
});

test("a port nothing listens on fails with the kubelet's message from the error channel", async () => {
  hub.closedPorts.add(9999);
  try {
    const failed = await openPodPortForward(kc, { namespace: NS, pod: "proxy-a", port: 9999 }, 10_000).then(
      async (s) => {
        if (!s.destroyed) await once(s, "close");
        return s.errored instanceof Error ? s.errored : new Error("closed without an error");
      },
      (err: Error) => err,
    );
    assert.match(failed.message, /pods\/proxy-a port 9999: failed to connect to localhost:9999: connection refused/);
  } finally {
    hub.closedPorts.delete(9999);
  }
});

test("a refusal of the apiserver names the right that is missing", async () => {
  hub.refuse = 403;
  try {
    await assert.rejects(
      openPodPortForward(kc, { namespace: NS, pod: "proxy-a", port: 8090 }, 10_000),
      /answered 403 .*needs create on pods\/portforward in namespace open-cluster-management-addon.*forbidden/,
    );
  } finally {
    hub.refuse = undefined;
  }
});

test("the relay keeps its pod while it is Ready and chooses another when it goes away", async () => {
  const relay = await ApiserverRelay.start({ kc, api: new KubeApi(kc), namespace: NS, port: 8090, timeoutMs: 10_000 });
  const connect = async (): Promise<net.Socket> => {
    const s = net.connect(relay.port, "127.0.0.1");
    await once(s, "connect");
    return s;
  };
  try {
    const first = await connect();
    assert.equal(await roundTrip(first, "one"), "proxy-a:one");
    hub.ready = new Set(["proxy-b"]);
    const second = await connect();
    assert.equal(await roundTrip(second, "two"), "proxy-b:two", "proxy-a is no longer Ready");
    hub.ready = new Set(["proxy-a", "proxy-b"]);
    const third = await connect();
    assert.equal(await roundTrip(third, "three"), "proxy-b:three", "the last pod while it stays Ready");
    for (const s of [first, second, third]) s.destroy();
  } finally {
    hub.ready = new Set(["proxy-a", "proxy-b"]);
    await relay.close();
  }
});

test("--via: auto without a direct route goes through the apiserver; bad values and contradictions name the flag", async () => {
  const mpc = managedProxyConfigurationFromApi({
    metadata: { name: "cluster-proxy" },
    spec: { proxyServer: { image: "s", namespace: NS }, proxyAgent: { image: "a" } },
  });
  const getHub = (): Promise<Hub> => Promise.resolve({ api: new KubeApi(kc), mpc, kc, inCluster: false });
  const flags: HubFlags = { configuration: "cluster-proxy", inClusterProxyCertLookup: true, via: "auto" };
  // The fake hub lists no Services (404): no LoadBalancer, and the Service name does not resolve here.
  const route = await openProxyRoute(getHub, flags, 8090);
  try {
    assert.equal(route.via, "apiserver");
    assert.equal(route.endpoint.servername, `proxy-entrypoint.${NS}.svc`);
    assert.match(route.describe(), /^apiserver port-forward to open-cluster-management-addon\/proxy-a:8090$/);
    const s = net.connect(route.endpoint.port, route.endpoint.host);
    assert.equal(await roundTrip(s, "x"), "proxy-a:x");
    s.destroy();
  } finally {
    await route.close();
  }
  const direct = await openProxyRoute(getHub, { ...flags, via: "direct" }, 8090);
  assert.equal(direct.via, "direct");
  assert.equal(direct.endpoint.host, `proxy-entrypoint.${NS}.svc`);
  const given = await openProxyRoute(getHub, { ...flags, proxyServerHost: "10.0.0.1" }, 8090);
  assert.deepEqual([given.via, given.endpoint.host], ["direct", "10.0.0.1"]);
  await assert.rejects(
    openProxyRoute(getHub, { ...flags, via: "tunnel" }, 8090),
    /--via: "tunnel" is not one of auto, apiserver, direct/,
  );
  await assert.rejects(
    openProxyRoute(getHub, { ...flags, via: "apiserver", proxyServerHost: "10.0.0.1" }, 8090),
    /--via=apiserver: --proxy-server-host/,
  );
  hub.ready = new Set();
  try {
    await assert.rejects(openProxyRoute(getHub, { ...flags, via: "apiserver" }, 8090), /no Ready proxy-server pod/);
  } finally {
    hub.ready = new Set(["proxy-a", "proxy-b"]);
  }
});

test("the relay of the gateway forwards to a Ready gateway pod", async () => {
  const relay = await ApiserverRelay.start({
    kc,
    api: new KubeApi(kc),
    namespace: NS,
    port: 9092,
    selector: GATEWAY_SELECTOR,
    timeoutMs: 10_000,
  });
  try {
    const s = net.connect(relay.port, "127.0.0.1");
    await once(s, "connect");
    assert.equal(await roundTrip(s, "hi"), "gateway-a:hi");
    s.destroy();
  } finally {
    await relay.close();
  }
});
