/**
 * The agent's destination policy: `allow` and `deny` rules of `hosts`, `cidrs` and `ports`, deny wins,
 * and the built-in default ({@link DestinationPolicy.builtIn}). The rules: docs/guides/security.md
 * Design: docs/design/decisions.md#agent-identity-exact-grants-only-destination-policy-judged-after-resolution
 */
import { BlockList, isIP } from "node:net";
import { ClusterProxyError, DESTINATION_POLICY_REFUSAL, ErrorCodes } from "@cluster-proxy/api";
import { judgedAddresses } from "./destination-address.js";
import { errorMessage } from "@cluster-proxy/errors";

/** One rule as written in a policy file. */
export interface DestinationRuleSpec {
  hosts?: string[];
  cidrs?: string[];
  ports?: (number | string)[];
}

/** Text every refusal carries (defined in the error catalog); the proxy server recognises it (HTTP CONNECT answers 403). */
export { DESTINATION_POLICY_REFUSAL };

/** Error code of {@link DestinationRefusedError}. */
export const DESTINATION_REFUSED_CODE = ErrorCodes.destinationRefused;

/** A dial the destination policy refused; its message is sent to the client as DIAL_RSP.error. */
export class DestinationRefusedError extends ClusterProxyError<typeof ErrorCodes.destinationRefused> {
  constructor(message: string) {
    super(DESTINATION_REFUSED_CODE, message);
    this.name = "DestinationRefusedError";
  }
}

/** What is being dialled: a name (absent for IP literals), an IP address (absent before resolution), a port. */
export interface Destination {
  name?: string;
  ip?: string;
  port: number;
}

/** The verdict on one destination; `unknown` only when the answer depends on the not yet resolved IP. */
export type PolicyVerdict = { allowed: true } | { allowed: false; because: string } | { allowed: "unknown" };

const ALLOWED: PolicyVerdict = Object.freeze({ allowed: true });

interface Cidr {
  text: string;
  list: BlockList;
}

interface Rule {
  hosts?: string[];
  cidrs?: Cidr[];
  ports?: [number, number][];
}

/**
 * Link-local ranges, where cloud metadata services answer (169.254.169.254, fd00:ec2::254 on AWS
 * IPv6, metadata.google.internal), refused by the {@link DestinationPolicy.builtIn} policy.
 */
export const METADATA_CIDRS: readonly string[] = ["169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128"];

/** Addresses that reach this host: loopback, and what Linux connects to the local host. */
export const THIS_HOST_CIDRS: readonly string[] = ["127.0.0.0/8", "::1/128", "0.0.0.0/8", "::/128"];

const NAME = /^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$/;

/** Lowercase a DNS name and drop one trailing dot. */
function normalizeName(name: string): string {
  const n = name.toLowerCase();
  return n.endsWith(".") ? n.slice(0, -1) : n;
}

/** An IPv4-mapped IPv6 address as its IPv4 form; anything else unchanged. */
function normalizeIp(ip: string): string {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  return m ? m[1]! : ip;
}

function parseHostPattern(text: unknown): string {
  if (typeof text !== "string") throw new Error(`${JSON.stringify(text)} is not a string`);
  if (text === "*") return "*";
  if (isIP(text) || (text.startsWith("[") && text.endsWith("]"))) {
    throw new Error(
      `"${text}" is an IP address: list addresses under "cidrs" (e.g. "${text}/${isIP(text) === 6 ? 128 : 32}")`,
    );
  }
  const name = normalizeName(text);
  const body = name.startsWith("*.") ? name.slice(2) : name;
  if (!NAME.test(body) || body.length > 253) {
    throw new Error(`"${text}" is not a host pattern (a DNS name, "*.suffix" or "*")`);
  }
  return name;
}

function parseCidr(text: unknown): Cidr {
  if (typeof text !== "string") throw new Error(`${JSON.stringify(text)} is not a string`);
  const slash = text.indexOf("/");
  const addr = normalizeIp(slash < 0 ? text : text.slice(0, slash));
  const family = isIP(addr);
  if (family === 0) throw new Error(`"${text}" is not a CIDR (e.g. 10.0.0.0/8 or fd00::/8)`);
  const max = family === 4 ? 32 : 128;
  const prefixText = slash < 0 ? String(max) : text.slice(slash + 1);
  if (!/^\d{1,3}$/.test(prefixText) || Number(prefixText) > max) {
    throw new Error(`"${text}" is not a CIDR (prefix length 0-${max} for IPv${family})`);
  }
  const list = new BlockList();
  list.addSubnet(addr, Number(prefixText), family === 4 ? "ipv4" : "ipv6");
  return { text, list };
}

