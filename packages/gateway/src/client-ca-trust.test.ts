/**
 * A client certificate is a credential only when --client-ca-file names its CA. The gateway asks
 * every client for a certificate (the hub's front proxy needs that), and without --client-ca-file
 * Node would verify one against its default roots: a certificate of any CA Node trusts by default
 * (public roots, NODE_EXTRA_CA_CERTS, the system's) must not log anyone in, at the gateway's
 * requests or at its fleet view. Found by an attack review of the aggregated path.
 */
import assert from "node:assert/strict";
import * as tls from "node:tls";
import { after, before, test } from "node:test";
import { createCertificateAuthority, issueCertificate } from "@cluster-proxy/pki";
import { startGatewayFixture, type GatewayFixture } from "./testing/gateway-fixture.js";

// Node 22.19+/24.5+ (what the image ships has them); this project's @types/node predates them.
declare module "node:tls" {
  function getCACertificates(type?: "default" | "system" | "bundled" | "extra"): string[];
  function setDefaultCACertificates(certs: readonly (string | Buffer)[]): void;
}

let f: GatewayFixture;
let mallory: { cert: Buffer; key: Buffer };
const defaults = tls.getCACertificates("default");

before(async () => {
  // A CA Node trusts by default, as a public root or NODE_EXTRA_CA_CERTS would be.
  const ca = await createCertificateAuthority({ commonName: "a-default-root" });
  tls.setDefaultCACertificates([...defaults, ca.certPem]);
  const c = await issueCertificate(ca, { commonName: "mallory", organization: "devs", usage: "client" });
  mallory = { cert: Buffer.from(c.certPem), key: Buffer.from(c.keyPem) };
  f = await startGatewayFixture({ options: { clientCaFile: "" } });
  f.hub.grantProxy("mallory", "mc1", "get");
});
after(async () => {
  tls.setDefaultCACertificates(defaults);
  await f.close();
});

test("without --client-ca-file, a certificate of a CA Node trusts by default is no credential", async () => {
  const r = await f.request("/mc1/api/v1/namespaces", mallory);
  assert.equal(r.status, 401, r.body);
  assert.match(r.body, /no credentials/);
  assert.equal(f.audit.at(-1)?.user, undefined);
  const fleet = await f.request("/-/fleet/api/clusters", mallory);
  assert.equal(fleet.status, 401, fleet.body);
});
