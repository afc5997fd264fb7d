/** Dial addresses (`host:port`) and the keys the `destHost` strategy matches them by. */

/**
 * The destHost routing key of a dial address, with the Go server's exact rules: at most one `:`
 * -> the part before it; more colons (IPv6) with a `[` -> strip the last `:port`; then trim
 * `[` and `]`. `fd00::1:443` (unbracketed) keeps its port and so matches nothing.
 */
export function destHostKey(address: string): string {
  let host = address;
  const first = address.indexOf(":");
  if (first >= 0) {
    if (address.indexOf(":", first + 1) < 0) host = address.slice(0, first);
    else if (address.includes("[")) host = address.slice(0, address.lastIndexOf(":"));
  }
  // (once per dial: skip the regexes for the usual bracket-free host)
  if (host.startsWith("[") || host.endsWith("]")) host = host.replace(/^\[+/, "").replace(/\]+$/, "");
  return host;
}

/** A `host:port` split into parts; IPv6 hosts come without brackets. */
export interface HostPort {
  host: string;
  port: number;
}

/**
 * Parse `host:port` (`[v6]:port` for IPv6). Returns undefined when the port is missing or not
 * an integer in 1-65535.
 */
export function parseHostPort(address: string): HostPort | undefined {
  let host: string;
  let portText: string;
  if (address.startsWith("[")) {
    const end = address.indexOf("]");
    if (end < 0 || address[end + 1] !== ":") return undefined;
    host = address.slice(1, end);
    portText = address.slice(end + 2);
  } else {
    const i = address.lastIndexOf(":");
    if (i <= 0 || address.indexOf(":") !== i) return undefined;
    host = address.slice(0, i);
    portText = address.slice(i + 1);
  }
  if (!/^\d{1,5}$/.test(portText)) return undefined;
  const port = Number(portText);
  if (port < 1 || port > 65535 || host === "") return undefined;
  return { host, port };
}

/** Join host and port, bracketing IPv6 literals. */
export function joinHostPort(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}
