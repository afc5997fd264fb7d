import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { createCertificateAuthority, signCertificateRequest } from "@cluster-proxy/pki";
import { certificateRequest } from "@cluster-proxy/pki/testing";
import {
  AGENT_SIGNER,
  HUB_CLIENT_SIGNER,
  checkCsr,
  checkCsrIdentity,
  clusterOfUsername,
  type CsrContext,
  type CsrObject,
  type RegistrationSubject,
} from "./csr-signer.js";

const dir = mkdtempSync(join(tmpdir(), "cp-csr-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** A PEM CSR made by openssl (as a third party would), with the given subject and SANs. */
function request(subject: string, sans?: string): string {
  const key = join(dir, `k${Math.random()}.pem`);
  execFileSync("openssl", ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key]);
  return execFileSync(
    "openssl",
    ["req", "-new", "-key", key, "-subj", subject, ...(sans ? ["-addext", `subjectAltName=${sans}`] : [])],
    { encoding: "utf8" },
  );
}

const SUBJECT: RegistrationSubject = {
  user: "open-cluster-management:cluster-proxy:proxy-agent",
  groups: ["open-cluster-management:cluster-proxy"],
  organizationUnit: ["signer-abc"],
};
const GOOD_SUBJECT =
  "/O=open-cluster-management:cluster-proxy/OU=signer-abc/CN=open-cluster-management:cluster-proxy:proxy-agent";
const goodRequest = request(
  GOOD_SUBJECT,
  "DNS:cluster-proxy.addon.open-cluster-management.io,URI:cluster-proxy://cluster/mc2",
);

const ctx = (over: Partial<Record<string, unknown>> = {}): CsrContext => ({
  cluster: (name) =>
    (over.cluster as Record<string, { hubAcceptsClient: boolean }> | undefined)?.[name] ??
    (
      { mc1: { hubAcceptsClient: true }, mc10: { hubAcceptsClient: true }, mc2: { hubAcceptsClient: true } } as Record<
        string,
        { hubAcceptsClient: boolean }
      >
    )[name],
  addon: (cluster) =>
    (over.addon as ((c: string) => ReturnType<CsrContext["addon"]>) | undefined)?.(cluster) ??
    (["mc1", "mc2", "mc10"].includes(cluster) ? { deleting: false, subject: SUBJECT } : undefined),
});

function csr(over: {
  name?: string;
  username?: string;
  groups?: string[];
  labels?: Record<string, string>;
  usages?: string[];
  signerName?: string;
  request?: string;
}): CsrObject {
  const cluster = "mc1";
  return {
    metadata: {
      name: over.name ?? `addon-${cluster}-cluster-proxy-x7k2p`,
      labels: over.labels ?? {
        "open-cluster-management.io/cluster-name": cluster,
        "open-cluster-management.io/addon-name": "cluster-proxy",
      },
    },
    spec: {
      request: Buffer.from(over.request ?? goodRequest).toString("base64"),
      signerName: over.signerName ?? AGENT_SIGNER,
      username: over.username ?? `system:open-cluster-management:${cluster}:mc1-agent`,
      groups: over.groups ?? [
        `system:open-cluster-management:${cluster}`,
        "system:open-cluster-management:managed-clusters",
        "system:authenticated",
      ],
      usages: over.usages ?? ["digital signature", "key encipherment", "client auth"],
    },
  };
}

describe("the cluster of a CSR is the one its requester authenticated as", () => {
  test("usernames", () => {
    assert.equal(clusterOfUsername("system:open-cluster-management:mc1:agent"), "mc1");
    assert.equal(clusterOfUsername("system:open-cluster-management:1st:agent"), "1st");
    for (const bad of [
      undefined,
      "",
      "admin",
      "system:open-cluster-management:mc1",
      "system:open-cluster-management:mc1:",
      "system:open-cluster-management::agent",
      "system:open-cluster-management:mc1:agent:extra",
      "system:open-cluster-management:cluster:mc1:addon:cluster-proxy:agent:x",
      "system:open-cluster-management:MC1:agent",
      "system:serviceaccount:mc1:agent",
    ])
      assert.equal(clusterOfUsername(bad), undefined, String(bad));
  });

  const table: [string, CsrObject, RegExp | "approve" | "wait"][] = [
    ["mc1's registration agent for mc1", csr({}), "approve"],
    [
      "mc10's agent labelling its request mc1 (prefix match)",
      csr({
        username: "system:open-cluster-management:mc10:mc10-agent",
        groups: ["system:open-cluster-management:mc10", "system:open-cluster-management:managed-clusters"],
      }),
      /label open-cluster-management.io\/cluster-name=mc1 does not name the requester's cluster mc10/,
    ],
    [
      "mc1's agent asking for mc10 by label",
      csr({
        labels: {
          "open-cluster-management.io/cluster-name": "mc10",
          "open-cluster-management.io/addon-name": "cluster-proxy",
        },
      }),
      /does not name the requester's cluster mc1/,
    ],
    ["an admin with the right labels", csr({ username: "kube:admin" }), /not a cluster's registration agent/],
    [
      "mc2's agent claiming mc1's name in its username but not in its groups",
      csr({
        groups: ["system:open-cluster-management:mc2", "system:open-cluster-management:managed-clusters"],
      }),
      /lacks the groups system:open-cluster-management:mc1/,
    ],
    ["without the managed-clusters group", csr({ groups: ["system:open-cluster-management:mc1"] }), /lacks the groups/],
    [
      "another addon's label",
      csr({
        labels: { "open-cluster-management.io/cluster-name": "mc1", "open-cluster-management.io/addon-name": "other" },
      }),
      /addon-name is not cluster-proxy/,
    ],
    ["a name outside OCM's pattern", csr({ name: "mc1-cluster-proxy" }), /is not addon-mc1-cluster-proxy-<suffix>/],
    ["another usage", csr({ usages: ["digital signature", "client auth", "code signing"] }), /only client auth/],
    ["no client auth", csr({ usages: ["digital signature"] }), /only client auth/],
    ["another signer", csr({ signerName: "example.com/other" }), /is not ours/],
    ["another kubernetes signer", csr({ signerName: "kubernetes.io/kubelet-serving" }), /is not ours/],
    [
      "a cluster the hub does not know",
      csr({
        username: "system:open-cluster-management:mc3:a",
        groups: ["system:open-cluster-management:mc3", "system:open-cluster-management:managed-clusters"],
        labels: {
          "open-cluster-management.io/cluster-name": "mc3",
          "open-cluster-management.io/addon-name": "cluster-proxy",
        },
        name: "addon-mc3-cluster-proxy-abcde",
      }),
      "wait",
    ],
  ];
  for (const [what, input, expected] of table)
    test(what, () => {
      const verdict = checkCsrIdentity(input, ctx());
      if (expected === "approve") assert.deepEqual(verdict, { action: "approve", cluster: "mc1" });
      else if (expected === "wait") assert.equal(verdict.action, "wait", JSON.stringify(verdict));
      else {
        assert.equal(verdict.action, "deny", JSON.stringify(verdict));
        assert.match((verdict as { reason: string }).reason, expected);
      }
    });

  test("not accepted, no addon, a deleting addon, no registration yet: wait (nothing permanent is wrong)", () => {
    assert.equal(checkCsrIdentity(csr({}), ctx({ cluster: { mc1: { hubAcceptsClient: false } } })).action, "wait");
    const addon = (value: ReturnType<CsrContext["addon"]>) => (c: string) => (c === "mc1" ? value : undefined);
    for (const value of [{ deleting: true, subject: SUBJECT }, { deleting: false }])
      assert.equal(checkCsrIdentity(csr({}), { ...ctx(), addon: addon(value) }).action, "wait");
    assert.equal(checkCsrIdentity(csr({}), { ...ctx(), addon: () => undefined }).action, "wait");
  });

  test("the requested subject must be exactly the registered one, and the request must be well signed", async () => {
    assert.deepEqual(await checkCsr(csr({}), ctx()), { action: "approve", cluster: "mc1" });
    const other = request("/O=system:masters/OU=signer-abc/CN=open-cluster-management:cluster-proxy:proxy-agent");
    const verdict = await checkCsr(csr({ request: other }), ctx());
    assert.equal(verdict.action, "deny");
    assert.match((verdict as { reason: string }).reason, /requested O \[system:masters\]/);
    const staleOu = request(
      "/O=open-cluster-management:cluster-proxy/OU=signer-old/CN=open-cluster-management:cluster-proxy:proxy-agent",
    );
    assert.match(((await checkCsr(csr({ request: staleOu }), ctx())) as { reason: string }).reason, /requested OU/);
    // A request whose signature does not match (tampered body).
    const tampered = goodRequest.replace(
      /\n([A-Za-z0-9+/]{10})/,
      (m, s: string) => `\n${s.split("").reverse().join("")}`,
    );
    assert.equal((await checkCsr(csr({ request: tampered }), ctx())).action, "deny");
  });
});

describe("signing", () => {
  test("the certificate names only the requester's cluster, clientAuth and serverAuth, subject verbatim, capped at the CA", async () => {
    const ca = await createCertificateAuthority({ commonName: "agent-ca", validityDays: 10 });
    const pem = await signCertificateRequest(ca, goodRequest, {
      uris: ["cluster-proxy://cluster/mc1"],
      usage: "both",
      validityDays: 365,
    });
    const cert = new X509Certificate(pem);
    assert.ok(cert.checkIssued(new X509Certificate(ca.certPem)));
    assert.equal(
      cert.subjectAltName,
      "URI:cluster-proxy://cluster/mc1",
      "the requested DNS and URI SANs are not copied",
    );
    assert.deepEqual(cert.keyUsage?.slice().sort(), ["1.3.6.1.5.5.7.3.1", "1.3.6.1.5.5.7.3.2"]);
    assert.equal(
      cert.subject,
      "O=open-cluster-management:cluster-proxy\nOU=signer-abc\nCN=open-cluster-management:cluster-proxy:proxy-agent",
    );
    assert.ok(Date.parse(cert.validTo) <= Date.parse(new X509Certificate(ca.certPem).validTo), "not beyond the CA");
    assert.equal(cert.ca, false);
  });

  test("the agent's hub identity (PortForward): only the published per-cluster subject, only from that cluster's registration agent", async () => {
    const hubSubject: RegistrationSubject = {
      user: "system:open-cluster-management:cluster:mc1:addon:cluster-proxy:agent:proxy-agent",
      groups: [
        "system:open-cluster-management:cluster:mc1:addon:cluster-proxy",
        "system:open-cluster-management:addon:cluster-proxy",
      ],
    };
    // OCM's default user names are longer than openssl allows a CN: made as Go makes them.
    const good = await certificateRequest(hubSubject.user, hubSubject.groups);
    const withHub = {
      ...ctx(),
      addon: (c: string) =>
        c === "mc1" ? { deleting: false, subject: SUBJECT, hubClientSubject: hubSubject } : undefined,
    };
    const hubCsr = (over: Parameters<typeof csr>[0] = {}): CsrObject =>
      csr({ signerName: HUB_CLIENT_SIGNER, request: good, ...over });
    // Not registered (the configuration is not PortForward): not approved.
    assert.equal((await checkCsr(hubCsr(), ctx())).action, "wait");
    assert.deepEqual(await checkCsr(hubCsr(), withHub), { action: "approve", cluster: "mc1" });
    // Another subject: system:masters, or mc2's subject asked by mc1's registration agent.
    for (const [cn, o] of [
      [hubSubject.user, ["system:masters"]],
      [hubSubject.user.replace(":mc1:", ":mc2:"), hubSubject.groups.map((g) => g.replace(":mc1:", ":mc2:"))],
      [SUBJECT.user, SUBJECT.groups],
    ] as const) {
      const verdict = await checkCsr(hubCsr({ request: await certificateRequest(cn, [...o]) }), withHub);
      assert.equal(verdict.action, "deny", `${cn} ${o.join(",")}`);
    }
    // From someone who is not mc1's registration agent.
    assert.equal((await checkCsr(hubCsr({ username: "system:serviceaccount:default:x" }), withHub)).action, "deny");
  });
});
