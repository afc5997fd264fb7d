/**
 * @kubernetes/client-node reaching a managed cluster's API server by name through the hub: the
 * kubeconfig's server is `https://east`, its auth and CA stay in force, only the transport is
 * the tunnel (createTunnelHttpsAgent). This is the Kubernetes example of docs/guides/sdk.md, executed.
 */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import * as https from "node:https";
import type { AddressInfo } from "node:net";
import {
  CoreV1Api,
  KubeConfig,
  ServerConfiguration,
  createConfiguration,
  type RequestContext,
} from "@kubernetes/client-node";
import { createTunnelHttpsAgent } from "@cluster-proxy/client";
import { issueCertificate } from "@cluster-proxy/pki";
import { Harness } from "../framework/harness.js";

const h = new Harness();
after(() => h.close());

test("CoreV1Api lists namespaces of cluster east through the tunnel, with the kubeconfig's CA and token", async () => {
  await h.init(["east"]);
  const ca = { certPem: readFileSync(h.certs.ca.cert, "utf8"), keyPem: readFileSync(h.certs.ca.key, "utf8") };
  // a stand-in kube-apiserver inside cluster east, serving a certificate for the name "east"
  const serving = await issueCertificate(ca, { commonName: "east", dnsNames: ["east"], usage: "server" });
  const seen: string[] = [];
  const apiserver = https.createServer({ cert: serving.certPem, key: serving.keyPem }, (req, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers.authorization}`);
    res.setHeader("content-type", "application/json");
    res.end(
      JSON.stringify({
        kind: "NamespaceList",
        apiVersion: "v1",
        metadata: {},
        items: [{ metadata: { name: "from-east" } }],
      }),
    );
  });
  apiserver.listen(0, "127.0.0.1");
  await once(apiserver, "listening");
  h.onClose(() => {
    apiserver.closeAllConnections();
    apiserver.close();
  });
  const { ports } = await h.startServer();
  await h.startAgent("east", ports.agent, [
    `--apiserver-address=127.0.0.1:${(apiserver.address() as AddressInfo).port}`,
  ]);

  const hub = h.tunnelClient(ports.server);

  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "east", server: "https://east", caData: Buffer.from(ca.certPem).toString("base64") }],
    users: [{ name: "admin", token: "s3cret" }],
    contexts: [{ name: "east", cluster: "east", user: "admin" }],
    currentContext: "east",
  });
  // Keep the kubeconfig's authentication; swap only the transport for the tunnel.
  const api = new CoreV1Api(
    createConfiguration({
      baseServer: new ServerConfiguration("https://east", {}),
      authMethods: {
        default: {
          getName: () => "cluster-proxy",
          applySecurityAuthentication: async (ctx: RequestContext) => {
            await kc.applySecurityAuthentication(ctx);
            const tlsOptions = (ctx.getAgent() as https.Agent | undefined)?.options ?? {};
            ctx.setAgent(createTunnelHttpsAgent({ client: hub, ...tlsOptions }));
          },
        },
      },
    }),
  );
  const list = await api.listNamespace();
  assert.deepEqual(
    list.items.map((n) => n.metadata?.name),
    ["from-east"],
  );
  assert.deepEqual(seen, ["GET /api/v1/namespaces Bearer s3cret"]);
  await hub.close();
});