function parsePort(value: unknown): [number, number] {
  const valid = (n: number): boolean => Number.isInteger(n) && n >= 1 && n <= 65535;
  if (typeof value === "number") {
    if (!valid(value)) throw new Error(`${value} is not a port (1-65535)`);
    return [value, value];
  }
  if (typeof value !== "string") throw new Error(`${JSON.stringify(value)} is not a port or "low-high" range`);
  const m = /^\s*(\d{1,5})\s*(?:-\s*(\d{1,5})\s*)?$/.exec(value);
  const low = m ? Number(m[1]) : NaN;
  const high = m?.[2] !== undefined ? Number(m[2]) : low;
  if (!m || !valid(low) || !valid(high) || high < low) {
    throw new Error(`"${value}" is not a port or "low-high" range (1-65535, low <= high)`);
  }
  return [low, high];
}

/** Run `parse` on each element of a list field, naming the entry in errors. */
function parseList<R>(where: string, value: unknown, parse: (v: unknown) => R): R[] {
  if (!Array.isArray(value) || value.length === 0) throw new Error(`${where}: must be a non-empty list`);
  return (value as unknown[]).map((v, i) => {
    try {
      return parse(v);
    } catch (err) {
      throw new Error(`${where}[${i}]: ${errorMessage(err)}`, { cause: err });
    }
  });
}

function parseRule(where: string, value: unknown): Rule {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new Error(`${where}: a rule must be an object with "hosts", "cidrs" and/or "ports"`);
  }
  const spec = value as Record<string, unknown>;
  for (const key of Object.keys(spec)) {
    if (!["hosts", "cidrs", "ports"].includes(key)) {
      throw new Error(`${where}: unknown key "${key}" (a rule has "hosts", "cidrs" and/or "ports")`);
    }
  }
  const rule: Rule = {};
  if (spec.hosts !== undefined) rule.hosts = parseList(`${where}.hosts`, spec.hosts, parseHostPattern);
  if (spec.cidrs !== undefined) rule.cidrs = parseList(`${where}.cidrs`, spec.cidrs, parseCidr);
  if (spec.ports !== undefined) rule.ports = parseList(`${where}.ports`, spec.ports, parsePort);
  if (!rule.hosts && !rule.cidrs && !rule.ports) {
    throw new Error(`${where}: an empty rule would match everything; give "hosts", "cidrs" and/or "ports"`);
  }
  return rule;
}

function hostMatches(pattern: string, name: string): boolean {
  if (pattern === "*") return true;
  if (pattern.startsWith("*.")) return name.endsWith(pattern.slice(1)) && name.length > pattern.length - 1;
  return name === pattern;
}

function ipIn(cidr: Cidr, ip: string): boolean {
  const family = isIP(ip);
  return family !== 0 && cidr.list.check(ip, family === 4 ? "ipv4" : "ipv6");
}

/** Three-valued match: `unknown` when only the (unresolved) IP could decide. */
function ruleMatches(rule: Rule, d: Destination): boolean | "unknown" {
  if (rule.ports && !rule.ports.some(([lo, hi]) => d.port >= lo && d.port <= hi)) return false;
  if (rule.hosts) {
    const name = d.name;
    if (name === undefined || !rule.hosts.some((p) => hostMatches(p, name))) return false;
  }
  if (rule.cidrs) {
    if (d.ip === undefined) return "unknown";
    const ip = d.ip;
    if (!rule.cidrs.some((c) => ipIn(c, ip))) return false;
  }
  return true;
}

function describeRule(rule: Rule): string {
  const what: string[] = [];
  if (rule.hosts) what.push(rule.hosts.join("|"));
  if (rule.cidrs) what.push((rule.hosts ? "in " : "") + rule.cidrs.map((c) => c.text).join("|"));
  const ports = rule.ports?.map(([lo, hi]) => (lo === hi ? String(lo) : `${lo}-${hi}`)).join(",");
  return `${what.length ? what.join(" ") : "*"}${ports ? `:${ports}` : ""}`;
}

