/**
 * The gateway endpoint's settings: the kube-apiserver URL from the flag or the pod's environment
 * (IPv6-safe), and start-up errors that name the flag of an unreadable or non-PEM file.
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import {
  ConfigError,
  agentOptionsSchema,
  gatewayOptionsSchema,
  parseAgentOptions,
  withDefaults,
  type AgentOptions,
} from "@cluster-proxy/api";
import { createCertificateAuthority } from "@cluster-proxy/pki";
import { TlsFileError } from "@cluster-proxy/tunnel";
import { kubeApiserverUrl, loadGatewaySettings } from "./gateway-config.js";

describe("gateway settings", () => {
  let dir: string;
  let base: AgentOptions;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cp-gateway-config-"));
    const ca = await createCertificateAuthority({ commonName: "gw", validityDays: 1 });
    await writeFile(join(dir, "gw.crt"), ca.certPem);
    await mkdir(join(dir, "sa"));
    await writeFile(join(dir, "sa", "token"), "t");
    await writeFile(join(dir, "sa", "ca.crt"), ca.certPem);
    await writeFile(join(dir, "not-pem"), "hello");
    base = {
      ...withDefaults(agentOptionsSchema, {}),
      caCert: "/ca.crt",
      agentCert: "/a.crt",
      agentKey: "/a.key",
      gatewayCaFile: join(dir, "gw.crt"),
      serviceAccountDir: join(dir, "sa"),
      kubeApiserverUrl: "https://10.96.0.1:443",
    };
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test("the apiserver URL: the flag, else the pod's environment, bracketing IPv6", () => {
    assert.equal(
      kubeApiserverUrl({ kubeApiserverUrl: "https://api.example:6443" }, {}).origin,
      "https://api.example:6443",
    );
    const env = { KUBERNETES_SERVICE_HOST: "fd00::1", KUBERNETES_SERVICE_PORT: "443" };
    assert.equal(kubeApiserverUrl({ kubeApiserverUrl: "" }, env).host, "[fd00::1]");
    assert.equal(
      kubeApiserverUrl(
        { kubeApiserverUrl: "" },
        { KUBERNETES_SERVICE_HOST: "10.0.0.1", KUBERNETES_SERVICE_PORT: "6443" },
      ).origin,
      "https://10.0.0.1:6443",
    );
    assert.throws(() => kubeApiserverUrl({ kubeApiserverUrl: "" }, {}), /--kube-apiserver-url: not set/);
  });

  test("disabled without --gateway-ca-file; enabled with readable files", async () => {
    assert.equal(await loadGatewaySettings({ ...base, gatewayCaFile: "" }, {}), undefined);
    const settings = await loadGatewaySettings(base, {});
    assert.equal(settings?.upstreams.apiserverUrl.origin, "https://10.96.0.1");
    assert.equal(settings?.files.ca?.flag, "--gateway-ca-file");
  });

  test("unreadable or non-PEM files are errors naming their flag", async () => {
    const fails = async (over: Partial<AgentOptions>, flag: string, tlsFile = false): Promise<void> => {
      await assert.rejects(
        loadGatewaySettings({ ...base, ...over }, {}),
        (err: Error) =>
          (tlsFile ? err instanceof TlsFileError && err.flag === `--${flag}` : err instanceof ConfigError) &&
          err.message.startsWith(`--${flag}: `),
        flag,
      );
    };
    await fails({ gatewayCaFile: join(dir, "missing") }, "gateway-ca-file", true);
    await fails({ gatewayCaFile: join(dir, "not-pem") }, "gateway-ca-file", true);
    await fails({ serviceCaFile: join(dir, "missing") }, "service-ca-file", true);
    await fails({ serviceAccountDir: join(dir, "nowhere") }, "service-account-dir");
    await fails({ kubeApiserverUrl: "" }, "kube-apiserver-url");
  });

  test("the impersonation prefix: the gateway's default, configurable, never empty", async () => {
    assert.equal((await loadGatewaySettings(base, {}))?.impersonationPrefix, "cluster:hub:");
    assert.equal(
      withDefaults(agentOptionsSchema, {}).gatewayImpersonationPrefix,
      withDefaults(gatewayOptionsSchema, {}).impersonationPrefix,
      "the agent's default is the gateway's",
    );
    const custom = await loadGatewaySettings({ ...base, gatewayImpersonationPrefix: "hub:" }, {});
    assert.equal(custom?.impersonationPrefix, "hub:");
    assert.throws(
      () => parseAgentOptions({ proxyServerHost: "h", gatewayImpersonationPrefix: "" }),
      /--gateway-impersonation-prefix.*must not be empty/,
    );
  });
});
