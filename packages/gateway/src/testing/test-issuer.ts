/**
 * Test-only: an OIDC issuer on loopback over https (discovery document and JWKS), whose keys a
 * test can rotate, and a signer of ID tokens.
 */
import { once } from "node:events";
import * as https from "node:https";
import type { AddressInfo } from "node:net";
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey, type JWK } from "jose";
import { createCertificateAuthority, issueCertificate } from "@cluster-proxy/pki";

/** A signing key of the issuer. */
export interface SigningKey {
  kid: string;
  privateKey: CryptoKey;
  jwk: JWK;
}

/** A new ES256 key with id `kid`. */
export async function signingKey(kid: string): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair("ES256");
  return { kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: "ES256", use: "sig" } };
}

/** Options of {@link TestIssuer.token}. */
export interface TokenOptions {
  key?: SigningKey;
  claims?: Record<string, unknown>;
  aud?: string;
  expIn?: number;
  iss?: string;
  /** Seconds since the epoch (default: now). */
  now?: number;
}

/** See the module comment. */
export class TestIssuer {
  /** The keys the JWKS publishes (replace to rotate). */
  keys: SigningKey[] = [];
  jwksFetches = 0;
  url = "";
  ca = Buffer.alloc(0);
  private server: https.Server | undefined;

  async start(): Promise<void> {
    const authority = await createCertificateAuthority({ commonName: "oidc-ca", validityDays: 1 });
    const cert = await issueCertificate(authority, {
      commonName: "issuer",
      ipAddresses: ["127.0.0.1"],
      usage: "server",
      validityDays: 1,
    });
    this.ca = Buffer.from(authority.certPem);
    const server = https.createServer({ cert: cert.certPem, key: cert.keyPem }, (req, res) => {
      if (req.url === "/.well-known/openid-configuration") {
        res.end(JSON.stringify({ issuer: this.url, jwks_uri: `${this.url}/keys` }));
      } else if (req.url === "/keys") {
        this.jwksFetches++;
        res.end(JSON.stringify({ keys: this.keys.map((k) => k.jwk) }));
      } else {
        res.statusCode = 404;
        res.end();
      }
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    this.server = server;
    this.url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
    this.keys = [await signingKey("k1")];
  }

  /** An ID token for dana@example.com (groups admins, hd example.com) unless `o` says otherwise. */
  token(o: TokenOptions = {}): Promise<string> {
    const key = o.key ?? this.keys[0]!;
    const now = o.now ?? Math.floor(Date.now() / 1000);
    return new SignJWT({
      email: "dana@example.com",
      email_verified: true,
      groups: ["admins"],
      hd: "example.com",
      ...o.claims,
    })
      .setProtectedHeader({ alg: "ES256", kid: key.kid })
      .setIssuer(o.iss ?? this.url)
      .setAudience(o.aud ?? "gateway")
      .setSubject("dana")
      .setIssuedAt(now)
      .setExpirationTime(now + (o.expIn ?? 300))
      .sign(key.privateKey);
  }

  close(): void {
    this.server?.closeAllConnections();
    this.server?.close();
  }
}
