// Test helper: runs `cluster-proxy addon-manager` from the built CLI as a child process of the test
// (in the test's own network namespace, reaching the hub apiserver through the fixture's forwarder)
// and exposes its JSON log lines.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { promisify } from "node:util";
import { once } from "node:events";
import { join } from "node:path";
import { NODE_FLAGS } from "@cluster-proxy/cli";
import { repoRoot } from "../env/config.js";
import { waitFor } from "../env/exec.js";
import { errorMessage } from "@cluster-proxy/errors";

const execFileAsync = promisify(execFile);

export interface LogLine {
  level: number;
  msg: string;
  [key: string]: unknown;
}

export class ManagerProcess {
  readonly logs: LogLine[] = [];
  private readonly child: ChildProcess;
  readonly exited: Promise<number | null>;

  constructor(
    readonly name: string,
    kubeconfig: string,
    namespace: string,
    extraArgs: string[] = [],
    /**
     * Run inside this network namespace (`ip netns exec`), e.g. the hub's, where proxy-server pod
     * addresses route as they do for a manager pod; the kubeconfig must then use addresses that
     * route there. Default: the test's own namespace.
     */
    private readonly netns?: string,
  ) {
    const command = [
      process.execPath,
      ...NODE_FLAGS,
      join(repoRoot, "packages", "cli", "dist", "main.js"),
      "addon-manager",
      `--kubeconfig=${kubeconfig}`,
      `--namespace=${namespace}`,
      `--identity=${name}`,
      "--health-probe-bind-address=127.0.0.1:0",
      "--metrics-bind-address=127.0.0.1:0",
      "--log-level=debug",
      ...extraArgs,
    ];
    this.child = netns
      ? spawn("ip", ["netns", "exec", netns, ...command], { stdio: ["ignore", "ignore", "pipe"] })
      : spawn(command[0]!, command.slice(1), { stdio: ["ignore", "ignore", "pipe"] });
    let buffered = "";
    this.child.stderr!.setEncoding("utf8");
    this.child.stderr!.on("data", (chunk: string) => {
      buffered += chunk;
      for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        try {
          this.logs.push(JSON.parse(line) as LogLine);
        } catch {
          this.logs.push({ level: 50, msg: line });
        }
      }
    });
    this.exited = once(this.child, "exit").then(([code]) => code as number | null);
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** Resolves with the first log line matching `msg`; fails with the log tail after `timeoutMs`. */
  async waitForLog(msg: string | RegExp, timeoutMs: number): Promise<LogLine> {
    const match = (l: LogLine): boolean => (typeof msg === "string" ? l.msg === msg : msg.test(l.msg));
    try {
      return await waitFor(`"${String(msg)}" in ${this.name}'s log`, timeoutMs, () => this.logs.find(match), 100);
    } catch (err) {
      throw new Error(`${errorMessage(err)}\n--- ${this.name} log tail ---\n${this.tail()}`, { cause: err });
    }
  }

  tail(n = 30): string {
    return this.logs
      .slice(-n)
      .map((l) => JSON.stringify(l))
      .join("\n");
  }

  async health(path: "/healthz" | "/readyz"): Promise<number> {
    const started = this.logs.find((l) => l.msg === "addon manager started");
    const port = started?.healthPort as number | undefined;
    if (!port) throw new Error(`${this.name} has not reported its health port`);
    const url = `http://127.0.0.1:${port}${path}`;
    if (!this.netns) return (await fetch(url)).status;
    // Its loopback is the other namespace's: ask from there.
    const { stdout } = await execFileAsync(
      "ip",
      [
        "netns",
        "exec",
        this.netns,
        process.execPath,
        "-e",
        `fetch(${JSON.stringify(url)}).then((r) => console.log(r.status))`,
      ],
      { timeout: 15_000 },
    );
    return Number(stdout.trim());
  }

  kill(signal: NodeJS.Signals): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
  }

  /** SIGTERM, then SIGKILL after `graceMs`. */
  async stop(graceMs = 10_000): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.kill("SIGTERM");
    const timer = setTimeout(() => this.kill("SIGKILL"), graceMs);
    await this.exited;
    clearTimeout(timer);
  }
}