function describeRules(rules: readonly Rule[]): string {
  const text = rules.map(describeRule).join("; ");
  return text.length > 300 ? `${text.slice(0, 297)}...` : text;
}

/**
 * Verdicts a policy keeps, by destination: a policy is immutable, so a verdict once reached holds,
 * and an agent dials the same few destinations over and over (the apiserver, a handful of
 * services). Judging one again parses and canonicalises the address and walks every rule (~10-20
 * µs a dial, measured under dial churn). Past this many destinations the memo starts over, so a
 * client dialling ever new addresses costs no more memory than this.
 */
export const POLICY_MEMO_ENTRIES = 1024;

/** A parsed, immutable destination policy. */
export class DestinationPolicy {
  /** Verdicts by destination ({@link POLICY_MEMO_ENTRIES}). */
  private readonly memo = new Map<string, PolicyVerdict>();

  private constructor(
    private readonly allow: readonly Rule[] | undefined,
    private readonly deny: readonly Rule[],
    /** How refusals name the deny rules (the built-in policy's are named, not numbered). */
    private readonly denyNames?: readonly string[],
  ) {}

  /** The open policy: everything allowed (the default, as in Go). */
  static open(): DestinationPolicy {
    return new DestinationPolicy(undefined, []);
  }

  /**
   * Parse a policy object (a parsed JSON file) plus extra allow rules. Throws a plain Error whose
   * message names the entry (`allow[1].cidrs[0]: ...`); callers add the file or flag.
   */
  static parse(spec: unknown, extraAllow: readonly DestinationRuleSpec[] = []): DestinationPolicy {
    if (typeof spec !== "object" || spec === null || Array.isArray(spec)) {
      throw new Error('the policy must be a JSON object like {"allow": [...], "deny": [...]}');
    }
    const obj = spec as Record<string, unknown>;
    for (const key of Object.keys(obj)) {
      if (key !== "allow" && key !== "deny") throw new Error(`unknown key "${key}" (a policy has "allow" and "deny")`);
    }
    const rules = (key: "allow" | "deny"): Rule[] | undefined => {
      const list = obj[key];
      if (list === undefined) return undefined;
      if (!Array.isArray(list)) throw new Error(`${key}: must be a list of rules`);
      return list.map((r, i) => parseRule(`${key}[${i}]`, r));
    };
    let allow = rules("allow");
    const extra = extraAllow.map((r, i) => parseRule(`extra allow rule ${i}`, r));
    if (extra.length) allow = [...(allow ?? []), ...extra];
    return new DestinationPolicy(allow, rules("deny") ?? []);
  }

  /**
   * The agent's policy when none is configured (no `--destination-policy`, no
   * `--allow-destinations`): everything is allowed except
   * - link-local addresses, where cloud metadata services live ({@link METADATA_CIDRS}), and
   * - the agent's own listening `ports` on this host: loopback, `0.0.0.0/8`, `::` and the
   *   `localAddresses` of its network interfaces (so a hub client cannot read the agent's
   *   `/metrics` or `/debug` endpoints through its own tunnel).
   * `--allow-destinations '*'` opts out (Go's fully open agent).
   */
  static builtIn(ports: readonly number[], localAddresses: readonly string[] = []): DestinationPolicy {
    const deny: Rule[] = [{ cidrs: METADATA_CIDRS.map(parseCidr) }];
    const names = [
      "the default policy (link-local and cloud metadata addresses; set --destination-policy or --allow-destinations, '*' for every destination)",
    ];
    const own = ports.filter((p) => Number.isInteger(p) && p >= 1 && p <= 65535);
    if (own.length) {
      const local = [
        ...THIS_HOST_CIDRS,
        ...localAddresses.filter((a) => isIP(a)).map((a) => `${a}/${isIP(a) === 6 ? 128 : 32}`),
      ];
      deny.push({ cidrs: local.map(parseCidr), ports: own.map((p): [number, number] => [p, p]) });
      names.push(
        "the default policy (the agent's own ports on this host; set --destination-policy or --allow-destinations, '*' for every destination)",
      );
    }
    return new DestinationPolicy(undefined, deny, names);
  }

  /** True when the policy allows every destination (no rules at all). */
  get isOpen(): boolean {
    return this.allow === undefined && this.deny.length === 0;
  }

