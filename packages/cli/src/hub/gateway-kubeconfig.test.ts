import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { loadYaml } from "@kubernetes/client-node";
import { HubResources } from "@cluster-proxy/api";
import { KubeApi, KubeResources } from "@cluster-proxy/kube";
import { FakeApiServer } from "@cluster-proxy/kube/testing";
import { createCertificateAuthority, issueCertificate } from "@cluster-proxy/pki";
import { gatewayServer, gatewayTlsServerName, parseGatewayUrl } from "./gateway-kubeconfig.js";
import { runCaptured } from "../testing/capture.js";

const NS = "open-cluster-management-addon";
const SVC = `cluster-proxy-addon-user.${NS}.svc`;

interface Kubeconfig {
  clusters: { name: string; cluster: Record<string, string> }[];
  users: { name: string; user: Record<string, unknown> }[];
  contexts: { name: string; context: { cluster: string; user: string } }[];
  "current-context": string;
}

test("gateway URLs: https only, a path kept as a prefix, the cluster as the first path segment", () => {
  assert.equal(gatewayServer(parseGatewayUrl("https://gw.example.com/"), "mc1"), "https://gw.example.com/mc1");
  assert.equal(gatewayServer(parseGatewayUrl("https://gw.example.com/k8s/"), "mc1"), "https://gw.example.com/k8s/mc1");
  assert.equal(gatewayServer(parseGatewayUrl("https://[fd00::1]:9092"), "mc1"), "https://[fd00::1]:9092/mc1");
  for (const bad of ["http://gw:9092", "gw:9092", "https://u:p@gw", "https://gw/?x=1", "not a url"])
    assert.throws(() => parseGatewayUrl(bad), /--gateway/, bad);
});

