/**
 * The container image (`npm run image`, scripts/image.mjs) runs: its layers are unpacked from the
 * OCI layout into a root filesystem and its entry points are started from it with `chroot` as the
 * image's user, with the image's environment only (nothing of the checkout or the host's node is
 * reachable), and bytes are relayed through a proxy-server (`/proxy-server`) and a proxy-agent
 * (`/proxy-agent`) both started from the image. scripts/test.sh builds the image before entering
 * the test's network namespace (the build needs the package registries).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chownSync, existsSync, readFileSync, readdirSync, mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { dialConnect } from "@cluster-proxy/client";
import { nodeFlagsFor } from "@cluster-proxy/cli";
import { writeStandaloneCerts, type StandaloneCertPaths } from "@cluster-proxy/pki";
import { Harness, echoRoundTrip, echoServer, freePort, serverCertFlags } from "../framework/harness.js";
import { REPO } from "../framework/repo.js";
import { httpGet } from "../framework/http.js";
import { waitForProc } from "../framework/process.js";

interface ImageInfo {
  name: string;
  tag: string;
  digest: string;
  layout: string;
}

interface ImageConfig {
  User?: string;
  Env?: string[];
  Entrypoint?: string[];
  Cmd?: string[];
  WorkingDir?: string;
}

const INFO = join(REPO, ".cache", "image", "image.json");
/** The Node.js version the image ships (image/versions.json). */
const NODE_VERSION = (
  JSON.parse(readFileSync(join(REPO, "image", "versions.json"), "utf8")) as { node: { version: string } }
).node.version;

function readJson<T>(path: string): T {
  return JSON.parse(readFileSync(path, "utf8")) as T;
}

const blob = (layout: string, digest: string): string => join(layout, "blobs", ...digest.split(":"));

/** Unpacks the image's layers in order into `rootfs` (our image has no whiteouts); returns its config. */
function unpack(info: ImageInfo, rootfs: string): ImageConfig {
  const index = readJson<{ manifests: { digest: string; annotations?: Record<string, string> }[] }>(
    join(info.layout, "index.json"),
  );
  const entry = index.manifests.find((m) => m.annotations?.["org.opencontainers.image.ref.name"] === info.tag);
  assert.ok(entry, `tag ${info.tag} not in ${info.layout}/index.json`);
  assert.equal(entry.digest, info.digest);
  const manifest = readJson<{ config: { digest: string }; layers: { digest: string; mediaType: string }[] }>(
    blob(info.layout, entry.digest),
  );
  mkdirSync(rootfs, { recursive: true });
  for (const layer of manifest.layers) {
    const gz = layer.mediaType.endsWith("+gzip");
    const res = spawnSync("tar", [
      gz ? "-xzf" : "-xf",
      blob(info.layout, layer.digest),
      "-C",
      rootfs,
      "--numeric-owner",
    ]);
    assert.equal(res.status, 0, `tar ${layer.digest}: ${String(res.stderr)}`);
  }
  return readJson<{ config: ImageConfig }>(blob(info.layout, manifest.config.digest)).config;
}

