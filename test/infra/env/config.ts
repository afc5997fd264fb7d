// Names, addresses and paths of the multi-cluster test environment. See docs/testing/environment.md.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** Everything the environment makes lives here (git-ignored): state.json, PKI, data, logs, kubeconfigs. */
export const stateDir = process.env.CPENV_STATE_DIR ?? join(repoRoot, ".cache", "test-env");

/**
 * Prefix of every network namespace we create (other suites use cp-test-<pid>). CPENV_NS_PREFIX
 * overrides it so that two environments (e.g. two checkouts, each with its own CPENV_STATE_DIR)
 * can run side by side: everything outside our namespaces that carries a name (the namespaces
 * themselves, /etc/netns/<ns>/) is derived from it; interfaces are only ever created inside them.
 */
export const NS_PREFIX = nsPrefix(process.env.CPENV_NS_PREFIX);

function nsPrefix(v: string | undefined): string {
  if (v === undefined || v === "") return "cpenv-";
  // Namespace names become file names (/run/netns/<name>) and show up in `ip netns list`: keep
  // them short and plain, and distinct from the test runner's cp-test-<pid>.
  if (!/^[a-z][a-z0-9]{0,9}-$/.test(v) || v === "cp-") {
    throw new Error(
      `CPENV_NS_PREFIX=${JSON.stringify(v)}: must be 1-10 lower-case letters or digits (starting with a letter) ` +
        `followed by "-", e.g. "cpenb-"`,
    );
  }
  return v;
}

export type ClusterName = "hub" | "mc1" | "mc2";
export const CLUSTERS: readonly ClusterName[] = ["hub", "mc1", "mc2"];
export const MANAGED: readonly ClusterName[] = ["mc1", "mc2"];

export const nsOf = (name: ClusterName | "lab"): string => `${NS_PREFIX}${name}`;
/** The environment's four namespaces; pods' namespaces (podNsPrefix) come and go with the pods. */
export const ALL_NAMESPACES = [nsOf("hub"), nsOf("mc1"), nsOf("mc2"), nsOf("lab")];

/**
 * Each namespace has one "host" address on its loopback device; the veth links carry /30 transfer
 * networks and host routes (no default route anywhere). All of it is inside 10.200.0.0/16 and
 * exists only inside our namespaces.
 */
export const HOST_ADDR: Record<ClusterName | "lab", string> = {
  hub: "10.200.0.1",
  mc1: "10.200.0.2",
  mc2: "10.200.0.3",
  lab: "10.200.0.10",
};

export interface Link {
  a: ClusterName | "lab";
  b: ClusterName | "lab";
  /** third octet of the /30: a = .1, b = .2 */
  net: number;
}
export const LINKS: readonly Link[] = [
  { a: "hub", b: "mc1", net: 1 },
  { a: "hub", b: "mc2", net: 2 },
  { a: "hub", b: "lab", net: 10 },
  { a: "mc1", b: "lab", net: 11 },
  { a: "mc2", b: "lab", net: 12 },
];
/** Interface name of the end of a link that lives in `self`, pointing at `peer`, e.g. "mc1-hub". */
export const ifName = (self: string, peer: string): string => `${self}-${peer}`;

/**
 * Virtual Service (ClusterIP) ranges: the apiserver allocates from them and only the cluster's own
 * namespace and its pods route them (to a dummy device, where the Service DNAT applies).
 */
export const SERVICE_CIDR: Record<ClusterName, string> = {
  hub: "10.200.100.0/24",
  mc1: "10.200.101.0/24",
  mc2: "10.200.102.0/24",
};

/** Each pod's own address comes from its cluster's pod range, routed like the cluster's host address. */
export const POD_CIDR: Record<ClusterName, string> = {
  hub: "10.200.20.0/24",
  mc1: "10.200.21.0/24",
  mc2: "10.200.22.0/24",
};

/**
 * LoadBalancer ingress addresses, routed like the cluster's host address (as a cloud load balancer
 * in the cluster's network would be): a hub LoadBalancer is reachable from the managed clusters, a
 * managed cluster's is not from the hub (the firewall drops it like any new connection from there).
 */
export const LB_POOL: Record<ClusterName, string> = {
  hub: "10.200.30.0/24",
  mc1: "10.200.31.0/24",
  mc2: "10.200.32.0/24",
};

/** The address range pods route to their node (everything of the environment is inside it). */
export const ENV_CIDR = "10.200.0.0/16";

/** Address `host` (1-254) of a /24 range. */
export const addrIn = (cidr: string, host: number): string => `${cidr.split(".").slice(0, 3).join(".")}.${host}`;

/** The kube-system/kube-dns Service's ClusterIP (the cluster DNS served by the process kubelet). */
export const dnsServiceIp = (c: ClusterName): string => addrIn(SERVICE_CIDR[c], 10);

/** Network namespace of a pod: <prefix><cluster>-pod-<last octet of its address>. */
export const podNsPrefix = (c: ClusterName): string => `${NS_PREFIX}${c}-pod-`;

/** Address ranges that live in a namespace and are routed to it by its neighbours. */
export const routedRanges = (name: ClusterName | "lab"): string[] =>
  name === "lab" ? [`${HOST_ADDR.lab}/32`] : [`${HOST_ADDR[name]}/32`, POD_CIDR[name], LB_POOL[name]];

export const APISERVER_PORT = 6443;
/** The kubelet API (test/infra/k8s/kubelet-api) on each cluster's node address, as a kubelet's. */
export const KUBELET_PORT = 10250;
export const apiserverUrl = (c: ClusterName): string => `https://${HOST_ADDR[c]}:${APISERVER_PORT}`;

/** User name (client certificate CN) the klusterlets bootstrap with; the hub auto-approves it. */
export const BOOTSTRAP_USER = "system:open-cluster-management:cpenv-bootstrap";
export const AGENT_NAMESPACE = "open-cluster-management-agent";
export const HUB_NAMESPACE = "open-cluster-management-hub";

export const paths = {
  state: join(stateDir, "state.json"),
  lock: join(stateDir, ".lock"),
  pki: join(stateDir, "pki"),
  data: join(stateDir, "data"),
  logs: join(stateDir, "logs"),
  run: join(stateDir, "run"),
  kubectl: join(stateDir, "kubectl"),
  /** helm wrapper (runs in the lab namespace) and its config/cache/data directories */
  helm: join(stateDir, "helm"),
  helmHome: join(stateDir, "helm-home"),
  kubeconfig: (c: ClusterName): string => join(stateDir, `${c}.kubeconfig`),
  /** https://127.0.0.1:6443, for processes inside that cluster's own namespace. */
  localKubeconfig: (c: ClusterName): string => join(stateDir, "pki", c, "local.kubeconfig"),
  /** Unix socket (in the lab namespace's bridge) forwarding to the cluster's apiserver. */
  bridgeSocket: (c: ClusterName): string => join(stateDir, "run", `${c}-apiserver.sock`),
};

/** Annotation on each Pod object: the pod's network namespace (for `ip netns exec`). */
export const NETNS_ANNOTATION = "cpenv.cluster-proxy.io/netns";
/**
 * Annotation on a LoadBalancer Service choosing what its status.loadBalancer.ingress holds:
 * "ip" (default), "hostname" (a hostname only, as AWS load balancers report) or "ip+hostname".
 */
export const LB_INGRESS_ANNOTATION = "cpenv.cluster-proxy.io/load-balancer-ingress";
