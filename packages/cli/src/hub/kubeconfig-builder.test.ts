import assert from "node:assert/strict";
import { test } from "node:test";
import { buildKubeconfig, currentUser } from "./kubeconfig-builder.js";

const pem = (s: string): Buffer => Buffer.from(`-----BEGIN CERTIFICATE-----\n${s}\n-----END CERTIFICATE-----`);

test("the kubeconfig goes through the hub's CONNECT door with the cluster in the proxy URL, TLS verified", () => {
  const doc = buildKubeconfig({
    cluster: "mc1",
    proxy: { host: "10.200.30.90", port: 8093 },
    clusterCa: pem("CLUSTER"),
    proxyCa: pem("PROXY"),
    proxyCert: Buffer.from("CERT"),
    proxyKey: Buffer.from("KEY"),
    credentials: { token: "t0k" },
  }) as {
    clusters: { name: string; cluster: Record<string, string> }[];
    users: { name: string; user: Record<string, string> }[];
    contexts: { name: string; context: { cluster: string; user: string } }[];
    "current-context": string;
  };
  const cluster = doc.clusters[0]!.cluster;
  assert.equal(cluster.server, "https://kubernetes.default.svc");
  assert.equal(cluster["proxy-url"], "https://mc1:@10.200.30.90:8093");
  assert.equal(cluster["insecure-skip-tls-verify"], undefined);
  assert.equal(cluster["tls-server-name"], undefined, "it would apply to the proxy as well");
  const bundle = Buffer.from(cluster["certificate-authority-data"]!, "base64").toString();
  assert.match(bundle, /CLUSTER\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nPROXY/);
  const user = doc.users[0]!.user;
  assert.equal(user.token, "t0k");
  assert.equal(Buffer.from(user["client-certificate-data"]!, "base64").toString(), "CERT");
  assert.deepEqual(doc.contexts[0], { name: "mc1", context: { cluster: "mc1", user: "mc1-via-hub" } });
  assert.equal(doc["current-context"], "mc1");
  const v6 = buildKubeconfig({ ...baseInput(), proxy: { host: "fd00::1", port: 8093 } }) as {
    clusters: { cluster: Record<string, string> }[];
  };
  assert.equal(v6.clusters[0]!.cluster["proxy-url"], "https://mc1:@[fd00::1]:8093");
});

function baseInput(): Parameters<typeof buildKubeconfig>[0] {
  return {
    cluster: "mc1",
    proxy: { host: "hub", port: 8093 },
    clusterCa: pem("A"),
    proxyCa: pem("B"),
    proxyCert: Buffer.from("C"),
    proxyKey: Buffer.from("D"),
    credentials: {},
  };
}

test("--credentials-from copies the current user, with relative paths made absolute", () => {
  const kc = {
    "current-context": "work",
    contexts: [
      { name: "other", context: { user: "nobody" } },
      { name: "work", context: { user: "oidc" } },
    ],
    users: [
      { name: "nobody", user: { token: "no" } },
      {
        name: "oidc",
        user: {
          exec: { apiVersion: "client.authentication.k8s.io/v1", command: "./bin/login", args: ["x"] },
          tokenFile: "tok",
        },
      },
    ],
  };
  assert.deepEqual(currentUser(kc, "f", "/home/u/.kube"), {
    exec: { apiVersion: "client.authentication.k8s.io/v1", command: "/home/u/.kube/bin/login", args: ["x"] },
    tokenFile: "/home/u/.kube/tok",
  });
});

test("--credentials-from refuses a user with a client certificate, and a kubeconfig without a current user", () => {
  const kc = {
    "current-context": "c",
    contexts: [{ name: "c", context: { user: "admin" } }],
    users: [{ name: "admin", user: { "client-certificate-data": "x", "client-key-data": "y" } }],
  };
  assert.throws(
    () => currentUser(kc, "f", "/"),
    /authenticates with a client certificate.*--token or --managed-service-account/,
  );
  assert.throws(() => currentUser({}, "f", "/"), /no current context with a user/);
});
