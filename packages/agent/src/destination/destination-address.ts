/**
 * The address the kernel will actually connect to, for judging a dial: every spelling of an IP
 * address brought to one canonical text (ipaddr.js parses), translated IPv6 judged as its IPv4.
 * Design: docs/design/decisions.md#agent-identity-exact-grants-only-destination-policy-judged-after-resolution
 */
import ipaddr from "ipaddr.js";

/** A destination address brought to canonical form. */
export interface CanonicalAddress {
  /** The address itself, canonical (`127.0.0.1`, `fe80::1`). */
  ip: string;
  /** What the kernel connects to when that is another address: `127.0.0.1` for 0.0.0.0/8, `::1` for `::`. */
  thisHost?: string;
  /** The IPv4 address an IPv6 translator or tunnel address reaches (NAT64, SIIT, 6to4, Teredo), canonical. */
  reaches?: string;
}

/** IPv6 prefixes that carry an IPv4 address, and where (the 16-bit part where its 32 bits start). */
const EMBEDDING: readonly { cidr: [ipaddr.IPv6, number]; at: number; invert?: boolean }[] = [
  { cidr: ipaddr.IPv6.parseCIDR("64:ff9b::/96"), at: 6 },
  { cidr: ipaddr.IPv6.parseCIDR("64:ff9b:1::/48"), at: 6 },
  { cidr: ipaddr.IPv6.parseCIDR("::ffff:0:0:0/96"), at: 6 },
  { cidr: ipaddr.IPv6.parseCIDR("2002::/16"), at: 1 },
  { cidr: ipaddr.IPv6.parseCIDR("2001::/32"), at: 6, invert: true },
];

/** The IPv4 address an IPv6 translator or tunnel address reaches, if it is one. */
function embeddedIPv4(addr: ipaddr.IPv6): ipaddr.IPv4 | undefined {
  for (const e of EMBEDDING) {
    if (!addr.match(e.cidr)) continue;
    const hi = addr.parts[e.at] ?? 0;
    const lo = addr.parts[e.at + 1] ?? 0;
    const word = e.invert ? [~hi & 0xffff, ~lo & 0xffff] : [hi, lo];
    return new ipaddr.IPv4(word.flatMap((w) => [w >> 8, w & 0xff]));
  }
  return undefined;
}

const THIS_NETWORK_V4 = ipaddr.parseCIDR("0.0.0.0/8");

/**
 * The canonical form of `text` when it is an IP address in any spelling the system resolver
 * would take as one, else undefined (a name). Brackets around an IPv6 literal are accepted.
 */
export function canonicalAddress(text: string): CanonicalAddress | undefined {
  let t = text.trim();
  if (t.startsWith("[") && t.endsWith("]")) t = t.slice(1, -1);
  const zone = t.indexOf("%");
  if (zone >= 0 && t.includes(":")) t = t.slice(0, zone);
  if (t === "" || !ipaddr.isValid(t)) return undefined;
  let addr: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    addr = ipaddr.parse(t);
  } catch {
    return undefined;
  }
  if (addr instanceof ipaddr.IPv6) {
    if (addr.isIPv4MappedAddress()) addr = addr.toIPv4Address();
    else if (isIPv4Compatible(addr)) addr = new ipaddr.IPv4(addr.toByteArray().slice(12));
  }
  const ip = addr.toString();
  if (addr instanceof ipaddr.IPv4) return addr.match(THIS_NETWORK_V4) ? { ip, thisHost: "127.0.0.1" } : { ip };
  if (addr.range() === "unspecified") return { ip, thisHost: "::1" };
  const reaches = embeddedIPv4(addr);
  return reaches ? { ip, reaches: reaches.toString() } : { ip };
}

/**
 * Every address a dial to `text` is judged as, the one finally reached first (allow rules must
 * match that one), then the other forms (a deny rule matching any of them refuses the dial):
 * `0.0.0.0` is `["127.0.0.1", "0.0.0.0"]`, `64:ff9b::a9fe:a9fe` is
 * `["169.254.169.254", "64:ff9b::a9fe:a9fe"]`. Undefined when `text` is no address.
 */
export function judgedAddresses(text: string): string[] | undefined {
  const address = canonicalAddress(text);
  if (address === undefined) return undefined;
  const reached = address.reaches === undefined ? undefined : canonicalAddress(address.reaches);
  const forms = [reached?.thisHost, reached?.ip, address.thisHost, address.ip];
  return [...new Set(forms.filter((f): f is string => f !== undefined))];
}

/**
 * `::a.b.c.d` (deprecated IPv4-compatible IPv6: the first 96 bits zero), except `::` and `::1`.
 * Judged as the IPv4 address, so a deny rule for it cannot be dodged this way.
 */
function isIPv4Compatible(addr: ipaddr.IPv6): boolean {
  const range = addr.range();
  return range !== "unspecified" && range !== "loopback" && addr.parts.slice(0, 6).every((p) => p === 0);
}
