import assert from "node:assert/strict";
import { test } from "node:test";
import { createCertificateAuthority } from "@cluster-proxy/pki";
import { fromAggregatedUrl } from "./aggregated-api.js";
import { impersonationOf } from "./authorization.js";
import { frontProxyIdentity, parseRequestHeaderSettings } from "./front-proxy.js";

test("requestheader settings: absent without a CA; a malformed key is named", async () => {
  assert.equal(parseRequestHeaderSettings({}), undefined);
  assert.equal(parseRequestHeaderSettings({ "requestheader-client-ca-file": " " }), undefined);
  const ca = (await createCertificateAuthority({ commonName: "fp" })).certPem;
  assert.throws(
    () => parseRequestHeaderSettings({ "requestheader-client-ca-file": ca, "requestheader-allowed-names": "[1]" }),
    /requestheader-allowed-names/,
  );
  assert.throws(
    () => parseRequestHeaderSettings({ "requestheader-client-ca-file": ca }),
    /requestheader-username-headers is empty/,
  );
  assert.throws(
    () =>
      parseRequestHeaderSettings({ "requestheader-client-ca-file": "junk", "requestheader-username-headers": "[]" }),
    /no certificate/,
  );
  const s = parseRequestHeaderSettings({
    "requestheader-client-ca-file": ca + ca,
    "requestheader-username-headers": '["X-Remote-User"]',
    "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
  })!;
  assert.equal(s.cas.length, 2);
  assert.deepEqual(s.allowedNames, []);
  assert.deepEqual(
    frontProxyIdentity(s, ["X-Remote-User", "", "X-Remote-Extra-", "x", "X-Remote-Extra-%zz", "y"]),
    undefined,
  );
  // Each field is one value, commas and all (Node's `headers` would join repeated fields with ", ").
  assert.deepEqual(
    frontProxyIdentity(s, ["X-Remote-User", "u", "X-Remote-Extra-A%2Fb", "1, 2", "x-remote-extra-a%2fb", "3"]),
    { username: "u", groups: [], extra: { "a/b": ["1, 2", "3"] } },
  );
});

test("aggregated URLs map to the gateway's own targets; nothing else under the group does", () => {
  const root = "/apis/gateway.proxy.open-cluster-management.io/v1alpha1/clusters/";
  assert.equal(fromAggregatedUrl("/mc1/api"), undefined);
  assert.equal(fromAggregatedUrl(`${root}mc1/proxy/api/v1?x=1`), "/mc1/api/v1?x=1");
  assert.equal(fromAggregatedUrl(`${root}mc1/proxy`), "/mc1/");
  assert.equal(fromAggregatedUrl(`${root}mc1/proxy?watch=1`), "/mc1/?watch=1");
  for (const bad of [`${root}mc1`, `${root}mc1/proxyz`, `${root}mc1/status`, `${root}/proxy/api`])
    assert.equal(typeof fromAggregatedUrl(bad), "object", bad);
});

test("extra keys named like Object.prototype's are the user's extras, from the front proxy and from Impersonate-Extra-*", async () => {
  const ca = (await createCertificateAuthority({ commonName: "fp" })).certPem;
  const s = parseRequestHeaderSettings({
    "requestheader-client-ca-file": ca,
    "requestheader-username-headers": '["X-Remote-User"]',
    "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
  })!;
  for (const key of ["constructor", "__proto__", "%5F%5Fproto%5F%5F", "tostring"]) {
    const decoded = decodeURIComponent(key).toLowerCase();
    const id = frontProxyIdentity(s, [
      "X-Remote-User",
      "u",
      `X-Remote-Extra-${key}`,
      "a",
      `x-remote-extra-${key}`,
      "b",
    ]);
    assert.deepEqual(Object.entries(id!.extra), [[decoded, ["a", "b"]]], key);
    const asked = impersonationOf({ "impersonate-user": "v", [`impersonate-extra-${key}`]: "c, d" });
    assert.deepEqual(Object.entries(asked!.extra), [[decodeURIComponent(key), ["c", "d"]]], key);
  }
});
