/** The main job: `cluster-proxy up` as a user runs it, reached with real curl. */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { once } from "node:events";
import { copyFile, mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import * as tls from "node:tls";
import { promisify } from "node:util";
import { TunnelClient } from "@cluster-proxy/client";
import {
  agentClusterUri,
  createCertificateAuthority,
  issueCertificate,
  type CertificateAndKey,
} from "@cluster-proxy/pki";
import { canListen } from "@cluster-proxy/tunnel/testing";
import { CLI, REPO } from "../framework/repo.js";
import { Harness } from "../framework/harness.js";
import { waitFor } from "../framework/waits.js";
import { type Proc } from "../framework/process.js";

const run = promisify(execFile);
const h = new Harness();
after(() => h.close());

async function freeBase(): Promise<number> {
  // base..base+16 must be free. Below the kernel's ephemeral range (32768+), so the local ports
  // of the many connections earlier test files made cannot collide with it.
  for (let i = 0; i < 50; i++) {
    const base = 10_000 + Math.floor(Math.random() * 20_000);
    let free = true;
    for (let p = base; free && p < base + 17; p++) free = await canListen(p);
    if (free) return base;
  }
  throw new Error("no free port range");
}

/** Write the single-CA layout of older releases (one CA signed the server, client and agent certificates). */
async function writeSingleCaLayout(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  const ca = await createCertificateAuthority({ commonName: "cluster-proxy-ca" });
  const put = async (base: string, pem: CertificateAndKey): Promise<void> => {
    await writeFile(join(dir, `${base}.crt`), pem.certPem);
    await writeFile(join(dir, `${base}.key`), pem.keyPem, { mode: 0o600 });
  };
  await put("ca", ca);
  await put(
    "server",
    await issueCertificate(ca, { commonName: "s", dnsNames: ["localhost"], ipAddresses: ["127.0.0.1"], usage: "both" }),
  );
  await put("client", await issueCertificate(ca, { commonName: "c", usage: "client" }));
  for (const c of ["east", "west"])
    await put(`agent-${c}`, await issueCertificate(ca, { commonName: c, uris: [agentClusterUri(c)], usage: "client" }));
}

/** A TLS handshake to `port` presenting `cert`: "accepted" when the server answers, else why not. */
async function tlsAnswer(
  port: number,
  ca: Buffer,
  cert: Buffer,
  key: Buffer,
  alpn: string,
  hello: string,
): Promise<string> {
  const s = tls.connect({ host: "127.0.0.1", port, ca, cert, key, servername: "localhost", ALPNProtocols: [alpn] });
  try {
    const failed = new Promise<string>((resolve) => s.once("error", (err: Error) => resolve(err.message)));
    const connected = await Promise.race([once(s, "secureConnect").then(() => "connected"), failed]);
    if (connected !== "connected") return connected;
    s.write(hello);
    const answered = once(s, "data").then(() => "accepted");
    const closed = once(s, "close").then(() => "closed without an answer");
    return await Promise.race([failed, answered, closed]);
  } finally {
    s.destroy();
  }
}

test("cluster-proxy up: curl through its HTTP CONNECT doors reaches both demo clusters", async () => {
  await h.init([]);
  // A state directory left by an older release: one CA for everything. up must split it.
  const certs = join(h.dir, "state", "certs");
  await writeSingleCaLayout(certs);
  await copyFile(join(certs, "agent-east.crt"), join(h.dir, "old-agent-east.crt"));
  await copyFile(join(certs, "agent-east.key"), join(h.dir, "old-agent-east.key"));
  // base..base+16 must be free; another process may hold one of them, so retry on a conflict
  let base = 0;
  let up: Proc | undefined;
  const failures: string[] = [];
  for (let attempt = 0; attempt < 3 && !up; attempt++) {
    base = await freeBase();
    const p = h.spawnCli("up", ["up", "--port-base", String(base), "--state-dir", join(h.dir, "state")]);
    let exited = false;
    void p.exited.then(() => (exited = true));
    await waitFor(
      "up to print its instructions or exit",
      () => exited || /Running; press Ctrl-C/.test(p.output()),
      60_000,
      100,
    );
    if (!exited) up = p;
    else {
      assert.match(
        p.output(),
        /already in use|EADDRINUSE/i,
        `up exited for another reason than a busy port:\n${p.output()}`,
      );
      failures.push(p.output().slice(-1500));
    }
  }
  assert.ok(up, `up could not find free ports in 3 attempts:\n${failures.join("\n---\n")}`);
  assert.match(up.output(), /had one CA for everything \(older cluster-proxy\); split it/);
  for (const cluster of ["east", "west"]) {
    const plain = await run("curl", [
      "-sS",
      "--max-time",
      "10",
      "-p",
      "-x",
      `http://127.0.0.1:${base}`,
      `http://${cluster}:80/`,
    ]);
    assert.match(plain.stdout, new RegExp(`hello from ${cluster}`));
    const mtls = await run("curl", [
      "-sS",
      "--max-time",
      "10",
      "-p",
      "-x",
      `https://127.0.0.1:${base + 13}`,
      "--proxy-cacert",
      join(certs, "ca.crt"),
      "--proxy-cert",
      join(certs, "client.crt"),
      "--proxy-key",
      join(certs, "client.key"),
      `http://${cluster}:80/`,
    ]);
    assert.match(mtls.stdout, new RegExp(`hello from ${cluster}`));
  }
  // an unknown cluster: the proxy answers 500 No agent available
  const bad = await run("curl", [
    "-s",
    "-o",
    "/dev/null",
    "-w",
    "%{http_connect}",
    "-p",
    "-x",
    `http://127.0.0.1:${base}`,
    "http://nowhere:80/",
  ]).catch((e: { stdout: string }) => e);
  assert.equal(bad.stdout, "500");

  // Separate trust: an agent's certificate (new, or the old one from the single CA) is refused at
  // the client front doors, and the client certificate at the agent port.
  const file = (name: string): Promise<Buffer> => readFile(name.includes("/") ? name : join(certs, name));
  const ca = await file("ca.crt");
  const agentCurl = async (cert: string, key: string): Promise<number> =>
    run("curl", [
      "-sS",
      "--max-time",
      "10",
      "-p",
      "-x",
      `https://127.0.0.1:${base + 13}`,
      "--proxy-cacert",
      join(certs, "ca.crt"),
      "--proxy-cert",
      cert,
      "--proxy-key",
      key,
      "http://east:80/",
    ]).then(
      () => 0,
      (e: { code: number }) => e.code,
    );
  assert.notEqual(
    await agentCurl(join(certs, "agent-east.crt"), join(certs, "agent-east.key")),
    0,
    "agent certificate at the mTLS CONNECT door",
  );
  assert.notEqual(
    await agentCurl(join(h.dir, "old-agent-east.crt"), join(h.dir, "old-agent-east.key")),
    0,
    "old single-CA agent certificate at the mTLS CONNECT door",
  );
  const connectHello = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  const h2Hello = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
  const [agentCert, agentKey, clientCert, clientKey] = await Promise.all(
    ["agent-east.crt", "agent-east.key", "client.crt", "client.key"].map(file),
  );
  assert.notEqual(await tlsAnswer(base + 13, ca, agentCert!, agentKey!, "http/1.1", connectHello), "accepted");
  assert.notEqual(
    await tlsAnswer(base + 10, ca, agentCert!, agentKey!, "h2", h2Hello),
    "accepted",
    "agent certificate at the gRPC door",
  );
  assert.notEqual(
    await tlsAnswer(base + 11, ca, clientCert!, clientKey!, "h2", h2Hello),
    "accepted",
    "client certificate at the agent port",
  );
  assert.equal(await tlsAnswer(base + 10, ca, clientCert!, clientKey!, "h2", h2Hello), "accepted");
  assert.equal(await tlsAnswer(base + 11, ca, agentCert!, agentKey!, "h2", h2Hello), "accepted");
  // and through the SDK: the gRPC door refuses a dial with the agent's certificate, takes the client's
  const asAgent = new TunnelClient({
    proxy: { host: "127.0.0.1", port: base + 10, ca, cert: agentCert!, key: agentKey!, servername: "localhost" },
  });
  try {
    await assert.rejects(asAgent.dial("east:80"));
  } finally {
    await asAgent.close();
  }
  const asClient = new TunnelClient({
    proxy: { host: "127.0.0.1", port: base + 10, ca, cert: clientCert!, key: clientKey!, servername: "localhost" },
  });
  try {
    const socket = await asClient.dial("east:80");
    const reply = new Promise<string>((resolve) => {
      let text = "";
      socket.on("data", (c: Buffer) => (text += c.toString()));
      socket.once("end", () => resolve(text));
    });
    socket.write("GET / HTTP/1.1\r\nHost: east\r\nConnection: close\r\n\r\n");
    assert.match(await reply, /hello from east/);
  } finally {
    await asClient.close();
  }
  // The printed kubeconfig line, then the real kubectl through the mTLS CONNECT door to east's
  // stand-in apiserver (TLS verified, the demo token).
  // (The state directory is not ./.cluster-proxy: the printed line names its hub profile.)
  const kubeconfigLine = /^ {2}cluster-proxy kubeconfig (.+)$/m.exec(up.output())?.[1];
  assert.ok(kubeconfigLine, up.output());
  assert.match(kubeconfigLine, / --hub-profile \S+hub\.json$/);
  const kubeconfig = /^ {2}kubectl --kubeconfig (\S+) get namespaces$/m.exec(up.output())?.[1];
  assert.ok(kubeconfig, up.output());
  await run(process.execPath, [CLI, "kubeconfig", ...kubeconfigLine.split(" ")]);
  const kubectl = join(
    execFileSync(process.execPath, [join(REPO, "scripts", "k8s-binaries.mjs")], { encoding: "utf8" })
      .trim()
      .split("\n")
      .pop()!,
    "bin",
    "kubectl",
  );
  const namespaces = await run(kubectl, ["--kubeconfig", kubeconfig, "get", "namespaces", "-o", "name"]);
  assert.equal(namespaces.stdout, "namespace/default\nnamespace/kube-system\nnamespace/east-apps\n");
  up.child.kill("SIGINT");
  assert.equal(await up.exited, 0, up.output());
});
