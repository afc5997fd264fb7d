import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { describe, it, type TestContext } from "node:test";
import {
  defaultedSpec,
  type Condition,
  type ManagedProxyConfiguration,
  type PartialManagedProxyConfigurationSpec,
} from "@cluster-proxy/api";
import { createCertificateAuthority } from "@cluster-proxy/pki";
import { b64, unb64, type SecretObject } from "./certificate-authority.js";
import { ConfigurationReconciler, type ObjectCache } from "./configuration-reconciler.js";
import { EventRecorder, TerminalError, type KubeApi, type KubeObject, type ResourceRef } from "@cluster-proxy/kube";
import { FakeApiServer, type FakeResource } from "@cluster-proxy/kube/testing";
import { Resources } from "./resources.js";
import { silentLogger } from "@cluster-proxy/kit";
import { ManualClock } from "@cluster-proxy/kit/testing";

const DAY = 86_400_000;
const SIGNER_NS = "cp-manager";
const NS = "cp-servers";
const SERVER_AUTH = "1.3.6.1.5.5.7.3.1";
const CLIENT_AUTH = "1.3.6.1.5.5.7.3.2";

/** Every resource the reconciler reads or writes, with the status subresources of the real ones. */
const SERVED: FakeResource[] = Object.values(Resources).map((r) =>
  r === Resources.managedProxyConfiguration || r === Resources.apiService ? { ...r, subresources: ["status"] } : r,
);
const byKind = new Map<string, ResourceRef>(Object.values(Resources).map((r) => [r.kind, r]));

/**
 * The faithful fake API server (closed after the test), and a view of its objects keyed
 * `Kind/namespace/name`; `seed` stores an object as it is (a configuration the manager watches).
 */
async function fakeApi(t: TestContext): Promise<{
  api: KubeApi;
  seed: <T extends Pick<KubeObject, "metadata">>(ref: ResourceRef, obj: T) => T;
  objects: {
    get: (key: string) => KubeObject | undefined;
    set: (key: string, obj: KubeObject) => void;
    delete: (key: string) => boolean;
    values: () => KubeObject[];
    keys: () => string[];
  };
}> {
  const server = await FakeApiServer.start(SERVED);
  t.after(() => server.close());
  const parse = (key: string): { ref: ResourceRef; namespace: string | undefined; name: string } => {
    const [kind = "", namespace = "", name = ""] = key.split("/");
    const ref = byKind.get(kind);
    assert.ok(ref, `a resource of kind ${kind}`);
    return { ref, namespace: namespace || undefined, name };
  };
  const values = (): KubeObject[] => [...byKind.values()].flatMap((ref) => server.objects(ref));
  const objects = {
    get: (key: string) => {
      const { ref, namespace, name } = parse(key);
      return server.object(ref, name, namespace);
    },
    set: (key: string, obj: KubeObject) => void server.put(parse(key).ref, obj),
    delete: (key: string) => {
      const { ref, namespace, name } = parse(key);
      return server.remove(ref, name, namespace);
    },
    values,
    keys: () => values().map((o) => `${o.kind}/${o.metadata.namespace ?? ""}/${o.metadata.name}`),
  };
  return { api: server.api(), seed: (ref, obj) => server.put(ref, obj), objects };
}

function configuration(spec: PartialManagedProxyConfigurationSpec = {}): ManagedProxyConfiguration {
  return {
    apiVersion: "proxy.open-cluster-management.io/v1alpha1",
    kind: "ManagedProxyConfiguration",
    metadata: { name: "cluster-proxy", uid: "u-1", generation: 1 },
    spec: defaultedSpec({
      proxyServer: { image: "s", namespace: NS },
      proxyAgent: { image: "a" },
      authentication: { signer: { type: "SelfSigned", selfSigned: { additionalSANs: ["gw.example.com"] } } },
      ...spec,
    }),
  };
}

/** A reconciler of `mpc` on a clock that stands at the real time (certificates are dated by the real one). */
function reconciler(api: KubeApi, mpc: ManagedProxyConfiguration): ConfigurationReconciler {
  const cache: ObjectCache = { configuration: () => mpc, owned: () => [] };
  const clock = new ManualClock();
  clock.advance(Date.now());
  return new ConfigurationReconciler(
    api,
    cache,
    new EventRecorder(api, silentLogger),
    {
      signerNamespace: SIGNER_NS,
      signerName: "cluster-proxy-signer",
      caValidityMs: 3650 * DAY,
      leaf: { validityMs: 180 * DAY, refreshAfterMs: 144 * DAY },
      resyncMs: 600_000,
    },
    silentLogger,
    clock,
  );
}

