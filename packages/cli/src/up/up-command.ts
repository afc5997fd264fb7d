/**
 * `cluster-proxy up`: a complete local hub in one process, no Kubernetes needed: certificates, a
 * ProxyServer, per demo cluster a sample service and a ProxyAgent, the fleet view; ports from `--port-base`.
 * Guide: docs/guides/hub-operations.md#cluster-proxy-up-trying-kubectl-without-kubernetes
 */
import { existsSync } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import { delimiter, dirname, isAbsolute, join, relative, resolve } from "node:path";
import { isatty } from "node:tty";
import { fileURLToPath } from "node:url";
import { setTimeout as delay } from "node:timers/promises";
import type { Command } from "commander";
import pc from "picocolors";
import {
  ConfigError,
  parseAgentOptions,
  parseServerOptions,
  parseUpOptions,
  upOptionsSchema,
  type UpOptions,
} from "@cluster-proxy/api";
import type { Logger } from "@cluster-proxy/kit";

import { CommandFailure, type CliContext, type UpAgents } from "../cli-context.js";
import { probeThroughConnect } from "../hub/cluster-probe.js";
import { DEFAULT_STATE_DIR, profilePath, removeLocalHubProfile, writeLocalHubProfile } from "./local-hub.js";
import { createLogger } from "../commands/log-output.js";
import { logMissingNodeFlags } from "../node-flags.js";
import { registerOptionCommand } from "../commands/option-command.js";
import { PortInUseError, portInUse } from "./port-conflicts.js";
import { startSampleService, type SampleService } from "./sample-service.js";
import { ensureStandinCerts, standinToken } from "./standin-apiserver.js";
import { superviseComponent } from "../commands/run-component.js";
import { startTlsFrontDoor, type TlsFrontDoor } from "./tls-front-door.js";
import { errorMessage } from "@cluster-proxy/errors";

/** The ports `up` uses for a port base, with what each one is. */
export function upPorts(base: number) {
  return {
    connectPlain: { port: base, what: "HTTP CONNECT (plain)", offset: 0 },
    grpc: { port: base + 10, what: "gRPC front door", offset: 10 },
    agent: { port: base + 11, what: "agent port", offset: 11 },
    health: { port: base + 12, what: "health port", offset: 12 },
    connectTls: { port: base + 13, what: "HTTP CONNECT (mTLS)", offset: 13 },
    admin: { port: base + 15, what: "admin port", offset: 15 },
    fleet: { port: base + 16, what: "fleet view", offset: 16 },
  };
}

const EXAMPLE = `
Example:
  cluster-proxy up                      # clusters east and west, CONNECT on 127.0.0.1:8080
  curl -p -x http://127.0.0.1:8080 http://east:80/
  cluster-proxy up --clusters prod,7staging --port-base 18080 --state-dir /tmp/cp

Everything runs in this process on 127.0.0.1; stop it with Ctrl-C. Certificates are kept in
--state-dir and reused next time.
`;

/** Show `path` relative to the working directory when it is below it. */
function displayPath(path: string): string {
  const rel = relative(process.cwd(), path);
  return rel !== "" && !rel.startsWith("..") && !isAbsolute(rel) ? rel : path;
}

/** Everything `up` started, closed in reverse order. */
class Stack {
  private readonly closers: { what: string; close: () => Promise<void> }[] = [];
  constructor(private readonly log: Logger) {}
  push(what: string, close: () => Promise<void>): void {
    this.closers.push({ what, close });
  }
  async closeAll(): Promise<void> {
    for (const c of this.closers.splice(0).reverse()) {
      try {
        await c.close();
      } catch (err) {
        this.log.warn({ err: errorMessage(err), what: c.what }, "close failed");
      }
    }
  }
}

interface ReadyHub {
  paths: { ca: string; clientCert: string; clientKey: string; apiserverCa: string };
  ports: ReturnType<typeof upPorts>;
  services: SampleService[];
  /** The state directory (absolute). */
  stateDir: string;
  /** The fleet view's page. */
  fleetUrl: string;
  /**
   * The directory holding the `cluster-proxy` command of this checkout (node_modules/.bin), when
   * the user's PATH may lack it; undefined when nothing needs saying.
   */
  binDir?: string;
}

/**
 * node_modules/.bin of the checkout this command runs from, when `cluster-proxy` there is not on
 * PATH as the user's shell has it (npm run puts it on PATH for its own child only).
 */
