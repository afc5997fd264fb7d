import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import { createCertificateAuthority } from "@cluster-proxy/pki";
import {
  b64,
  ensureCa,
  fingerprintOf,
  issueLeaf,
  leafRenewal,
  splitPem,
  type LeafRequest,
  type SecretObject,
  type SigningCa,
} from "./certificate-authority.js";
import { KubeApiError, KubeResources, type KubeApi } from "@cluster-proxy/kube";
import { FakeApiServer, type FakeRequest } from "@cluster-proxy/kube/testing";
import { ManualClock } from "@cluster-proxy/kit/testing";

/** A clock that stands at the real time now until the test advances it (certificates are dated by the real one). */
function clockAtNow(): ManualClock {
  const clock = new ManualClock();
  clock.advance(Date.now());
  return clock;
}

async function ca(role: SigningCa["role"]): Promise<SigningCa> {
  const cert = await createCertificateAuthority({ commonName: `${role}-ca` });
  return {
    role,
    cert,
    bundlePem: cert.certPem,
    notAfter: new Date(Date.now() + 1e12),
    fingerprint: fingerprintOf(cert.certPem),
    secret: "ns/x",
    replaced: [],
  };
}

const request: LeafRequest = {
  commonName: "hub",
  dnsNames: ["hub.example"],
  ipAddresses: ["127.0.0.1"],
  usage: "server",
};
const DAY = 86_400_000;

describe("leaf certificate renewal", () => {
  it("keeps a fresh certificate and says when to look again", async () => {
    const serving = await ca("serving");
    const clock = clockAtNow();
    const policy = { validityMs: 10 * DAY, refreshAfterMs: 8 * DAY, clock };
    const issued = await issueLeaf(request, serving, policy);
    const secret: SecretObject = { metadata: { name: "s", annotations: issued.annotations }, data: issued.data };
    const fresh = leafRenewal(secret, request, serving, policy);
    assert.equal(fresh.reason, undefined);
    assert.ok(Math.abs(fresh.recheckInMs - 8 * DAY) < 1000, String(fresh.recheckInMs));
    // Due once it is refreshAfter old (injected clock), never later than 80% of its life.
    clock.advance(8 * DAY + 1);
    assert.equal(leafRenewal(secret, request, serving, policy).reason, "due for rotation");
    // 80% of the certificate's own life: its notAfter counts from when it was signed, up to a few
    // seconds after the clock's start on a busy machine (key generation), so look a minute after 80%.
    clock.advance(60_000 - 1);
    assert.equal(
      leafRenewal(secret, request, serving, { ...policy, refreshAfterMs: 100 * DAY }).reason,
      "due for rotation",
    );
  });

  it("re-issues when missing, when the names change, and when another CA signed it", async () => {
    const serving = await ca("serving");
    const other = await ca("serving");
    const policy = { validityMs: 10 * DAY, refreshAfterMs: 8 * DAY };
    const issued = await issueLeaf(request, serving, policy);
    const secret: SecretObject = { metadata: { name: "s", annotations: issued.annotations }, data: issued.data };
    assert.equal(leafRenewal(undefined, request, serving, policy).reason, "missing");
    assert.equal(
      leafRenewal(secret, { ...request, dnsNames: ["new.example"] }, serving, policy).reason,
      "names, usage or issuer changed",
    );
    assert.equal(leafRenewal(secret, request, other, policy).reason, "names, usage or issuer changed");
    const wrongKey = {
      ...secret,
      data: { ...secret.data, "tls.key": (await issueLeaf(request, serving, policy)).data["tls.key"]! },
    };
    assert.equal(leafRenewal(wrongKey, request, serving, policy).reason, "key does not match");
  });
});

/** The faithful fake API server, closed after the test; `secrets.set` stores a Secret as it is. */
async function secretStore(t: TestContext): Promise<{ api: KubeApi; secrets: { set: (obj: SecretObject) => void } }> {
  const server = await FakeApiServer.start();
  t.after(() => server.close());
  return { api: server.api(), secrets: { set: (obj) => void server.put(KubeResources.secret, obj) } };
}

