/**
 * What a command needs from its process: output streams, environment and signals. Tests pass
 * their own to run commands in-process.
 */
import { ClusterProxyError, ErrorCodes } from "@cluster-proxy/api";
import type { SignalSource } from "./commands/shutdown-signals.js";

/** The process-facing side of a command run. */
export interface CliContext {
  /** Human-facing output (help, progress, instructions). */
  stdout(text: string): void;
  /** Error lines (logs go to fd 2 through pino, not here). */
  stderr(text: string): void;
  /** Environment the option schemas read. */
  env: NodeJS.ProcessEnv;
  /** Where SIGTERM/SIGINT come from. */
  signals: SignalSource;
  /** Use ANSI colors in human-facing output. */
  colors: boolean;
  /** File descriptor pino writes JSON logs to (default 2). */
  logFd?: number;
  /** Where relative defaults (the local hub's `./.cluster-proxy/hub.json`) are looked for (default: process.cwd()). */
  cwd?: string;
  /**
   * Test seam, not a user surface: `up` hands its in-process demo agents to it once the hub is
   * ready, so a test can stop one cluster's agent and start it again (the cluster goes away and
   * comes back). Other commands ignore it.
   */
  upAgents?: (agents: UpAgents) => void;
}

/** The demo agents of a running `up` (see {@link CliContext.upAgents}). */
export interface UpAgents {
  /** Stop the agent of `cluster` (its tunnel closes); resolves once it is closed. */
  stop(cluster: string): Promise<void>;
  /** Start a new agent for `cluster` with the same options; resolves once started (it connects soon after). */
  start(cluster: string): Promise<void>;
}

/** The context of the real process. */
export function processContext(): CliContext {
  return {
    stdout: (text) => void process.stdout.write(text),
    stderr: (text) => void process.stderr.write(text),
    env: process.env,
    signals: process,
    colors: process.stdout.isTTY && !("NO_COLOR" in process.env),
  };
}

/**
 * A command failed while running and its message explains why (exit status 1, see
 * exit-status.ts). Wrong flags or files are a `ConfigError` instead (exit status 2).
 */
export class CommandFailure extends ClusterProxyError<typeof ErrorCodes.command> {
  constructor(message: string, options?: ErrorOptions) {
    super(ErrorCodes.command, message, options);
    this.name = "CommandFailure";
  }
}