export function binDirHint(env: NodeJS.ProcessEnv): string | undefined {
  const bin = resolve(dirname(fileURLToPath(import.meta.url)), "../../../../node_modules/.bin");
  if (!existsSync(join(bin, "cluster-proxy"))) return undefined;
  const path = (env.PATH ?? "").split(delimiter).filter((d) => d !== "");
  // Under npm run, npm prepended its node_modules/.bin directories: the user's shell lacks them.
  const userPath = env.npm_lifecycle_event !== undefined ? path.filter((d) => !d.endsWith("node_modules/.bin")) : path;
  return userPath.some((d) => resolve(d) === bin) ? undefined : bin;
}

/** The instructions printed once every cluster answers. */
export function readyText(hub: ReadyHub, colors: boolean): string {
  const c = pc.createColors(colors);
  const { ports, paths } = hub;
  const ca = displayPath(paths.ca);
  const cert = displayPath(paths.clientCert);
  const key = displayPath(paths.clientKey);
  const first = hub.services[0]?.cluster ?? "east";
  const lines = ["", c.bold(c.green("cluster-proxy hub is up.")) + " Reach each demo cluster through it:", ""];
  for (const s of hub.services) {
    lines.push(`${c.bold(s.cluster)}  (its sample service is 127.0.0.1:${s.port}, reached as ${s.cluster}:80)`);
    lines.push(`  curl -p -x http://127.0.0.1:${ports.connectPlain.port} http://${s.cluster}:80/`);
    lines.push(
      `  curl -p -x https://127.0.0.1:${ports.connectTls.port} --proxy-cacert ${ca} --proxy-cert ${cert} --proxy-key ${key} http://${s.cluster}:80/`,
    );
    lines.push("");
  }
  lines.push(`From TypeScript/JavaScript (${c.bold("@cluster-proxy/client")}, gRPC front door with mTLS):`);
  lines.push("");
  lines.push(
    c.cyan(
      [
        `  import { dial, loadProxyTls } from "@cluster-proxy/client";`,
        `  const tls = loadProxyTls({ caFile: "${ca}", certFile: "${cert}", keyFile: "${key}" });`,
        `  const socket = await dial("${first}:80", { proxy: { host: "127.0.0.1", port: ${ports.grpc.port}, ...tls } });`,
        `  socket.write("GET / HTTP/1.1\\r\\nHost: ${first}\\r\\nConnection: close\\r\\n\\r\\n");`,
        `  socket.pipe(process.stdout);`,
      ].join("\n"),
    ),
  );
  lines.push("");
  lines.push("");
  // health, kubeconfig and port-forward find this hub by its profile: ./.cluster-proxy/hub.json
  // by default, else --hub-profile.
  const profileFlag =
    resolve(hub.stateDir) === resolve(DEFAULT_STATE_DIR)
      ? ""
      : ` --hub-profile ${displayPath(profilePath(hub.stateDir))}`;
  const kubeconfig = displayPath(join(hub.stateDir, `${first}.kubeconfig`));
  if (hub.binDir) {
    lines.push(
      `The ${c.bold("cluster-proxy")} command below is this checkout's; put it on PATH in your shell first (or write npx cluster-proxy in the checkout):`,
    );
    lines.push("");
    lines.push(`  export PATH=${hub.binDir}:$PATH`);
    lines.push("");
  }
  lines.push(
    `kubectl through the hub (each demo cluster has a stand-in kube-apiserver answering ${c.bold("kubectl get namespaces")}):`,
  );
  lines.push("");
  lines.push(
    `  cluster-proxy kubeconfig --cluster ${first} --token ${standinToken(first)} --output ${kubeconfig}${profileFlag}`,
  );
  lines.push(`  kubectl --kubeconfig ${kubeconfig} get namespaces`);
  lines.push(`  kubectl --kubeconfig ${kubeconfig} exec sample -- hostname`);
  lines.push("");
  lines.push("Health of every demo cluster, and a local port forwarded into one (until Ctrl-C):");
  lines.push("");
  lines.push(`  cluster-proxy health${profileFlag}`);
  lines.push(`  cluster-proxy port-forward --cluster ${first} 0:${first}:80${profileFlag}`);
  lines.push("");
  lines.push(`${c.bold("Fleet view")} (live): ${hub.fleetUrl}`);
  lines.push("");
  lines.push(
    `Also: any host:port in a cluster as <host>.<cluster>:<port>; health at http://127.0.0.1:${ports.health.port}/readyz, metrics at /metrics.`,
  );
  return lines.join("\n") + "\n";
}