describe("CA lifecycle", () => {
  it("creates a CA once, keeps it, and at 80% of its life adds a new one while trusting both", async (t) => {
    const { api } = await secretStore(t);
    const clock = clockAtNow();
    const policy = { caValidityMs: 10 * DAY, create: true, clock };
    const first = await ensureCa(api, "agent", "ns", "signer-agent", policy);
    clock.advance(DAY);
    const again = await ensureCa(api, "agent", "ns", "signer-agent", policy);
    assert.equal(again.fingerprint, first.fingerprint, "the same CA is reused");
    assert.equal(splitPem(again.bundlePem).length, 1);
    clock.advance(7.1 * DAY);
    const rotated = await ensureCa(api, "agent", "ns", "signer-agent", policy);
    assert.notEqual(rotated.fingerprint, first.fingerprint, "a new CA at 80% of the old one's life");
    const bundle = splitPem(rotated.bundlePem).map(fingerprintOf);
    assert.deepEqual(bundle, [rotated.fingerprint, first.fingerprint], "new first, old still trusted");
    // (Certificates are dated by the real clock, so 10.5 days after the start both CAs above have expired.)
    clock.advance(2.4 * DAY);
    const afterExpiry = await ensureCa(api, "agent", "ns", "signer-agent", policy);
    assert.deepEqual(
      splitPem(afterExpiry.bundlePem).map(fingerprintOf),
      [afterExpiry.fingerprint],
      "expired CAs leave the bundle",
    );
  });

  it("a Provided CA is only read: missing, not a CA, or a foreign key is an error naming the Secret", async (t) => {
    const { api, secrets } = await secretStore(t);
    await assert.rejects(
      ensureCa(api, "serving", "ns", "mine", { caValidityMs: DAY, create: false }),
      /Secret ns\/mine .*does not exist/,
    );
    const leafCa = await createCertificateAuthority({ commonName: "x" });
    const leaf = await issueLeaf(
      request,
      {
        role: "serving",
        cert: leafCa,
        bundlePem: leafCa.certPem,
        notAfter: new Date(),
        fingerprint: "",
        secret: "",
        replaced: [],
      },
      { validityMs: DAY, refreshAfterMs: DAY },
    );
    secrets.set({ metadata: { name: "mine", namespace: "ns" }, data: leaf.data });
    await assert.rejects(ensureCa(api, "serving", "ns", "mine", { caValidityMs: DAY, create: false }), /not a CA/);
    const other = await createCertificateAuthority({ commonName: "y" });
    secrets.set({
      metadata: { name: "mine", namespace: "ns" },
      data: { "tls.crt": b64(leafCa.certPem), "tls.key": b64(other.keyPem) },
    });
    await assert.rejects(
      ensureCa(api, "serving", "ns", "mine", { caValidityMs: DAY, create: false }),
      /key does not belong/,
    );
    secrets.set({
      metadata: { name: "mine", namespace: "ns" },
      data: { "tls.crt": b64(leafCa.certPem), "tls.key": b64(leafCa.keyPem) },
    });
    assert.equal(
      (await ensureCa(api, "serving", "ns", "mine", { caValidityMs: DAY, create: false })).fingerprint,
      fingerprintOf(leafCa.certPem),
    );
  });
});

describe("a CA written by two managers at once (a hand-over)", () => {
  const policy = { caValidityMs: 10 * DAY, create: true };
  const secretCreate = (r: FakeRequest): boolean => r.method === "POST" && r.path.endsWith("/namespaces/ns/secrets");
  const alreadyExists = { code: 409, reason: "AlreadyExists", message: 'secrets "signer-agent" already exists' };

  it("a lost create reads the CA the other manager wrote and uses it", async (t) => {
    const other = await FakeApiServer.start();
    t.after(() => other.close());
    const theirs = await ensureCa(other.api(), "agent", "ns", "signer-agent", policy);
    const stored = other.objects(KubeResources.secret, "ns")[0]!;
    const server = await FakeApiServer.start();
    t.after(() => server.close());
    // The other manager's create lands just before this one's, which is answered 409.
    server.onRequest = (r) => {
      if (secretCreate(r)) server.put(KubeResources.secret, stored);
    };
    server.failNext(1, alreadyExists, secretCreate);
    const mine = await ensureCa(server.api(), "agent", "ns", "signer-agent", policy);
    assert.equal(mine.fingerprint, theirs.fingerprint, "theirs is used, not overwritten");
  });

  it(
    "a writer that keeps winning is an error after three attempts, not an endless retry",
    { timeout: 20_000 },
    async (t) => {
      const server = await FakeApiServer.start();
      t.after(() => server.close());
      server.failNext(1_000, alreadyExists, secretCreate);
      await assert.rejects(
        ensureCa(server.api(), "agent", "ns", "signer-agent", policy),
        (err) => err instanceof KubeApiError && err.status === 409,
      );
      assert.equal(server.requests.filter(secretCreate).length, 3);
    },
  );
});
