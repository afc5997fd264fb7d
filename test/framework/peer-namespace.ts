/**
 * A peer in a network namespace of the test's own, joined to the test runner's namespace by a
 * veth pair, that can be cut off silently: an nftables drop of everything in and out of it (no
 * FIN, no RST, no ICMP), as a host that vanished or a network that dropped it looks from the other
 * side. The runner's side of the link is `hostAddress`; the peer's is `peerAddress`.
 */
import { spawnSync } from "node:child_process";
import { prerequisiteSkip } from "./prerequisites.js";

/** Why this machine cannot cut a peer off silently (a network namespace and nftables), or undefined. */
function blackholeUnavailable(): string | undefined {
  if (process.platform !== "linux" || process.getuid?.() !== 0) return "needs root on Linux (network namespaces)";
  if (spawnSync("ip", ["-V"]).status !== 0) return "needs iproute2 ('ip')";
  if (spawnSync("sh", ["-c", "command -v nft"]).status !== 0) return "needs nftables ('nft')";
  return undefined;
}

/** The suites' skip (or, under `CI=true`, failure) when {@link PeerNamespace} cannot work here. */
export const blackholePrerequisite = prerequisiteSkip(blackholeUnavailable());

/** Run a command, throwing with its stderr when it fails (bounded: 10 s). */
export function sh(cmd: string, args: string[], input?: string): void {
  const r = spawnSync(cmd, args, { encoding: "utf8", input, timeout: 10_000 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed: ${r.stderr || r.error?.message || r.status}`);
}

/** A namespace with one veth to the runner's namespace; {@link close} deletes both. */
export class PeerNamespace {
  readonly name: string;
  readonly hostAddress: string;
  readonly peerAddress: string;
  private readonly vethHost: string;

  /**
   * @param tag distinguishes namespaces of one process (a short word: it is part of interface names)
   * @param subnet the first three octets of a /30 only this test uses, e.g. `10.203.0`
   */
  constructor(tag: string, subnet: string) {
    this.name = `cp${tag}${process.pid}`;
    this.vethHost = `${this.name}a`.slice(0, 15);
    const vethPeer = `${this.name}b`.slice(0, 15);
    this.hostAddress = `${subnet}.1`;
    this.peerAddress = `${subnet}.2`;
    sh("ip", ["netns", "add", this.name]);
    try {
      sh("ip", ["-n", this.name, "link", "set", "lo", "up"]);
      sh("ip", ["link", "add", this.vethHost, "type", "veth", "peer", "name", vethPeer, "netns", this.name]);
      sh("ip", ["addr", "add", `${this.hostAddress}/30`, "dev", this.vethHost]);
      sh("ip", ["link", "set", this.vethHost, "up"]);
      sh("ip", ["-n", this.name, "addr", "add", `${this.peerAddress}/30`, "dev", vethPeer]);
      sh("ip", ["-n", this.name, "link", "set", vethPeer, "up"]);
    } catch (err) {
      this.close();
      throw err;
    }
  }

  /** The command line that runs `argv` inside the namespace. */
  exec(argv: string[]): { cmd: string; args: string[] } {
    return { cmd: "ip", args: ["netns", "exec", this.name, ...argv] };
  }

  /** From now on the namespace drops every packet in and out, silently. */
  blackhole(): void {
    sh(
      "ip",
      ["netns", "exec", this.name, "nft", "-f", "-"],
      "table inet blackhole {\n chain in { type filter hook input priority 0; policy drop; }\n chain out { type filter hook output priority 0; policy drop; }\n}\n",
    );
  }

  /** Delete the namespace (and with it the veth pair); safe to call twice. */
  close(): void {
    spawnSync("ip", ["netns", "del", this.name], { timeout: 10_000 });
  }
}