async function waitUntilReachable(
  connectPort: number,
  cluster: string,
  deadline: number,
  abort: AbortSignal,
  logsAt: string,
): Promise<void> {
  let wait = 25;
  let last = "";
  while (!abort.aborted) {
    const left = deadline - Date.now();
    if (left <= 0) break;
    const result = await probeThroughConnect(
      { host: "127.0.0.1", port: connectPort },
      `${cluster}:80`,
      `hello from ${cluster}`,
      Math.min(left, 5_000),
    );
    if (result.ok) return;
    last = result.reason;
    await delay(Math.min(wait, Math.max(0, deadline - Date.now())), undefined, { signal: abort }).catch(
      () => undefined,
    );
    wait = Math.min(wait * 2, 500);
  }
  throw new CommandFailure(
    `cluster ${cluster} did not answer through the hub in time${last ? ` (last answer: ${last})` : ""}; see the logs on ${logsAt} (--log-level info)`,
  );
}

function portConflict(err: unknown, ports: ReturnType<typeof upPorts>, base: number): string | undefined {
  const inUse = portInUse(err);
  if (!inUse) return undefined;
  const role = Object.values(ports).find((p) => p.port === inUse.port);
  const what = role ? ` (${role.what}, --port-base ${base} + ${role.offset})` : "";
  return `port ${inUse.port}${what} on 127.0.0.1 is already in use (another cluster-proxy up?): stop what holds it or choose other ports with --port-base, e.g. --port-base ${base + 10_000 <= 65_500 ? base + 10_000 : 18080}`;
}

/** --state-dir must be a directory (or not exist yet): say so, naming the flag. */
async function checkStateDir(given: string, stateDir: string): Promise<void> {
  const st = await stat(stateDir).catch(() => undefined);
  if (st && !st.isDirectory())
    throw new ConfigError(
      `--state-dir ${given}: not a directory (a file is in the way; remove it or choose another path)`,
    );
}

/** A failure to read or write the state directory, as a message naming --state-dir (and --force). */
export function stateDirError(given: string, err: unknown): Error {
  const e = err as NodeJS.ErrnoException;
  if (e.code === "ENOTDIR" || e.code === "EACCES" || e.code === "EPERM" || e.code === "EROFS" || e.code === "EEXIST")
    return new ConfigError(
      `--state-dir ${given}: cannot write the certificates there (${e.code}${e.path ? ` at ${e.path}` : ""}); choose another directory`,
      { cause: err },
    );
  if (e instanceof Error && /\buse force\b/.test(e.message))
    return new ConfigError(
      `--state-dir ${given}: ${e.message.replace(/\buse force( to replace it)?/, "run up again with --force to replace them")}`,
      { cause: err },
    );
  return e instanceof Error ? e : new Error(String(err));
}

/** A demo cluster's agent slot: the running agent (none while stopped) and how to make one. */
interface AgentSlot {
  agent: { start(): Promise<unknown>; close(): Promise<void> } | undefined;
  make(): { start(): Promise<unknown>; close(): Promise<void> };
}

/** Stop and start the demo agents (the test seam of {@link CliContext.upAgents}). */
function agentControl(slots: ReadonlyMap<string, AgentSlot>): UpAgents {
  const slot = (cluster: string): AgentSlot => {
    const s = slots.get(cluster);
    if (!s) throw new Error(`no demo cluster ${cluster}`);
    return s;
  };
  return {
    stop: async (cluster) => {
      const s = slot(cluster);
      const running = s.agent;
      s.agent = undefined;
      await running?.close();
    },
    start: async (cluster) => {
      const s = slot(cluster);
      if (s.agent) return;
      const agent = s.make();
      s.agent = agent;
      await agent.start();
    },
  };
}

/** Register `up` on `program`. */
export function registerUpCommand(program: Command, ctx: CliContext, setExitCode: (code: number) => void): void {
  registerOptionCommand(program, ctx, {
    name: "up",
    summary: "start a local hub with demo clusters (no Kubernetes needed)",
    description:
      "Start a local hub in one process: a proxy-server, and for each demo cluster a sample HTTP service and a proxy-agent. Prints how to reach every cluster (curl and SDK), then runs until Ctrl-C.",
    example: EXAMPLE,
    schema: upOptionsSchema,
    run: async (options) => setExitCode(await runUp(options, ctx)),
  });
}

