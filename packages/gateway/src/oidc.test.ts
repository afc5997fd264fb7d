/**
 * OIDC ID tokens against a test issuer served over https on loopback (discovery document and
 * JWKS): accepted tokens map to user and groups with their prefixes; a key rotation mid-test is
 * picked up by refetching the JWKS; wrong audience, expiry, a missing required claim and a
 * foreign issuer are refused or not recognised. Then the same through a running gateway.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { JWKS_REFETCH_MIN_MS, OidcAuthenticator, type OidcSettings } from "./oidc.js";
import type { EchoBody } from "./testing/fake-endpoint.js";
import { startGatewayFixture } from "./testing/gateway-fixture.js";
import { TestIssuer, signingKey } from "./testing/test-issuer.js";

describe("OIDC ID tokens", () => {
  const issuer = new TestIssuer();
  // On the wall clock: tokens are checked against it.
  const clock = new ManualClock();
  clock.advance(Date.now());
  const now = (): number => Math.floor(clock.now() / 1000);

  before(() => issuer.start());
  after(() => issuer.close());

  const settings = (over: Partial<OidcSettings> = {}): OidcSettings => ({
    issuerUrl: issuer.url,
    clientId: "gateway",
    ca: issuer.ca,
    usernameClaim: "email",
    usernamePrefix: "",
    groupsClaim: "groups",
    groupsPrefix: "oidc:",
    requiredClaims: ["hd=example.com"],
    clock,
    ...over,
  });

  test("a valid token is the user with the prefixes", async () => {
    const oidc = new OidcAuthenticator(settings());
    const r = await oidc.authenticate(await issuer.token({ now: now() }));
    assert.deepEqual(r, {
      kind: "user",
      user: { username: `${issuer.url}#dana@example.com`, groups: ["oidc:admins"], extra: {} },
    });
    const plain = new OidcAuthenticator(settings({ usernamePrefix: "-" }));
    const p = await plain.authenticate(await issuer.token({ now: now() }));
    assert.equal(p.kind === "user" ? p.user.username : "", "dana@example.com");
  });

  test("a rotated key is fetched on its first token, at most every few seconds", async () => {
    const oidc = new OidcAuthenticator(settings());
    assert.equal((await oidc.authenticate(await issuer.token({ now: now() }))).kind, "user");
    const fetches = issuer.jwksFetches;
    const k2 = await signingKey("k2");
    issuer.keys = [k2];
    // Within the refetch limit an unknown key is refused without asking the issuer again...
    assert.equal((await oidc.authenticate(await issuer.token({ key: k2, now: now() }))).kind, "refused");
    assert.equal(issuer.jwksFetches, fetches);
    // ...after it, the JWKS is refetched and the new key accepted.
    clock.advance(JWKS_REFETCH_MIN_MS + 1);
    assert.equal((await oidc.authenticate(await issuer.token({ key: k2, now: now() }))).kind, "user");
    assert.equal(issuer.jwksFetches, fetches + 1);
  });

  test("wrong audience, expired, missing required claim are refused; other issuers are not recognised", async () => {
    const oidc = new OidcAuthenticator(settings());
    const refused = async (t: string, why: RegExp): Promise<void> => {
      const r = await oidc.authenticate(t);
      assert.equal(r.kind, "refused");
      assert.match(r.kind === "refused" ? r.reason : "", why);
    };
    await refused(await issuer.token({ aud: "someone-else", now: now() }), /aud/);
    await refused(await issuer.token({ expIn: -120, now: now() }), /exp/);
    await refused(await issuer.token({ claims: { hd: "evil.com" }, now: now() }), /required claim "hd"/);
    assert.equal(
      (await oidc.authenticate(await issuer.token({ iss: "https://other.example", now: now() }))).kind,
      "unrecognized",
    );
    assert.equal((await oidc.authenticate("not-a-jwt")).kind, "unrecognized");
  });

  test("with the user name from email, email_verified must be true: missing or false is refused naming it", async () => {
    const oidc = new OidcAuthenticator(settings());
    for (const [value, why] of [
      [undefined, /"email_verified" is missing/],
      [false, /"email_verified" is false, not true/],
      ["true", /"email_verified" is "true", not true/],
    ] as const) {
      const r = await oidc.authenticate(await issuer.token({ claims: { email_verified: value }, now: now() }));
      assert.equal(r.kind, "refused");
      assert.match(r.kind === "refused" ? r.reason : "", why);
    }
    // Another username claim does not need it.
    const bySub = new OidcAuthenticator(settings({ usernameClaim: "hd" }));
    const r = await bySub.authenticate(await issuer.token({ claims: { email_verified: undefined }, now: now() }));
    assert.equal(r.kind, "user");
  });

  test("through the gateway: an OIDC caller reaches the cluster as its prefixed identity; a refused token is 401", async () => {
    const g = await startGatewayFixture({
      oidc: { issuerUrl: issuer.url, ca: issuer.ca },
    });
    try {
      g.hub.grantProxy("group:oidc:admins", "mc1", "get");
      const token = await issuer.token({ key: issuer.keys[0]! });
      const r = await g.request("/mc1/api", { headers: { authorization: `Bearer ${token}` } });
      assert.equal(r.status, 200, r.body);
      const e = JSON.parse(r.body) as EchoBody;
      assert.equal(e.headers["impersonate-user"], `cluster:hub:${issuer.url}#dana@example.com`);
      assert.equal(g.audit.at(-1)?.authentication, "oidc");
      const bad = await g.request("/mc1/api", {
        headers: { authorization: `Bearer ${await issuer.token({ aud: "other" })}` },
      });
      assert.equal(bad.status, 401);
      assert.match(bad.body, /OIDC token refused/);
      const unverified = await g.request("/mc1/api", {
        headers: { authorization: `Bearer ${await issuer.token({ claims: { email_verified: false } })}` },
      });
      assert.equal(unverified.status, 401);
      assert.match(unverified.body, /email_verified/);
    } finally {
      await g.close();
    }
  });
});