type Objects = Awaited<ReturnType<typeof fakeApi>>["objects"];
const secretIn = (objects: Objects, ns: string, name: string): SecretObject => {
  const s = objects.get(`Secret/${ns}/${name}`);
  assert.ok(s, `Secret ${ns}/${name}`);
  return s;
};
const certOf = (s: SecretObject, k = "tls.crt"): X509Certificate => new X509Certificate(unb64(s.data?.[k]));
const caOf = (objects: Objects, name: string): X509Certificate => certOf(secretIn(objects, SIGNER_NS, name), "ca.crt");

describe("the gateway's certificates (ConfigurationReconciler)", () => {
  it("a fourth CA signs the identity (client, agent CA bundle beside it); the serving CA signs the serving certificate for the gateway's Service names", async (t) => {
    const { api, objects, seed } = await fakeApi(t);
    const mpc = seed(Resources.managedProxyConfiguration, configuration());
    await reconciler(api, mpc).reconcile("cluster-proxy");

    const gatewayCa = secretIn(objects, SIGNER_NS, "cluster-proxy-signer-gateway");
    assert.equal(gatewayCa.metadata.labels?.["proxy.open-cluster-management.io/signer"], "gateway");
    assert.equal(gatewayCa.metadata.ownerReferences, undefined, "the CA outlives the configuration");

    const serving = secretIn(objects, NS, "cluster-proxy-gateway-serving");
    const servingCert = certOf(serving);
    assert.ok(servingCert.checkIssued(caOf(objects, "cluster-proxy-signer")));
    assert.deepEqual(servingCert.keyUsage, [SERVER_AUTH]);
    assert.deepEqual(servingCert.subjectAltName?.split(", ").sort(), [
      "DNS:cluster-proxy-addon-user",
      `DNS:cluster-proxy-addon-user.${NS}`,
      `DNS:cluster-proxy-addon-user.${NS}.svc`,
      `DNS:cluster-proxy-addon-user.${NS}.svc.cluster.local`,
      "DNS:gw.example.com",
    ]);
    assert.equal(unb64(serving.data?.["ca.crt"]).trim(), caOf(objects, "cluster-proxy-signer").toString().trim());
    assert.deepEqual(Object.keys(serving.data ?? {}).sort(), ["ca.crt", "tls.crt", "tls.key"]);

    const identity = secretIn(objects, NS, "cluster-proxy-gateway-identity");
    const idCert = certOf(identity);
    assert.ok(idCert.checkIssued(caOf(objects, "cluster-proxy-signer-gateway")));
    assert.ok(!idCert.checkIssued(caOf(objects, "cluster-proxy-signer-client")), "not a hub client certificate");
    assert.deepEqual(idCert.keyUsage, [CLIENT_AUTH]);
    assert.match(idCert.subject, /CN=open-cluster-management:cluster-proxy:gateway/);
    assert.equal(idCert.subjectAltName, undefined);
    assert.equal(
      unb64(identity.data?.["ca.crt"]).trim(),
      caOf(objects, "cluster-proxy-signer-gateway").toString().trim(),
    );
    assert.equal(
      unb64(identity.data?.["agent-ca.crt"]).trim(),
      caOf(objects, "cluster-proxy-signer-agent").toString().trim(),
    );
    for (const s of [serving, identity]) {
      assert.equal(s.type, "kubernetes.io/tls");
      assert.equal(s.metadata.ownerReferences?.[0]?.name, "cluster-proxy");
      assert.equal(s.metadata.labels?.["proxy.open-cluster-management.io/configuration"], "cluster-proxy");
    }
    // The agent CA bundle is published (public) beside the serving one, for `cluster-proxy health`.
    const published = secretIn(objects, NS, "proxy-server-ca");
    assert.equal(
      unb64(published.data?.["agent-ca.crt"]).trim(),
      caOf(objects, "cluster-proxy-signer-agent").toString().trim(),
    );

    const written = objects.get("ManagedProxyConfiguration//cluster-proxy") as ManagedProxyConfiguration | undefined;
    for (const type of ["GatewayServingSecretSigned", "GatewayIdentitySecretSigned"]) {
      const c: Condition | undefined = written?.status?.conditions?.find((x) => x.type === type);
      assert.equal(c?.status, "True", type);
      assert.match(c?.message ?? "", /^Expiry:\d{4}-/);
    }
    const events = [...objects.values()].filter((o) => o.kind === "Event" && o.metadata.namespace === "default");
    const messages = events.map((e) => (e as KubeObject & { message?: string }).message ?? "");
    for (const name of ["cluster-proxy-gateway-serving", "cluster-proxy-gateway-identity"])
      assert.ok(
        messages.some((m) => m.startsWith(`Issued ${NS}/${name} (missing)`)),
        messages.join("\n"),
      );

    // Nothing changes on the next pass; a new gateway CA re-issues the identity at once.
    const before = identity.data?.["tls.crt"];
    await reconciler(api, mpc).reconcile("cluster-proxy");
    assert.equal(secretIn(objects, NS, "cluster-proxy-gateway-identity").data?.["tls.crt"], before);
    assert.equal(secretIn(objects, NS, "cluster-proxy-gateway-serving").data?.["tls.crt"], serving.data?.["tls.crt"]);
    objects.delete(`Secret/${SIGNER_NS}/cluster-proxy-signer-gateway`);
    await reconciler(api, mpc).reconcile("cluster-proxy");
    const reissued = secretIn(objects, NS, "cluster-proxy-gateway-identity");
    assert.notEqual(reissued.data?.["tls.crt"], before);
    assert.ok(certOf(reissued).checkIssued(caOf(objects, "cluster-proxy-signer-gateway")));
  });

  it("with a Provided serving CA the gateway is served by it, and its identity stays on the manager's gateway CA", async (t) => {
    const { api, objects, seed } = await fakeApi(t);
    const mine = await createCertificateAuthority({ commonName: "my-org-ca" });
    await api.create(
      { apiVersion: "v1", kind: "Secret", plural: "secrets", namespaced: true },
      {
        metadata: { name: "my-ca", namespace: SIGNER_NS },
        data: { "tls.crt": b64(mine.certPem), "tls.key": b64(mine.keyPem) },
      },
    );
    const mpc = seed(
      Resources.managedProxyConfiguration,
      configuration({
        authentication: defaultedSpec({
          authentication: { signer: { type: "Provided", provided: { secretName: "my-ca" } } },
        }).authentication,
      }),
    );
    await reconciler(api, mpc).reconcile("cluster-proxy");
    const myCa = new X509Certificate(mine.certPem);
    assert.ok(certOf(secretIn(objects, NS, "cluster-proxy-gateway-serving")).checkIssued(myCa));
    const identity = certOf(secretIn(objects, NS, "cluster-proxy-gateway-identity"));
    assert.ok(!identity.checkIssued(myCa));
    assert.ok(identity.checkIssued(caOf(objects, "cluster-proxy-signer-gateway")));
  });
});

