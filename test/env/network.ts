// Network namespaces hub, mc1, mc2, lab (prefixed cpenv-), veth links, host routes, and the
// firewall that drops NEW connections from the hub into each managed cluster.
//
// Every command is `ip -n <ns> ...` / `ip netns exec <ns> nft ...`: nothing is ever configured in,
// or sent from, the namespace the caller runs in (root, or a test runner's cp-test-<pid>).
import { ALL_NAMESPACES, HOST_ADDR, LINKS, MANAGED, ifName, nsOf } from "./config.js";
import { CommandError, run, runIn } from "./exec.js";

export function listNamespaces(): string[] {
  const out = run("ip", ["netns", "list"], { allowFail: true }).stdout;
  return out
    .split("\n")
    .map((l) => l.split(" ")[0] ?? "")
    .filter(Boolean);
}

/** nft is needed for the firewall; installs Debian's nftables when missing (CI runs on a fresh machine). */
export function ensureNft(log: (m: string) => void): void {
  if (run("sh", ["-c", "command -v nft"], { allowFail: true }).status === 0) return;
  if (process.getuid?.() !== 0) throw new CommandError("nft (nftables) is missing and we are not root to install it");
  log("installing nftables (apt-get) for the environment's firewall ...");
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  const install = (): number =>
    run("apt-get", ["install", "-y", "-qq", "nftables"], { allowFail: true, timeoutMs: 300_000, env }).status;
  if (install() !== 0) {
    run("apt-get", ["update", "-qq"], { allowFail: true, timeoutMs: 300_000, env });
    install();
  }
  if (run("sh", ["-c", "command -v nft"], { allowFail: true }).status !== 0) {
    throw new CommandError(
      "nft (Debian package nftables) is missing and 'apt-get install nftables' failed. Inside a network namespace " +
        "without a route out (scripts/test.sh's cp-test-<pid>) run 'node --conditions=source --import tsx " +
        "test/env/cli.ts prepare' first, outside it.",
    );
  }
}

export function checkNetworkPrereqs(): void {
  if (process.getuid?.() !== 0) {
    throw new CommandError("the test environment needs root (network namespaces); run as root");
  }
  if (run("sh", ["-c", "command -v ip"], { allowFail: true }).status !== 0) {
    throw new CommandError("iproute2 ('ip') is missing: apt-get install iproute2");
  }
}

export function createNetwork(): void {
  for (const ns of ALL_NAMESPACES) {
    run("ip", ["netns", "add", ns]);
  }
  for (const name of ["hub", "mc1", "mc2", "lab"] as const) {
    const ns = nsOf(name);
    run("ip", ["-n", ns, "link", "set", "lo", "up"]);
    run("ip", ["-n", ns, "addr", "add", `${HOST_ADDR[name]}/32`, "dev", "lo"]);
  }
  for (const l of LINKS) {
    const ia = ifName(l.a, l.b);
    const ib = ifName(l.b, l.a);
    // Created inside namespace a, peer moved straight into namespace b.
    run("ip", ["-n", nsOf(l.a), "link", "add", ia, "type", "veth", "peer", "name", ib, "netns", nsOf(l.b)]);
    run("ip", ["-n", nsOf(l.a), "addr", "add", `10.200.${l.net}.1/30`, "dev", ia]);
    run("ip", ["-n", nsOf(l.b), "addr", "add", `10.200.${l.net}.2/30`, "dev", ib]);
    run("ip", ["-n", nsOf(l.a), "link", "set", ia, "up"]);
    run("ip", ["-n", nsOf(l.b), "link", "set", ib, "up"]);
    // Host routes to the peer's host address, sourced from our own host address. No default routes.
    run("ip", [
      "-n",
      nsOf(l.a),
      "route",
      "add",
      `${HOST_ADDR[l.b]}/32`,
      "via",
      `10.200.${l.net}.2`,
      "src",
      HOST_ADDR[l.a],
    ]);
    run("ip", [
      "-n",
      nsOf(l.b),
      "route",
      "add",
      `${HOST_ADDR[l.a]}/32`,
      "via",
      `10.200.${l.net}.1`,
      "src",
      HOST_ADDR[l.b],
    ]);
  }
  // Managed clusters accept no new connection from the hub (replies to their own connections pass).
  for (const mc of MANAGED) {
    const rules =
      `table inet cpenv {\n` +
      `  chain input {\n` +
      `    type filter hook input priority 0; policy accept;\n` +
      `    iifname "${ifName(mc, "hub")}" ct state new counter drop\n` +
      `  }\n` +
      `}\n`;
    runIn(nsOf(mc), "nft", ["-f", "-"], { input: rules });
  }
}

/** Deletes our namespaces (their veths go with them). Idempotent. */
export function deleteNetwork(): string[] {
  const existing = new Set(listNamespaces());
  const deleted: string[] = [];
  for (const ns of ALL_NAMESPACES) {
    if (!existing.has(ns)) continue;
    run("ip", ["netns", "del", ns], { allowFail: true });
    deleted.push(ns);
  }
  return deleted;
}

/** PIDs of every process inside one of our namespaces (ip netns pids). */
export function pidsInOurNamespaces(): number[] {
  const existing = new Set(listNamespaces());
  const pids: number[] = [];
  for (const ns of ALL_NAMESPACES) {
    if (!existing.has(ns)) continue;
    const out = run("ip", ["netns", "pids", ns], { allowFail: true }).stdout;
    for (const l of out.split("\n")) if (/^\d+$/.test(l.trim())) pids.push(Number(l.trim()));
  }
  return pids.filter((p) => p !== process.pid);
}
