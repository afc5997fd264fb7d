import assert from "node:assert/strict";
import { test } from "node:test";
import { ProxyConnectError, proxyFromEnvironment } from "./http-proxy.js";

test("HTTPS_PROXY applies unless NO_PROXY names the host (name and subdomains, host:port, IP, CIDR, *)", () => {
  const env = (noProxy: string): NodeJS.ProcessEnv => ({ HTTPS_PROXY: "http://proxy.corp:3128", NO_PROXY: noProxy });
  const via = (host: string, port: number, noProxy: string): string | undefined =>
    proxyFromEnvironment(host, port, env(noProxy))?.href;
  assert.equal(via("hub.example.com", 443, ""), "http://proxy.corp:3128/");
  assert.equal(via("hub.example.com", 443, "example.com"), undefined, "a name covers its subdomains");
  assert.equal(via("hub.example.com", 443, ".example.com"), undefined);
  assert.equal(via("hub.example.com", 443, "*.example.com"), undefined);
  assert.equal(via("badexample.com", 443, "example.com"), "http://proxy.corp:3128/", "not a suffix of the label");
  assert.equal(via("hub.example.com", 443, "hub.example.com:8091"), "http://proxy.corp:3128/", "other port");
  assert.equal(via("hub.example.com", 8091, "hub.example.com:8091"), undefined);
  assert.equal(via("10.1.2.3", 8091, "10.0.0.0/8"), undefined);
  assert.equal(via("11.1.2.3", 8091, "10.0.0.0/8"), "http://proxy.corp:3128/");
  assert.equal(via("fd00::1", 8091, "fd00::/8"), undefined);
  assert.equal(via("10.1.2.3", 8091, "10.1.2.3"), undefined);
  assert.equal(via("anything", 1, "a.b, *"), undefined);
  assert.equal(proxyFromEnvironment("h", 1, {}), undefined, "no proxy configured");
  assert.equal(
    proxyFromEnvironment("h", 1, { https_proxy: "proxy:3128" })?.href,
    "http://proxy:3128/",
    "lower case, scheme optional",
  );
  assert.throws(() => proxyFromEnvironment("h", 1, { HTTPS_PROXY: "socks5://p:1080" }), ProxyConnectError);
  assert.throws(() => proxyFromEnvironment("h", 1, { HTTPS_PROXY: "http://" }), /HTTPS_PROXY is not a URL/);
});