  /** Judge a destination. With `ip` absent the answer may be `unknown` (resolve and ask again). */
  check(d: Destination): PolicyVerdict {
    if (this.isOpen) return ALLOWED;
    // "\n" is in no host name, address or port: the key names one destination.
    const key = `${d.name === undefined ? "" : `n${d.name}`}\n${d.ip ?? ""}\n${d.port}`;
    let verdict = this.memo.get(key);
    if (verdict === undefined) {
      verdict = this.judge(d);
      if (this.memo.size >= POLICY_MEMO_ENTRIES) this.memo.clear();
      this.memo.set(key, verdict);
    }
    return verdict;
  }

  private judge(d: Destination): PolicyVerdict {
    const name = d.name === undefined ? {} : { name: normalizeName(d.name) };
    // The address finally reached decides (loopback for 0.0.0.0/8 and ::, the IPv4 address of a
    // NAT64 or 6to4 one); the other forms are judged by the deny rules too, so a rule written
    // for them still holds.
    const ips = d.ip === undefined ? [undefined] : (judgedAddresses(d.ip) ?? [d.ip]);
    const forms: Destination[] = ips.map((ip) => ({ port: d.port, ...name, ...(ip === undefined ? {} : { ip }) }));
    const effective = forms[0] ?? { port: d.port, ...name };
    let unknown = false;
    for (const [i, rule] of this.deny.entries()) {
      const matches = forms.map((f) => ruleMatches(rule, f));
      if (matches.includes(true)) {
        return { allowed: false, because: `denied by ${this.ruleName("deny", i)}: ${describeRule(rule)}` };
      }
      if (matches.includes("unknown")) unknown = true;
    }
    if (this.allow !== undefined) {
      let allowUnknown = false;
      for (const rule of this.allow) {
        const m = ruleMatches(rule, effective);
        if (m === true) return unknown ? { allowed: "unknown" } : { allowed: true };
        if (m === "unknown") allowUnknown = true;
      }
      if (!allowUnknown) {
        const allowed = this.allow.length ? describeRules(this.allow) : "nothing";
        return { allowed: false, because: `allowed: ${allowed}` };
      }
      return { allowed: "unknown" };
    }
    return unknown ? { allowed: "unknown" } : { allowed: true };
  }

  private ruleName(list: "deny", index: number): string {
    return this.denyNames?.[index] ?? `${list}[${index}]`;
  }

  /** A one-line summary for logs. */
  describe(): string {
    if (this.isOpen) return "open (every destination allowed)";
    const allow = this.allow === undefined ? "everything" : describeRules(this.allow) || "nothing";
    return `allow ${allow}${this.deny.length ? `; deny ${describeRules(this.deny)}` : ""}`;
  }
}

/**
 * Parse one `--allow-destinations` entry: `<host pattern | CIDR | *>[:<port or low-high>]`.
 * IPv6 addresses and CIDRs take brackets when a port follows (`[fd00::/8]:443`); an unbracketed
 * entry with several colons is an IPv6 CIDR without port. `*` alone means any destination.
 */
export function parseAllowEntry(entry: string): DestinationRuleSpec {
  let what = entry.trim();
  let ports: string | undefined;
  if (what.startsWith("[")) {
    const end = what.indexOf("]");
    if (end < 0) throw new Error(`"${entry}" has "[" without "]"`);
    const rest = what.slice(end + 1);
    if (rest !== "" && !rest.startsWith(":")) throw new Error(`"${entry}": expected ":<port>" after "]"`);
    ports = rest === "" ? undefined : rest.slice(1);
    what = what.slice(1, end);
  } else if (what.split(":").length === 2) {
    const colon = what.indexOf(":");
    ports = what.slice(colon + 1);
    what = what.slice(0, colon);
  }
  const rule: DestinationRuleSpec = {};
  if (ports !== undefined && ports !== "*") rule.ports = [ports];
  if (what === "") throw new Error(`"${entry}" names no host or CIDR (use * for any)`);
  if (what !== "*") {
    if (what.includes("/") || isIP(what)) rule.cidrs = [what];
    else rule.hosts = [what];
  }
  if (!rule.hosts && !rule.cidrs && !rule.ports) rule.ports = ["1-65535"];
  return rule;
}
