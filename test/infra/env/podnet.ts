// A pod's own network, made by the process kubelet from inside its cluster's namespace (the node):
//
//   node (cluster ns)                         pod ns <prefix><cluster>-pod-<n>
//   pod<n> ---------------- veth ---------------- eth0  <pod range>.<n>/32
//   route <pod ip>/32 dev pod<n>                  route <node addr>/32 dev eth0
//                                                 route 10.200.0.0/16 via <node addr>
//
// The node forwards (ip_forward), so a pod reaches what its node reaches and is reached from where
// the node's pod range is routed (test/infra/env/network.ts), under the same firewall. /etc/netns/<ns>/
// holds the pod's resolv.conf (cluster DNS) and hosts, which `ip netns exec` bind-mounts over /etc.
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type ClusterName, ENV_CIDR, HOST_ADDR, POD_CIDR, addrIn, dnsServiceIp, podNsPrefix } from "./config.js";
import { CLUSTER_DOMAIN } from "./dns.js";
import { run } from "./exec.js";

export interface PodNet {
  ns: string;
  ip: string;
  octet: number;
}

/** Pod addresses .2-.254 of the cluster's pod range, handed out round-robin (an address is not reused at once). */
export class PodIpam {
  private readonly used = new Set<number>();
  private next = 2;
  allocate(): number {
    for (let i = 0; i < 253; i++) {
      const n = this.next;
      this.next = this.next >= 254 ? 2 : this.next + 1;
      if (!this.used.has(n)) {
        this.used.add(n);
        return n;
      }
    }
    throw new Error("the pod address range is exhausted (253 pods)");
  }
  release(n: number): void {
    this.used.delete(n);
  }
}

const ip = (args: string[]): void => {
  run("ip", args, { timeoutMs: 15_000 });
};

/** Stops whatever still runs in `ns` and deletes it (idempotent). */
export function deleteNetns(ns: string): void {
  const pids = run("ip", ["netns", "pids", ns], { allowFail: true })
    .stdout.split("\n")
    .filter((l) => /^\d+$/.test(l.trim()));
  for (const p of pids) {
    try {
      process.kill(Number(p), "SIGKILL");
    } catch {
      /* gone */
    }
  }
  run("ip", ["netns", "del", ns], { allowFail: true });
  rmSync(join("/etc/netns", ns), { recursive: true, force: true });
}

export function setupPodNetwork(
  c: ClusterName,
  octet: number,
  pod: { name: string; namespace: string },
  existing: Set<string>,
): PodNet {
  const ns = `${podNsPrefix(c)}${octet}`;
  const addr = addrIn(POD_CIDR[c], octet);
  const node = HOST_ADDR[c];
  const hostIf = `pod${octet}`;
  // Left behind by a kubelet that was killed: start clean.
  if (existing.has(ns)) deleteNetns(ns);
  run("ip", ["link", "del", hostIf], { allowFail: true });
  ip(["netns", "add", ns]);
  try {
    ip(["link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", ns]);
    ip(["link", "set", hostIf, "up"]);
    ip(["route", "add", `${addr}/32`, "dev", hostIf, "src", node]);
    ip(["-n", ns, "link", "set", "lo", "up"]);
    ip(["-n", ns, "addr", "add", `${addr}/32`, "dev", "eth0"]);
    ip(["-n", ns, "link", "set", "eth0", "up"]);
    ip(["-n", ns, "route", "add", `${node}/32`, "dev", "eth0", "scope", "link", "src", addr]);
    ip(["-n", ns, "route", "add", ENV_CIDR, "via", node, "dev", "eth0", "src", addr]);
    const etc = join("/etc/netns", ns);
    mkdirSync(etc, { recursive: true });
    writeFileSync(
      join(etc, "resolv.conf"),
      `# cluster-proxy test environment: pod ${pod.namespace}/${pod.name}\n` +
        `search ${pod.namespace}.svc.${CLUSTER_DOMAIN} svc.${CLUSTER_DOMAIN} ${CLUSTER_DOMAIN}\n` +
        `nameserver ${dnsServiceIp(c)}\n` +
        `options ndots:5\n`,
    );
    writeFileSync(join(etc, "hosts"), `127.0.0.1\tlocalhost\n::1\tlocalhost\n${addr}\t${pod.name}\n`);
  } catch (err) {
    deleteNetns(ns);
    throw err;
  }
  return { ns, ip: addr, octet };
}

export function teardownPodNetwork(p: PodNet): void {
  deleteNetns(p.ns);
}