/** Run `up` with its options (validated here by the `up` schema); resolves with the exit code. */
export async function runUp(options: UpOptions, ctx: CliContext): Promise<number> {
  const c = pc.createColors(ctx.colors);
  const say = (line: string): void => ctx.stdout(line + "\n");
  const { clusters: given, portBase: base } = parseUpOptions(options);
  const clusters = [...new Set(given)];
  const ports = upPorts(base);
  const pki = await import("@cluster-proxy/pki");

  const stateDir = resolve(options.stateDir);
  const certDir = join(stateDir, "certs");
  await checkStateDir(options.stateDir, stateDir);
  say(`${c.bold("cluster-proxy up")}: state in ${displayPath(stateDir)}`);
  const { paths, written, migrated } = await pki
    .ensureStandaloneCerts(certDir, {
      clusters,
      hubHosts: ["localhost", "127.0.0.1", "::1"],
      force: options.force,
    })
    .catch((err: unknown) => {
      throw stateDirError(options.stateDir, err);
    });
  if (migrated)
    say(
      `  certificates: ${displayPath(certDir)} had one CA for everything (older cluster-proxy); split it: ca.crt now signs only the hub's serving certificate, client-ca.crt the client certificates, agent-ca.crt the agent certificates (client.crt and the agent certificates were re-issued)`,
    );
  say(
    written.length === 0
      ? `  certificates: reused ${displayPath(certDir)}`
      : `  certificates: wrote ${written.length} files to ${displayPath(certDir)}`,
  );

  // On a terminal the logs go to a file: they would tear the instructions apart.
  const logFile = ctx.logFd === undefined && isatty(2) ? join(stateDir, "up.log") : undefined;
  const log = await createLogger(
    logFile
      ? { logLevel: options.logLevel, logtostderr: false, logFile, stderrthreshold: "FATAL" }
      : { logLevel: options.logLevel, logFormat: options.logFormat },
    "cluster-proxy-up",
    ctx.logFd,
  );
  const logsAt = logFile ? displayPath(logFile) : "stderr";
  if (logFile) say(`  logs: ${logsAt} (--log-level ${options.logLevel})`);
  logMissingNodeFlags(log);
  const stack = new Stack(log);
  const startupAbort = new AbortController();
  try {
    const [{ ProxyServer }, { ProxyAgent }, { UpFleet }, { startUpFleetHttp }] = await Promise.all([
      import("@cluster-proxy/server"),
      import("@cluster-proxy/agent"),
      import("./up-fleet.js"),
      import("./up-fleet-http.js"),
    ]);
    // Typed options, validated by the schema: a field renamed or given the wrong type fails the typecheck here.
    const serverOptions = parseServerOptions({
      mode: "both",
      serverPort: ports.grpc.port,
      serverBindAddress: "127.0.0.1",
      httpConnectPort: ports.connectPlain.port,
      httpConnectBindAddress: "127.0.0.1",
      httpConnectPlain: true,
      agentPort: ports.agent.port,
      agentBindAddress: "127.0.0.1",
      healthPort: ports.health.port,
      healthBindAddress: "127.0.0.1",
      adminPort: ports.admin.port,
      adminBindAddress: "127.0.0.1",
      serverCert: paths.server.cert,
      serverKey: paths.server.key,
      serverCaCert: paths.clientCa.cert,
      clusterCert: paths.server.cert,
      clusterKey: paths.server.key,
      clusterCaCert: paths.agentCa.cert,
      serverId: "cluster-proxy-up",
      proxyStrategies: ["destHost"],
      keepaliveTime: 30_000,
      frontendKeepaliveTime: 60_000,
      backendDialTimeout: 30_000,
      gracefulShutdownTimeout: 1_000,
      logLevel: options.logLevel,
    });
    const server = new ProxyServer(serverOptions, { logger: log });
    stack.push("proxy-server", () => server.close());
    await server.start();

    const [serverCert, serverKey, clientCaCert] = await Promise.all([
      readFile(paths.server.cert),
      readFile(paths.server.key),
      readFile(paths.clientCa.cert),
    ]);
    const frontDoor: TlsFrontDoor = await startTlsFrontDoor({
      host: "127.0.0.1",
      port: ports.connectTls.port,
      cert: serverCert,
      key: serverKey,
      ca: clientCaCert,
      target: { host: "127.0.0.1", port: ports.connectPlain.port },
    });
    stack.push("mTLS CONNECT door", () => frontDoor.close());
    say(
      `  proxy-server: HTTP CONNECT 127.0.0.1:${ports.connectPlain.port} (plain) and 127.0.0.1:${ports.connectTls.port} (mTLS), gRPC 127.0.0.1:${ports.grpc.port} (mTLS), agents 127.0.0.1:${ports.agent.port}, health 127.0.0.1:${ports.health.port}`,
    );
    const fleet = new UpFleet({
      server,
      clusters: clusters.map((name) => ({ name, agentCertFile: paths.agents.get(name)!.cert })),
    });
    stack.push("fleet view probes", () => Promise.resolve(fleet.close()));
    const fleetHttp = await startUpFleetHttp({ model: fleet.model, host: "127.0.0.1", port: ports.fleet.port });
    stack.push("fleet view", () => fleetHttp.close());

    const standin = await ensureStandinCerts(certDir);
    const [standinCert, standinKey] = await Promise.all([
      readFile(standin.cert, "utf8"),
      readFile(standin.key, "utf8"),
    ]);
    const services: SampleService[] = [];
    /** Each cluster's running agent and how to make a new one (the test seam restarts agents). */
    const agents = new Map<string, AgentSlot>();
    for (const cluster of clusters) {
      const service = await startSampleService(cluster, {
        cluster,
        cert: standinCert,
        key: standinKey,
        token: standinToken(cluster),
      });
      stack.push(`sample service ${cluster}`, () => service.close());
      services.push(service);
      const agentPaths = paths.agents.get(cluster)!;
      const agentOptions = parseAgentOptions({
        proxyServerHost: "127.0.0.1",
        proxyServerPort: ports.agent.port,
        caCert: paths.ca.cert,
        agentCert: agentPaths.cert,
        agentKey: agentPaths.key,
        agentId: `up-${cluster}`,
        clusterName: cluster,
        apiserverAddress: `127.0.0.1:${service.port}`,
        healthServerPort: 0,
        adminServerPort: 0,
        syncInterval: 200,
        syncIntervalCap: 2_000,
        drainGracePeriod: 1_000,
        keepaliveTime: 30_000,
        logLevel: options.logLevel,
      });
      const slot: AgentSlot = {
        agent: undefined,
        make: () => new ProxyAgent(agentOptions, { logger: log.child({ cluster }) }),
      };
      agents.set(cluster, slot);
      stack.push(`agent ${cluster}`, async () => {
        const running = slot.agent;
        slot.agent = undefined;
        await running?.close();
      });
      const agent = slot.make();
      slot.agent = agent;
      await agent.start();
      say(`  cluster ${cluster}: sample service on 127.0.0.1:${service.port}, agent started`);
    }

    const deadline = Date.now() + options.connectTimeout;
    const started = Date.now();
    await Promise.all(
      clusters.map(async (cluster) => {
        await waitUntilReachable(ports.connectPlain.port, cluster, deadline, startupAbort.signal, logsAt);
        say(`  cluster ${cluster}: ${c.green("connected")} (answers through the hub after ${Date.now() - started} ms)`);
      }),
    );
    await fleet.start();

    await writeLocalHubProfile(stateDir, {
      kind: "cluster-proxy-local-hub",
      pid: process.pid,
      clusters,
      host: "127.0.0.1",
      ports: {
        grpc: ports.grpc.port,
        connectTls: ports.connectTls.port,
        connectPlain: ports.connectPlain.port,
        health: ports.health.port,
        fleet: ports.fleet.port,
      },
      files: {
        ca: paths.ca.cert,
        clientCert: paths.client.cert,
        clientKey: paths.client.key,
        apiserverCa: standin.ca,
      },
    });
    stack.push("hub profile", () => removeLocalHubProfile(stateDir, process.pid));
    ctx.stdout(
      readyText(
        {
          paths: {
            ca: paths.ca.cert,
            clientCert: paths.client.cert,
            clientKey: paths.client.key,
            apiserverCa: standin.ca,
          },
          ports,
          services,
          stateDir,
          fleetUrl: fleetHttp.url,
          binDir: binDirHint(ctx.env),
        },
        ctx.colors,
      ),
    );
    ctx.upAgents?.(agentControl(agents));
  } catch (err) {
    startupAbort.abort();
    await stack.closeAll();
    const conflict = portConflict(err, ports, base);
    if (conflict) throw new PortInUseError(conflict, { cause: err });
    throw err;
  }

  const exitNow = new AbortController();
  if (options.exitAfterReady) exitNow.abort();
  else say(c.dim("Running; press Ctrl-C to stop."));
  return superviseComponent(
    ctx,
    { close: () => stack.closeAll() },
    {
      name: "cluster-proxy up",
      logger: log,
      stopNow: exitNow.signal,
      ...(options.exitAfterReady
        ? {}
        : { announce: (what: "stopping" | "stopped") => say(what === "stopping" ? "stopping..." : "stopped.") }),
    },
  );
}
