// The Service data plane of the test environment, as kube-proxy's nftables mode builds it: one
// nftables table per cluster namespace, rewritten as a whole (atomically) whenever a Service or an
// EndpointSlice changes. Connections to a Service's ClusterIP, LoadBalancer ingress IP or NodePort
// are DNATed to one of its ready endpoints, chosen at random per connection (existing connections
// keep their endpoint: conntrack); a Service without ready endpoints rejects new connections.

export const SVC_TABLE = "cpenv-svc";
/** Packets that leave towards the pod they came from (hairpin) are SNATed to the node, as kube-proxy does. */
const MASQ_MARK = "0x4000";

export interface Frontend {
  ip: string;
  port: number;
}

export interface Endpoint {
  ip: string;
  port: number;
}

export interface ServiceRule {
  /** "ns/name/portName" (for chain names and comments) */
  id: string;
  proto: "tcp" | "udp" | "sctp";
  frontends: Frontend[];
  /** ready endpoints only */
  endpoints: Endpoint[];
}

const chainName = (prefix: string, i: number, j?: number): string =>
  j === undefined ? `${prefix}-${i}` : `${prefix}-${i}-${j}`;

/** The whole table as an `nft -f` script that replaces the previous one in one transaction. */
export function renderServiceTable(nodeAddr: string, services: ServiceRule[]): string {
  const out: string[] = [];
  // "add table" + "delete table" + definition: atomic replace, also on the first run.
  out.push(`add table ip ${SVC_TABLE}`, `delete table ip ${SVC_TABLE}`, `table ip ${SVC_TABLE} {`);
  out.push(
    "  chain prerouting {",
    "    type nat hook prerouting priority dstnat; policy accept;",
    "    jump services",
    "  }",
    "  chain output {",
    "    type nat hook output priority -100; policy accept;",
    "    jump services",
    "  }",
    "  chain postrouting {",
    "    type nat hook postrouting priority srcnat; policy accept;",
    `    meta mark & ${MASQ_MARK} == ${MASQ_MARK} snat to ${nodeAddr}`,
    "  }",
  );
  const svcLines: string[] = [];
  const rejectLines: string[] = [];
  const chains: string[] = [];
  services.forEach((s, i) => {
    const comment = `comment ${JSON.stringify(s.id.slice(0, 120))}`;
    if (s.endpoints.length === 0) {
      for (const f of s.frontends)
        rejectLines.push(
          `    ip daddr ${f.ip} ${s.proto} dport ${f.port} ${s.proto === "tcp" ? "reject with tcp reset" : "reject"} ${comment}`,
        );
      return;
    }
    for (const f of s.frontends)
      svcLines.push(`    ip daddr ${f.ip} ${s.proto} dport ${f.port} jump ${chainName("svc", i)} ${comment}`);
    const eps = s.endpoints;
    if (eps.length === 1) {
      chains.push(`  chain ${chainName("svc", i)} {`, `    jump ${chainName("ep", i, 0)}`, "  }");
    } else {
      const vmap = eps.map((_, j) => `${j} : jump ${chainName("ep", i, j)}`).join(", ");
      chains.push(`  chain ${chainName("svc", i)} {`, `    numgen random mod ${eps.length} vmap { ${vmap} }`, "  }");
    }
    eps.forEach((e, j) => {
      chains.push(
        `  chain ${chainName("ep", i, j)} {`,
        `    ip saddr ${e.ip} meta mark set meta mark | ${MASQ_MARK}`,
        `    meta l4proto ${s.proto} dnat to ${e.ip}:${e.port}`,
        "  }",
      );
    });
  });
  out.push("  chain services {", ...svcLines, "  }");
  // Rejects: a filter chain on every path a new connection can take to a Service address.
  for (const hook of ["input", "forward", "output"]) {
    out.push(
      `  chain no-endpoints-${hook} {`,
      `    type filter hook ${hook} priority -10; policy accept;`,
      ...rejectLines,
      "  }",
    );
  }
  out.push(...chains, "}");
  return out.join("\n") + "\n";
}

/** Resolves a Service port's targetPort against a container's ports (by name), as kube-proxy's endpoints do. */
export function resolveTargetPort(
  target: number | string | undefined,
  servicePort: number,
  containerPorts: { name?: string; containerPort: number; protocol?: string }[],
): number | null {
  if (target === undefined) return servicePort;
  if (typeof target === "number") return target;
  if (/^\d+$/.test(target)) return Number(target);
  return containerPorts.find((p) => p.name === target)?.containerPort ?? null;
}
