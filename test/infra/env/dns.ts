// The cluster DNS of the test environment: a small authoritative DNS server (UDP and TCP, A
// records only) that the process kubelet runs in each cluster, behind the kube-system/kube-dns
// Service, answering
//   <svc>.<ns>.svc.cluster.local     the Service's ClusterIP (headless: its ready endpoints)
//   <a>-<b>-<c>-<d>.lb.cpenv.test    a.b.c.d (LoadBalancer hostnames, resolvable in every cluster)
// Other names get NXDOMAIN (there is nothing upstream: no namespace has a route out). Known names
// asked for another type (AAAA, ...) get an empty NOERROR answer, so resolvers fall back to A.
import dgram from "node:dgram";
import net from "node:net";

export const CLUSTER_DOMAIN = "cluster.local";
export const LB_DOMAIN = "lb.cpenv.test";

const TYPE_A = 1;
const CLASS_IN = 1;
export const RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, NOTIMP: 4 } as const;

export interface Question {
  name: string;
  type: number;
  cls: number;
}

export interface Query {
  id: number;
  flags: number;
  question: Question;
  /** byte offset just after the question, i.e. the question's raw bytes are msg[12, end) */
  end: number;
}

/** Parses a query with exactly one question; null when malformed. */
export function parseQuery(msg: Buffer): Query | null {
  if (msg.length < 12) return null;
  const id = msg.readUInt16BE(0);
  const flags = msg.readUInt16BE(2);
  if (flags & 0x8000) return null; // a response, not a query
  if (msg.readUInt16BE(4) !== 1) return null;
  const labels: string[] = [];
  let off = 12;
  for (;;) {
    if (off >= msg.length) return null;
    const len = msg[off]!;
    off++;
    if (len === 0) break;
    if (len > 63 || off + len > msg.length) return null; // no compression in questions
    labels.push(msg.subarray(off, off + len).toString("latin1"));
    off += len;
  }
  if (off + 4 > msg.length) return null;
  return {
    id,
    flags,
    question: { name: labels.join(".").toLowerCase(), type: msg.readUInt16BE(off), cls: msg.readUInt16BE(off + 2) },
    end: off + 4,
  };
}

/** A response to `q` (from the raw query `msg`) with A records `ips`. */
export function buildResponse(msg: Buffer, q: Query, rcode: number, ips: string[], ttl = 5): Buffer {
  const header = Buffer.alloc(12);
  header.writeUInt16BE(q.id, 0);
  // QR, opcode copied, AA, RD copied, RA, rcode.
  header.writeUInt16BE(0x8000 | (q.flags & 0x7800) | 0x0400 | (q.flags & 0x0100) | 0x0080 | (rcode & 0xf), 2);
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(ips.length, 6);
  const answers = ips.map((ip) => {
    const a = Buffer.alloc(16);
    a.writeUInt16BE(0xc00c, 0); // pointer to the question's name
    a.writeUInt16BE(TYPE_A, 2);
    a.writeUInt16BE(CLASS_IN, 4);
    a.writeUInt32BE(ttl, 6);
    a.writeUInt16BE(4, 10);
    ip.split(".").forEach((o, i) => a.writeUInt8(Number(o), 12 + i));
    return a;
  });
  return Buffer.concat([header, msg.subarray(12, q.end), ...answers]);
}

/** What a name resolves to: A addresses (possibly none), or null when the name does not exist. */
export type Resolver = (name: string) => string[] | null;

/**
 * Resolves names of a cluster from a lookup of Services: `service(ns, name)` returns the
 * addresses of that Service or null when there is none.
 */
export function clusterResolver(service: (ns: string, name: string) => string[] | null): Resolver {
  const svcSuffix = `.svc.${CLUSTER_DOMAIN}`;
  return (name) => {
    const n = name.replace(/\.$/, "").toLowerCase();
    if (n.endsWith(`.${LB_DOMAIN}`)) {
      const m = /^(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})$/.exec(n.slice(0, -LB_DOMAIN.length - 1));
      if (!m || m.slice(1).some((o) => Number(o) > 255)) return null;
      return [m.slice(1).join(".")];
    }
    if (!n.endsWith(svcSuffix)) return null;
    const parts = n.slice(0, -svcSuffix.length).split(".");
    if (parts.length !== 2) return null;
    return service(parts[1]!, parts[0]!);
  };
}

/** Answers one query message (null: drop it). */
export function answer(msg: Buffer, resolve: Resolver): Buffer | null {
  const q = parseQuery(msg);
  if (!q) return null;
  if ((q.flags & 0x7800) !== 0) return buildResponse(msg, q, RCODE.NOTIMP, []);
  const ips = resolve(q.question.name);
  if (ips === null) return buildResponse(msg, q, RCODE.NXDOMAIN, []);
  const isA = q.question.type === TYPE_A && (q.question.cls === CLASS_IN || q.question.cls === 255);
  return buildResponse(msg, q, RCODE.NOERROR, isA ? ips : []);
}

export interface DnsServer {
  close(): Promise<void>;
}

/** Serves `resolve` on UDP and TCP `host:port`. */
export async function serveDns(host: string, port: number, resolve: Resolver): Promise<DnsServer> {
  const udp = dgram.createSocket("udp4");
  udp.on("message", (msg, rinfo) => {
    const res = answer(msg, resolve);
    if (res) udp.send(res, rinfo.port, rinfo.address);
  });
  const tcp = net.createServer((s) => {
    let buf = Buffer.alloc(0);
    s.setTimeout(10_000, () => s.destroy());
    s.on("error", () => s.destroy());
    s.on("data", (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
        const len = buf.readUInt16BE(0);
        const res = answer(buf.subarray(2, 2 + len), resolve);
        buf = buf.subarray(2 + len);
        if (!res) return s.destroy();
        const l = Buffer.alloc(2);
        l.writeUInt16BE(res.length);
        s.write(Buffer.concat([l, res]));
      }
    });
  });
  await new Promise<void>((ok, fail) => {
    udp.once("error", fail);
    udp.bind(port, host, () => ok());
  });
  await new Promise<void>((ok, fail) => {
    tcp.once("error", fail);
    tcp.listen(port, host, () => ok());
  });
  return {
    close: () =>
      new Promise<void>((ok) => {
        udp.close();
        tcp.close(() => ok());
      }),
  };
}
