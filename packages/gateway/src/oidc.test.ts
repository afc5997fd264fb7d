/**
 * OIDC ID tokens against a test issuer served over https on loopback (discovery document and
 * JWKS): accepted tokens map to user and groups with their prefixes; a key rotation mid-test is
 * picked up by refetching the JWKS; wrong audience, expiry, a missing required claim and a
 * foreign issuer are refused or not recognised.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as https from "node:https";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { SignJWT, exportJWK, generateKeyPair, type JWK, type CryptoKey } from "jose";
import { createCertificateAuthority, issueCertificate } from "@cluster-proxy/pki";
import { JWKS_REFETCH_MIN_MS, OidcAuthenticator, type OidcSettings } from "./oidc.js";

interface SigningKey {
  kid: string;
  privateKey: CryptoKey;
  jwk: JWK;
}

async function signingKey(kid: string): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair("ES256");
  return { kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: "ES256", use: "sig" } };
}

describe("OIDC ID tokens", () => {
  let server: https.Server;
  let issuer: string;
  let ca: Buffer;
  let keys: SigningKey[] = [];
  let jwksFetches = 0;
  let clock = Date.now();

  before(async () => {
    const authority = await createCertificateAuthority({ commonName: "oidc-ca", validityDays: 1 });
    const cert = await issueCertificate(authority, {
      commonName: "issuer",
      ipAddresses: ["127.0.0.1"],
      usage: "server",
      validityDays: 1,
    });
    ca = Buffer.from(authority.certPem);
    server = https.createServer({ cert: cert.certPem, key: cert.keyPem }, (req, res) => {
      if (req.url === "/.well-known/openid-configuration") {
        res.end(JSON.stringify({ issuer, jwks_uri: `${issuer}/keys` }));
      } else if (req.url === "/keys") {
        jwksFetches++;
        res.end(JSON.stringify({ keys: keys.map((k) => k.jwk) }));
      } else {
        res.statusCode = 404;
        res.end();
      }
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    issuer = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
    keys = [await signingKey("k1")];
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  const settings = (over: Partial<OidcSettings> = {}): OidcSettings => ({
    issuerUrl: issuer,
    clientId: "gateway",
    ca,
    usernameClaim: "email",
    usernamePrefix: "",
    groupsClaim: "groups",
    groupsPrefix: "oidc:",
    requiredClaims: ["hd=example.com"],
    now: () => clock,
    ...over,
  });

  const token = (
    key: SigningKey,
    claims: Record<string, unknown> = {},
    opts: { aud?: string; expIn?: number; iss?: string } = {},
  ): Promise<string> => {
    const now = Math.floor(clock / 1000);
    return new SignJWT({ email: "dana@example.com", groups: ["admins"], hd: "example.com", ...claims })
      .setProtectedHeader({ alg: "ES256", kid: key.kid })
      .setIssuer(opts.iss ?? issuer)
      .setAudience(opts.aud ?? "gateway")
      .setSubject("dana")
      .setIssuedAt(now)
      .setExpirationTime(now + (opts.expIn ?? 300))
      .sign(key.privateKey);
  };

  test("a valid token is the user with the prefixes", async () => {
    const oidc = new OidcAuthenticator(settings());
    const r = await oidc.authenticate(await token(keys[0]!));
    assert.deepEqual(r, {
      kind: "user",
      user: { username: `${issuer}#dana@example.com`, groups: ["oidc:admins"], extra: {} },
    });
    const plain = new OidcAuthenticator(settings({ usernamePrefix: "-" }));
    const p = await plain.authenticate(await token(keys[0]!));
    assert.equal(p.kind === "user" ? p.user.username : "", "dana@example.com");
  });

  test("a rotated key is fetched on its first token, at most every few seconds", async () => {
    const oidc = new OidcAuthenticator(settings());
    assert.equal((await oidc.authenticate(await token(keys[0]!))).kind, "user");
    const fetches = jwksFetches;
    const k2 = await signingKey("k2");
    keys = [k2];
    // Within the refetch limit an unknown key is refused without asking the issuer again...
    const early = await oidc.authenticate(await token(k2));
    assert.equal(early.kind, "refused");
    assert.equal(jwksFetches, fetches);
    // ...after it, the JWKS is refetched and the new key accepted.
    clock += JWKS_REFETCH_MIN_MS + 1;
    assert.equal((await oidc.authenticate(await token(k2))).kind, "user");
    assert.equal(jwksFetches, fetches + 1);
  });

  test("wrong audience, expired, missing required claim are refused; other issuers are not recognised", async () => {
    const oidc = new OidcAuthenticator(settings());
    const k = keys[0]!;
    const refused = async (t: string, why: RegExp): Promise<void> => {
      const r = await oidc.authenticate(t);
      assert.equal(r.kind, "refused");
      assert.match(r.kind === "refused" ? r.reason : "", why);
    };
    await refused(await token(k, {}, { aud: "someone-else" }), /aud/);
    await refused(await token(k, {}, { expIn: -120 }), /exp/);
    await refused(await token(k, { hd: "evil.com" }), /required claim "hd"/);
    assert.equal((await oidc.authenticate(await token(k, {}, { iss: "https://other.example" }))).kind, "unrecognized");
    assert.equal((await oidc.authenticate("not-a-jwt")).kind, "unrecognized");
  });
});