describe("cluster-proxy kubeconfig --gateway against a hub", () => {
  let hub: FakeApiServer;
  let dir: string;
  let hubUrl = "";
  let servingCa = "";
  /** What the hub was asked: method, path and credentials of each request. */
  const requests = (): string[] => hub.requests.map((r) => `${r.method} ${r.path} ${r.headers.authorization ?? ""}`);

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "cp-gw-kubeconfig-"));
    const ca = await createCertificateAuthority({ commonName: "serving-ca" });
    servingCa = ca.certPem;
    const leaf = await issueCertificate(ca, {
      commonName: SVC,
      dnsNames: ["cluster-proxy-addon-user", `cluster-proxy-addon-user.${NS}`, SVC, "gw.example.com"],
      ipAddresses: [],
      usage: "server",
      validityDays: 1,
    });
    const b64 = (s: string): string => Buffer.from(s).toString("base64");
    hub = await FakeApiServer.start([HubResources.managedProxyConfiguration, HubResources.managedCluster]);
    hub.put(HubResources.managedProxyConfiguration, {
      metadata: { name: "cluster-proxy" },
      spec: { proxyServer: { image: "s", namespace: NS }, proxyAgent: { image: "a" } },
    });
    hub.put(HubResources.managedCluster, { metadata: { name: "mc2" } });
    hub.put(HubResources.managedCluster, { metadata: { name: "mc1" } });
    hub.put(KubeResources.secret, {
      metadata: { name: "cluster-proxy-gateway-serving", namespace: NS },
      data: { "ca.crt": b64(ca.certPem), "tls.crt": b64(leaf.certPem) },
    });
    // The hub lists the ManagedClusters in the order they were made, not by name (the command sorts them).
    hub.intercept = (req, res, serve) => {
      if (req.method !== "GET" || req.path !== KubeApi.collectionPath(HubResources.managedCluster)) return serve();
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          kind: "ManagedClusterList",
          apiVersion: HubResources.managedCluster.apiVersion,
          metadata: { resourceVersion: hub.resourceVersion() },
          items: hub.objects(HubResources.managedCluster),
        }),
      );
    };
    hubUrl = hub.url;
  });
  after(async () => {
    await hub.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const hubKubeconfig = (name: string, user: Record<string, unknown>): string => {
    const file = join(dir, name);
    writeFileSync(
      file,
      JSON.stringify({
        apiVersion: "v1",
        kind: "Config",
        // Plain HTTP on loopback: the client needs skip-verify to accept it at all.
        clusters: [{ name: "hub", cluster: { server: hubUrl, "insecure-skip-tls-verify": true } }],
        users: [{ name: "me", user }],
        contexts: [{ name: "hub", context: { cluster: "hub", user: "me" } }],
        "current-context": "hub",
      }),
    );
    return file;
  };
  const read = (file: string): Kubeconfig => loadYaml(readFileSync(file, "utf8"));

  test("by default the aggregated path: the hub kubeconfig's server and verification at each cluster's path, its user whatever kind, mode 0600", async () => {
    const ca = await createCertificateAuthority({ commonName: "hub-client-ca" });
    const me = await issueCertificate(ca, { commonName: "me", usage: "client", validityDays: 1 });
    writeFileSync(join(dir, "agg.crt"), me.certPem);
    writeFileSync(join(dir, "agg.key"), me.keyPem);
    const kc = hubKubeconfig("agg.kubeconfig", { "client-certificate": "agg.crt", "client-key": "agg.key" });
    const out = join(dir, "agg-out.kubeconfig");
    const r = await runCaptured(["kubeconfig", "--gateway", "--output", out], { KUBECONFIG: kc });
    assert.equal(r.code, 0, r.err);
    assert.equal(statSync(out).mode & 0o777, 0o600);
    assert.match(r.err, /contexts mc1, mc2 through the hub apiserver/);
    assert.doesNotMatch(r.err, /--client-ca-file/, "the hub authenticates the certificate: no caveat");
    const doc = read(out);
    assert.deepEqual(
      doc.clusters.map((c) => [c.name, c.cluster.server, c.cluster["insecure-skip-tls-verify"]]),
      ["mc1", "mc2"].map((m) => [
        m,
        `${hubUrl}/apis/gateway.proxy.open-cluster-management.io/v1alpha1/clusters/${m}/proxy`,
        true,
      ]),
    );
    assert.deepEqual(doc.users, [
      { name: "hub-user", user: { "client-certificate": join(dir, "agg.crt"), "client-key": join(dir, "agg.key") } },
    ]);
    assert.equal(doc["current-context"], "mc1");
    const asked = hub.requests.length;
    const explicit = await runCaptured(["kubeconfig", "--gateway=aggregated", "--cluster", "mc2"], { KUBECONFIG: kc });
    assert.equal(hub.requests.length, asked, "with --cluster nothing is read from the hub");
    assert.equal(explicit.code, 0, explicit.err);
    const aggregated: Kubeconfig = loadYaml(explicit.out);
    const server = aggregated.clusters[0]!.cluster.server ?? "";
    assert.match(server, /\/clusters\/mc2\/proxy$/);
  });

  test("--gateway=direct: every cluster, a context each, the in-cluster gateway URL verified with the serving CA, the hub kubeconfig's token user, mode 0600", async () => {
    const kc = hubKubeconfig("token.kubeconfig", { token: "hub-token" });
    const out = join(dir, "all.kubeconfig");
    const r = await runCaptured(["kubeconfig", "--gateway=direct", "--output", out], { KUBECONFIG: kc });
    assert.equal(r.code, 0, r.err);
    assert.equal(statSync(out).mode & 0o777, 0o600);
    assert.match(r.err, /wrote .*all\.kubeconfig \(contexts mc1, mc2 through https:\/\/cluster-proxy-addon-user/);
    const doc = read(out);
    assert.deepEqual(
      doc.clusters.map((c) => [c.name, c.cluster.server]),
      [
        ["mc1", `https://${SVC}:9092/mc1`],
        ["mc2", `https://${SVC}:9092/mc2`],
      ],
    );
    for (const c of doc.clusters) {
      assert.equal(Buffer.from(c.cluster["certificate-authority-data"]!, "base64").toString(), servingCa);
      assert.equal(c.cluster["tls-server-name"], undefined, "the Service name is in the certificate");
      assert.equal(c.cluster["insecure-skip-tls-verify"], undefined);
    }
    assert.deepEqual(doc.users, [{ name: "hub-user", user: { token: "hub-token" } }]);
    assert.deepEqual(
      doc.contexts.map((c) => [c.name, c.context.cluster, c.context.user]),
      [
        ["mc1", "mc1", "hub-user"],
        ["mc2", "mc2", "hub-user"],
      ],
    );
    assert.equal(doc["current-context"], "mc1");
  });

  test("--gateway=<port-forward address> --cluster: tls-server-name names the Service; a SAN host needs none", async () => {
    const kc = hubKubeconfig("exec.kubeconfig", {
      exec: { apiVersion: "client.authentication.k8s.io/v1", command: "kubectl-oidc_login", args: ["get-token"] },
    });
    const hubConfig = hubKubeconfig("hub.kubeconfig", { token: "hub-token" });
    const r = await runCaptured(
      ["kubeconfig", "--gateway=https://127.0.0.1:19092", "--cluster", "mc2", "--credentials-from", kc],
      { KUBECONFIG: hubConfig },
    );
    assert.equal(r.code, 0, r.err);
    const doc: Kubeconfig = loadYaml(r.out);
    assert.deepEqual(doc.clusters.length, 1);
    assert.equal(doc.clusters[0]!.cluster.server, "https://127.0.0.1:19092/mc2");
    assert.equal(doc.clusters[0]!.cluster["tls-server-name"], SVC);
    assert.equal(doc["current-context"], "mc2");
    assert.deepEqual(doc.users[0]!.user.exec, {
      apiVersion: "client.authentication.k8s.io/v1",
      command: "kubectl-oidc_login",
      args: ["get-token"],
    });
    const asked = hub.requests.length;
    const sanHost = await runCaptured(["kubeconfig", "--gateway", "https://gw.example.com:443", "--token", "t"], {
      KUBECONFIG: hubConfig,
    });
    assert.equal(sanHost.code, 0, sanHost.err);
    const named: Kubeconfig = loadYaml(sanHost.out);
    assert.equal(named.clusters[0]!.cluster["tls-server-name"], undefined);
    assert.deepEqual(named.users[0]!.user, { token: "t" }, "--token is the hub token");
    const read = requests().slice(asked);
    assert.ok(read.length > 0, "the hub was read");
    assert.ok(
      read.every((r) => r.endsWith("Bearer hub-token")),
      "the hub is read with the hub kubeconfig's credentials; --token only goes into the kubeconfig",
    );
  });

  test("--gateway=direct with a client-certificate hub user: copied (paths made absolute) with a note on what the gateway accepts", async () => {
    const ca = await createCertificateAuthority({ commonName: "hub-client-ca" });
    const me = await issueCertificate(ca, {
      commonName: "me",
      dnsNames: [],
      ipAddresses: [],
      usage: "client",
      validityDays: 1,
    });
    writeFileSync(join(dir, "me.crt"), me.certPem);
    writeFileSync(join(dir, "me.key"), me.keyPem);
    const kc = hubKubeconfig("cert.kubeconfig", { "client-certificate": "me.crt", "client-key": "me.key" });
    const out = join(dir, "cert-user.kubeconfig");
    const r = await runCaptured(["kubeconfig", "--gateway=direct", "-o", out, "--cluster", "mc2"], { KUBECONFIG: kc });
    assert.equal(r.code, 0, r.err);
    assert.match(r.err, /client certificate: the gateway accepts it only when run with --client-ca-file/);
    assert.deepEqual(read(out).users[0]!.user, {
      "client-certificate": join(dir, "me.crt"),
      "client-key": join(dir, "me.key"),
    });
  });

  test("refusals: door flags with --gateway, an unknown cluster, no --cluster without --gateway", async () => {
    const kc = hubKubeconfig("refusals.kubeconfig", { token: "x" });
    const msa = await runCaptured(["kubeconfig", "--gateway", "--managed-service-account", "m"], { KUBECONFIG: kc });
    assert.equal(msa.code, 2);
    assert.match(msa.err, /--managed-service-account belong to the CONNECT door/);
    const unknown = await runCaptured(["kubeconfig", "--gateway=direct", "--cluster", "mc9"], { KUBECONFIG: kc });
    assert.notEqual(unknown.code, 0);
    assert.match(unknown.err, /no ManagedCluster named mc9/);
    const none = await runCaptured(["kubeconfig", "--token", "t"], { KUBECONFIG: kc });
    assert.equal(none.code, 2);
    assert.match(none.err, /--cluster: required \(or --gateway/);
  });

  test("--help explains the gateway and shows an example", async () => {
    const r = await runCaptured(["kubeconfig", "--help"]);
    assert.match(r.out, /--gateway \[aggregated\|direct\|url\]/);
    assert.match(r.out, /cluster-proxy kubeconfig --gateway -o hub-clusters\.kubeconfig/);
    assert.match(r.out, /apis\/gateway\.proxy\.open-cluster-management\.io\/v1alpha1\/clusters\/<cluster>\/proxy/);
    assert.match(r.out, /tls-server-name/);
  });
});

test("tls-server-name: an IP host of the certificate needs none", async () => {
  const ca = await createCertificateAuthority({ commonName: "ca" });
  const leaf = await issueCertificate(ca, {
    commonName: "gw",
    dnsNames: [SVC],
    ipAddresses: ["10.0.0.7"],
    usage: "server",
    validityDays: 1,
  });
  assert.equal(gatewayTlsServerName(parseGatewayUrl("https://10.0.0.7:9092"), leaf.certPem, SVC), undefined);
  assert.equal(gatewayTlsServerName(parseGatewayUrl("https://10.0.0.8:9092"), leaf.certPem, SVC), SVC);
  assert.equal(gatewayTlsServerName(parseGatewayUrl("https://x.example"), "garbage", SVC), SVC);
});