describe("the container image", { timeout: 180_000 }, () => {
  const h = new Harness();
  let dir = "";
  let rootfs = "";
  let config: ImageConfig;
  let certs: StandaloneCertPaths;

  /** A path inside the unpacked image, as the image's processes see it. */
  const inImage = (p: string): string => `/${relative(rootfs, p)}`;

  /** argv that runs `argv` from the image, as its user, with only the image's environment. */
  function inContainer(argv: string[]): [string, string[]] {
    const [uid, gid = uid] = (config.User ?? "0").split(":");
    return ["env", ["-i", ...(config.Env ?? []), "/usr/sbin/chroot", `--userspec=${uid}:${gid}`, rootfs, ...argv]];
  }

  before(() => {
    assert.ok(existsSync(INFO), `${INFO} is missing: build the image with npm run image`);
    dir = mkdtempSync(join(tmpdir(), "cp-image-"));
    rootfs = join(dir, "rootfs");
    config = unpack(readJson<ImageInfo>(INFO), rootfs);
  });
  after(async () => {
    await h.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test("config: non-root user, cluster-proxy as the entrypoint, no host paths", () => {
    assert.equal(config.User, "65532:65532");
    assert.deepEqual(config.Entrypoint, ["/usr/bin/cluster-proxy"]);
    assert.ok(config.Env?.includes("NODE_ENV=production"), String(config.Env));
    assert.ok(config.Env?.includes("CLUSTER_PROXY_LOG_FORMAT=json"), String(config.Env));
    // Only the runtime: node, env and the libraries node links against (no shell, no package manager).
    assert.deepEqual(readdirSync(join(rootfs, "usr", "bin")).sort(), ["cluster-proxy", "env", "node"]);
  });

  test("cluster-proxy, /proxy-server and /proxy-agent run with the pinned node and the CLI's node flags", () => {
    const version = readJson<{ version: string }>(join(REPO, "packages", "cli", "package.json")).version;
    const [cmd, args] = inContainer(["cluster-proxy", "--version"]);
    const res = spawnSync(cmd, args, { encoding: "utf8" });
    assert.equal(res.status, 0, res.stderr);
    assert.equal(res.stdout.trim(), version);
    for (const [entry, usage] of [
      ["/proxy-server", "Usage: cluster-proxy server"],
      ["/proxy-agent", "Usage: cluster-proxy agent"],
    ]) {
      const [c, a] = inContainer([entry!, "--help"]);
      const r = spawnSync(c, a, { encoding: "utf8" });
      assert.equal(r.status, 0, r.stderr);
      assert.match(r.stdout, new RegExp(`^${usage!}`));
    }
    const [c, a] = inContainer(["/usr/bin/node", "-p", "process.version"]);
    assert.equal(spawnSync(c, a, { encoding: "utf8" }).stdout.trim(), `v${NODE_VERSION}`);
  });

  test("a proxy-server and a proxy-agent from the image relay bytes (HTTP CONNECT over mTLS)", async () => {
    certs = await writeStandaloneCerts(join(rootfs, "tmp", "pki"), {
      clusters: ["east"],
      hubHosts: ["localhost", "127.0.0.1"],
    });
    // The keys are 0600; the image's user must read them (as a mounted Secret would allow).
    const [uid, gid] = (config.User ?? "0:0").split(":").map(Number);
    for (const e of readdirSync(certs.dir, { recursive: true, withFileTypes: true })) {
      chownSync(join(e.parentPath, e.name), uid!, gid!);
    }
    chownSync(certs.dir, uid!, gid!);
    const rel = (p: string): string => inImage(p);
    const ports = { connect: await freePort(), agent: await freePort(), health: await freePort() };
    const [scmd, sargs] = inContainer([
      "/proxy-server",
      "--mode=http-connect",
      "--server-bind-address=127.0.0.1",
      `--server-port=${ports.connect}`,
      "--agent-bind-address=127.0.0.1",
      `--agent-port=${ports.agent}`,
      "--health-bind-address=127.0.0.1",
      `--health-port=${ports.health}`,
      "--admin-port=0",
      ...serverCertFlags({
        ...certs,
        server: { cert: rel(certs.server.cert), key: rel(certs.server.key) },
        clientCa: { ...certs.clientCa, cert: rel(certs.clientCa.cert) },
        agentCa: { ...certs.agentCa, cert: rel(certs.agentCa.cert) },
      }),
      "--proxy-strategies=destHost",
      "--log-level=warn",
    ]);
    const server = h.spawnProc("image-proxy-server", scmd, sargs);
    await waitForProc(
      server,
      "the image's proxy-server to be healthy",
      async () => (await httpGet(`http://127.0.0.1:${ports.health}/healthz`)).status === 200,
    );
    const agentHealth = await freePort();
    const east = certs.agents.get("east")!;
    const [acmd, aargs] = inContainer([
      "/proxy-agent",
      "--proxy-server-host=127.0.0.1",
      `--proxy-server-port=${ports.agent}`,
      `--ca-cert=${rel(certs.ca.cert)}`,
      `--agent-cert=${rel(east.cert)}`,
      `--agent-key=${rel(east.key)}`,
      "--cluster-name=east",
      "--health-server-host=127.0.0.1",
      `--health-server-port=${agentHealth}`,
      "--admin-server-port=0",
      "--log-level=warn",
    ]);
    const agent = h.spawnProc("image-proxy-agent", acmd, aargs);
    await waitForProc(
      agent,
      "the image's proxy-agent to be ready",
      async () => (await httpGet(`http://127.0.0.1:${agentHealth}/readyz`)).status === 200,
    );

    // Both run as the image's user, under node with the V8 flags of their command for the image's
    // node (from the #! line).
    for (const [p, command] of [
      [server, undefined],
      [agent, "agent"],
    ] as const) {
      const status = readFileSync(`/proc/${p.child.pid}/status`, "utf8");
      assert.match(status, /^Uid:\s+65532\s/m, `${p.name} runs as 65532`);
      const argv = readFileSync(`/proc/${p.child.pid}/cmdline`, "utf8").split("\0");
      assert.equal(argv[0], "node", `${p.name}: ${argv.join(" ")}`);
      for (const flag of nodeFlagsFor(NODE_VERSION, command))
        assert.ok(argv.includes(flag), `${p.name} lacks ${flag}: ${argv.join(" ")}`);
    }

    const echo = await echoServer(h);
    const s = await dialConnect(`127.0.0.1.east:${echo}`, {
      proxy: {
        host: "127.0.0.1",
        port: ports.connect,
        ca: readFileSync(certs.ca.cert),
        cert: readFileSync(certs.client.cert),
        key: readFileSync(certs.client.key),
      },
      timeoutMs: 20_000,
    });
    assert.ok(await echoRoundTrip(s, Buffer.alloc(256 * 1024, "image relay ")), "the echoed bytes equal the sent ones");
  });
});