describe("the gateway's APIService (ConfigurationReconciler)", () => {
  const apiServiceKey = "APIService//v1alpha1.gateway.proxy.open-cluster-management.io";
  const apiService = (namespace: string): KubeObject & { spec: Record<string, unknown> } => ({
    apiVersion: "apiregistration.k8s.io/v1",
    kind: "APIService",
    metadata: { name: "v1alpha1.gateway.proxy.open-cluster-management.io" },
    spec: {
      group: "gateway.proxy.open-cluster-management.io",
      version: "v1alpha1",
      service: { namespace, name: "cluster-proxy-addon-user", port: 9092 },
    },
  });

  it("the chart's APIService gets the serving CA bundle; one of another namespace or none is left alone", async (t) => {
    const { api, objects, seed } = await fakeApi(t);
    seed(Resources.managedProxyConfiguration, configuration());
    await reconciler(api, configuration()).reconcile("cluster-proxy");
    assert.equal(objects.get(apiServiceKey), undefined, "the manager never creates it");

    objects.set(apiServiceKey, apiService("elsewhere"));
    await reconciler(api, configuration()).reconcile("cluster-proxy");
    assert.equal((objects.get(apiServiceKey) as ReturnType<typeof apiService>).spec.caBundle, undefined);

    objects.set(apiServiceKey, apiService(NS));
    await reconciler(api, configuration()).reconcile("cluster-proxy");
    const published = objects.get(apiServiceKey) as ReturnType<typeof apiService>;
    assert.equal(published.spec.caBundle, secretIn(objects, NS, "cluster-proxy-gateway-serving").data?.["ca.crt"]);
    assert.equal(published.spec.group, "gateway.proxy.open-cluster-management.io", "the rest is the chart's");
  });
});

describe("a configuration validation refuses (ConfigurationReconciler)", () => {
  it("is recorded in ProxyServerDeployed, deploys nothing, and is a terminal error (not retried)", async (t) => {
    const { api, objects, seed } = await fakeApi(t);
    const mpc = seed(
      Resources.managedProxyConfiguration,
      configuration({
        authentication: { signer: { type: "CertManager" } },
      }),
    );
    await assert.rejects(
      reconciler(api, mpc).reconcile("cluster-proxy"),
      (err) => err instanceof TerminalError && /refused: spec\.authentication\.signer\.type/.test(err.message),
    );
    const stored = [...objects.values()].find((o) => o.kind === "ManagedProxyConfiguration" || o.status);
    const conditions = (stored?.status as { conditions?: Condition[] } | undefined)?.conditions ?? [];
    const deployed = conditions.find((c) => c.type === "ProxyServerDeployed");
    assert.equal(deployed?.status, "False");
    assert.equal(deployed?.reason, "InvalidConfiguration");
    assert.ok(![...objects.keys()].some((k) => k.startsWith("Deployment/")));
  });
});
