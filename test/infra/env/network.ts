// Network namespaces hub, mc1, mc2, lab (prefixed cpenv-), veth links, routes, and the firewall
// that drops NEW connections from the hub into each managed cluster. Pods' namespaces are made by
// the process kubelets (test/infra/env/kubelet.ts) inside this network.
//
// Every command is `ip -n <ns> ...` / `ip netns exec <ns> nft ...`: nothing is ever configured in,
// or sent from, the namespace the caller runs in (root, or a test runner's cp-test-<pid>).
import { readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import {
  ALL_NAMESPACES,
  CLUSTERS,
  type ClusterName,
  APISERVER_PORT,
  HOST_ADDR,
  LB_POOL,
  LINKS,
  MANAGED,
  SERVICE_CIDR,
  ifName,
  nsOf,
  podNsPrefix,
  routedRanges,
} from "./config.js";
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
        "test/infra/env/cli.ts prepare' first, outside it.",
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
    // Routes to the peer's host address, pod range and LoadBalancer pool, sourced from our own host
    // address. No default routes.
    for (const [self, peer, via] of [
      [l.a, l.b, `10.200.${l.net}.2`],
      [l.b, l.a, `10.200.${l.net}.1`],
    ] as const) {
      for (const range of routedRanges(peer))
        run("ip", ["-n", nsOf(self), "route", "add", range, "via", via, "src", HOST_ADDR[self]]);
    }
  }
  for (const c of CLUSTERS) {
    const ns = nsOf(c);
    // A cluster's namespace is its node: it forwards between its pods and its links.
    runIn(ns, "sysctl", ["-q", "-w", "net.ipv4.ip_forward=1"]);
    // Service and LoadBalancer addresses are virtual: route them to a device that leads nowhere
    // (one end of a veth pair whose other end has no address: not every kernel has the dummy
    // device), so that connections to them get as far as the Service DNAT (test/infra/env/services.ts).
    run("ip", ["-n", ns, "link", "add", "svc0", "type", "veth", "peer", "name", "svc0-end"]);
    run("ip", ["-n", ns, "link", "set", "svc0-end", "up"]);
    run("ip", ["-n", ns, "link", "set", "svc0", "up"]);
    for (const range of [SERVICE_CIDR[c], LB_POOL[c]])
      run("ip", ["-n", ns, "route", "add", range, "dev", "svc0", "src", HOST_ADDR[c]]);
  }
  // Managed clusters accept no new connection from the hub (replies to their own connections pass),
  // whatever its destination: the node, a pod, a Service or LoadBalancer address (hence prerouting,
  // before the Service DNAT).
  for (const mc of MANAGED) {
    const rules =
      `table inet cpenv {\n` +
      `  chain isolation {\n` +
      `    type filter hook prerouting priority -150; policy accept;\n` +
      `    iifname "${ifName(mc, "hub")}" ct state new counter drop\n` +
      `  }\n` +
      `}\n`;
    runIn(nsOf(mc), "nft", ["-f", "-"], { input: rules });
  }
  // The hub forwards for its pods, never between the managed clusters.
  const hubRules =
    `table inet cpenv {\n` +
    `  chain isolation {\n` +
    `    type filter hook forward priority 0; policy accept;\n` +
    MANAGED.flatMap((a) =>
      MANAGED.filter((b) => b !== a).map(
        (b) => `    iifname "${ifName("hub", a)}" oifname "${ifName("hub", b)}" counter drop\n`,
      ),
    ).join("") +
    `  }\n` +
    `}\n`;
  runIn(nsOf("hub"), "nft", ["-f", "-"], { input: hubRules });
}

/**
 * Cuts (or restores) the link between managed cluster `mc` and the hub silently: the hub drops
 * every packet that arrives from or leaves towards `mc`, in both directions, without a reset or an
 * ICMP error, as a broken network path or a misconfigured firewall does. Connections stay open on
 * both sides until their own keepalives notice. Idempotent.
 */
export function setBlackhole(mc: Exclude<ClusterName, "hub">, on: boolean): void {
  const table = `cpenv-blackhole-${mc}`;
  runIn(nsOf("hub"), "nft", ["delete", "table", "inet", table], { allowFail: true });
  if (!on) return;
  const dev = ifName("hub", mc);
  runIn(nsOf("hub"), "nft", ["-f", "-"], {
    input:
      `table inet ${table} {\n` +
      `  chain in { type filter hook prerouting priority -300; policy accept; iifname "${dev}" counter drop; }\n` +
      `  chain out { type filter hook postrouting priority 300; policy accept; oifname "${dev}" counter drop; }\n` +
      `}\n`,
  });
}

/**
 * Lets managed cluster `mc` open connections to the hub only at the hub kube-apiserver
 * (`HOST_ADDR.hub:APISERVER_PORT`), the one connection an OCM-registered cluster is guaranteed
 * (on), or lifts that (off): every other new connection from `mc` to anything of the hub (its
 * node, pods, Services, LoadBalancers, other ports) is dropped silently, as a firewall would.
 * Connections already open stay. Idempotent.
 */
export function setHubApiserverOnly(mc: Exclude<ClusterName, "hub">, on: boolean): void {
  const table = `cpenv-apiserver-only-${mc}`;
  runIn(nsOf("hub"), "nft", ["delete", "table", "inet", table], { allowFail: true });
  if (!on) return;
  const dev = ifName("hub", mc);
  runIn(nsOf("hub"), "nft", ["-f", "-"], {
    input:
      `table inet ${table} {\n` +
      `  chain in {\n` +
      `    type filter hook prerouting priority -150; policy accept;\n` +
      `    iifname "${dev}" ct state new ip daddr ${HOST_ADDR.hub} tcp dport ${APISERVER_PORT} accept\n` +
      `    iifname "${dev}" ct state new counter drop\n` +
      `  }\n` +
      `}\n`,
  });
}

/** Our namespaces that exist now: the four of the environment and every pod's. */
export function ourNamespaces(): string[] {
  const pods = CLUSTERS.map(podNsPrefix);
  return listNamespaces().filter((n) => ALL_NAMESPACES.includes(n) || pods.some((p) => n.startsWith(p)));
}

/** Deletes our namespaces (their veths go with them) and pods' /etc/netns/<ns> files. Idempotent. */
export function deleteNetwork(): string[] {
  const deleted: string[] = [];
  // Pods first: their veth peers live in the cluster namespaces.
  for (const ns of ourNamespaces().sort((a, b) => b.length - a.length)) {
    run("ip", ["netns", "del", ns], { allowFail: true });
    deleted.push(ns);
  }
  for (const c of CLUSTERS) removePodNetnsFiles(c);
  return deleted;
}

/** /etc/netns/<pod ns>/ (resolv.conf, hosts) of every pod of cluster `c`, left behind or not. */
export function removePodNetnsFiles(c: ClusterName): void {
  let entries: string[];
  try {
    entries = readdirSync("/etc/netns");
  } catch {
    return;
  }
  for (const e of entries)
    if (e.startsWith(podNsPrefix(c))) rmSync(join("/etc/netns", e), { recursive: true, force: true });
}

/** PIDs of every process inside one of our namespaces, pods' included (ip netns pids). */
export function pidsInOurNamespaces(): number[] {
  const pids: number[] = [];
  for (const ns of ourNamespaces()) {
    const out = run("ip", ["netns", "pids", ns], { allowFail: true }).stdout;
    for (const l of out.split("\n")) if (/^\d+$/.test(l.trim())) pids.push(Number(l.trim()));
  }
  return pids.filter((p) => p !== process.pid);
}
