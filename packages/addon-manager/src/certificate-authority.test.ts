import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { createCertificateAuthority } from "@cluster-proxy/pki";
import {
  fingerprintOf,
  issueLeaf,
  leafRenewal,
  type LeafRequest,
  type SecretObject,
  type SigningCa,
} from "./certificate-authority.js";

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
    const t0 = Date.now();
    const policy = { validityMs: 10 * DAY, refreshAfterMs: 8 * DAY, now: () => t0 };
    const issued = await issueLeaf(request, serving, policy);
    const secret: SecretObject = { metadata: { name: "s", annotations: issued.annotations }, data: issued.data };
    const fresh = leafRenewal(secret, request, serving, policy);
    assert.equal(fresh.reason, undefined);
    assert.ok(Math.abs(fresh.recheckInMs - 8 * DAY) < 1000, String(fresh.recheckInMs));
    // Due once it is refreshAfter old (injected clock), never later than 80% of its life.
    assert.equal(
      leafRenewal(secret, request, serving, { ...policy, now: () => t0 + 8 * DAY + 1 }).reason,
      "due for rotation",
    );
    assert.equal(
      leafRenewal(secret, request, serving, { ...policy, refreshAfterMs: 100 * DAY, now: () => t0 + 8 * DAY + 1 })
        .reason,
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
