/**
 * The world of the gateway's hostile suite (test/hostile/gateway-*.test.ts, docs/testing/hostile-clients.md):
 * a real proxy-server and a real agent of cluster `mc1` (the built CLI, with its gateway endpoint
 * on), a real gateway in a process of its own (gateway-main.ts: the {@link Gateway} with an
 * in-memory hub) dialing through that server, and two recording stand-ins behind the agent: the
 * kube-apiserver (`--kube-apiserver-url`, its "pods" reached through `pods/proxy` paths) and the
 * Service `web.apps.svc` (allowed for mc1; the agent resolves `*.svc` to loopback, svc-loopback.mjs).
 *
 * The stand-ins count every request head when it arrives, with its identity headers, and answer a
 * small JSON naming the URL answered (never other request bytes), so a caller can tell an answer
 * meant for another request; a test may script a raw answer (any bytes, written to the socket as
 * they are) for chosen paths.
 */
import { once } from "node:events";
import { mkdir, writeFile } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import * as https from "node:https";
import type { AddressInfo } from "node:net";
import { join, resolve } from "node:path";
import { createCertificateAuthority, issueCertificate } from "@cluster-proxy/pki";
import { Harness, type AgentHandle, type ServerPorts } from "../../framework/harness.js";
import { httpGet } from "../../framework/http.js";
import { waitForProc, type Proc } from "../../framework/process.js";
import { waitFor } from "../../framework/waits.js";
import type { GatewayProcessConfig } from "./gateway-main.js";

/** The one cluster of the world. */
export const CLUSTER = "mc1";
/** The prefix the gateway puts before hub names (its default). */
export const IMPERSONATION_PREFIX = "cluster:hub:";
/** The Service the stand-in answers as (exposed for mc1 in the gateway's allowlist). */
export const SERVICE = { namespace: "apps", name: "web" } as const;

/** A hub caller: its bearer token, and the identity the hub gives it. */
export interface Caller {
  token: string;
  username: string;
  groups: string[];
}

/** Only `get` on managedclusters/proxy of mc1: the attacker of issue 39. */
export const READER: Caller = {
  token: "reader-token",
  username: "mallory",
  groups: ["team-a", "system:authenticated"],
};
/** Every verb on managedclusters/proxy of mc1 (so bodies of POST/PUT/PATCH/DELETE reach the agent). */
export const WRITER: Caller = { token: "writer-token", username: "dora", groups: ["team-b", "system:authenticated"] };

/** With {@link WorldOptions.frontProxy}: a second cluster without an agent, which only {@link WRITER} may `get`. */
export const OTHER_CLUSTER = "mc2";
/** The name the front proxy's certificate carries (the hub's `requestheader-allowed-names`). */
export const FRONT_PROXY_NAME = "front-proxy-client";

/** What the world is started with. */
export interface WorldOptions {
  /**
   * The aggregated path: the hub publishes a requestheader CA ({@link HostileWorld.frontProxy} holds
   * a certificate of it, the hub apiserver's), {@link OTHER_CLUSTER} exists, and both clusters'
   * add-ons are Available (the fleet view's rows).
   */
  frontProxy?: boolean;
}

/** One request a stand-in received (recorded when its head arrives). */
export interface Received {
  method: string;
  url: string;
  httpVersion: string;
  rawHeaders: string[];
}

/** A raw answer a stand-in writes for a request (then it ends the connection), or undefined for the usual one. */
export type Script = (req: IncomingMessage) => Buffer | undefined;

/** A recording stand-in (HTTP/1.1 over TLS). */
export interface StandIn {
  port: number;
  received: Received[];
  /** Raw answers for chosen requests (undefined: every request gets the fixed JSON). */
  script: Script | undefined;
  /**
   * Ends every request held now: one whose URL has `hold=answer` gets its head and `first\n` at
   * once, then `second\n` and its end here (a watch); one with `hold=head` gets nothing before this
   * (a request the cluster takes long over), then the usual answer.
   */
  releaseHeld(): void;
}

/** Every value of header `name` (lower case) in node's raw header list. */
export function headerValues(raw: readonly string[], name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) if (raw[i]?.toLowerCase() === name) out.push(raw[i + 1] ?? "");
  return out;
}

/** The usual answer: small JSON naming the URL it answers (so a caller can tell whose answer it got). */
function usualAnswer(url: string): string {
  return JSON.stringify({ kind: "Status", status: "Success", url });
}

async function startStandIn(h: Harness, identity: { cert: string; key: string }): Promise<StandIn> {
  const held = new Set<() => void>();
  const standIn: StandIn = {
    port: 0,
    received: [],
    script: undefined,
    releaseHeld: () => {
      for (const release of [...held]) release();
    },
  };
  const server = https.createServer(identity, (req: IncomingMessage, res: ServerResponse) => {
    standIn.received.push({
      method: req.method ?? "",
      url: req.url ?? "",
      httpVersion: req.httpVersion,
      rawHeaders: [...req.rawHeaders],
    });
    req.on("error", () => undefined);
    res.on("error", () => undefined);
    const raw = standIn.script?.(req);
    req.resume();
    if (raw) {
      // Written as they are, whatever they hold; the connection is not reused after them.
      const socket = req.socket;
      socket.write(raw);
      socket.end();
      return;
    }
    const hold = /[?&]hold=(answer|head)(?:&|$)/.exec(req.url ?? "")?.[1];
    const holdUntilReleased = (release: () => void): void => {
      const entry = (): void => {
        held.delete(entry);
        release();
      };
      held.add(entry);
      res.once("close", () => held.delete(entry));
    };
    const respond = (): void => {
      if (hold === "answer") {
        res.writeHead(200, { "Content-Type": "text/plain" });
        res.write("first\n");
        return holdUntilReleased(() => res.end("second\n"));
      }
      const answer = usualAnswer(req.url ?? "");
      const usual = (): void => {
        res.writeHead(200, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(answer) });
        res.end(req.method === "HEAD" ? undefined : answer);
      };
      if (hold === "head") holdUntilReleased(usual);
      else usual();
    };
    if (req.readableEnded) respond();
    else req.once("end", respond);
  });
  server.on("clientError", (_err, socket) => socket.destroy());
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  h.onClose(
    () =>
      new Promise<void>((done) => {
        server.closeAllConnections();
        server.close(() => done());
      }),
  );
  standIn.port = (server.address() as AddressInfo).port;
  return standIn;
}

/** Options of one HTTP/1.1 request to the world's gateway, on a connection of its own, as the holder of `token`. */
export function gatewayRequestOptions(world: HostileWorld, path: string, token: string): https.RequestOptions {
  return {
    host: "127.0.0.1",
    port: world.port,
    path,
    ca: world.servingCa,
    servername: "localhost",
    agent: false,
    headers: { authorization: `Bearer ${token}` },
  };
}

/** The status of a GET through the gateway as the reader (0 when it failed). */
function httpsGetStatus(world: HostileWorld, path: string): Promise<number> {
  return new Promise((done) => {
    const req = https.get(gatewayRequestOptions(world, path, READER.token), (res) => {
      res.resume();
      res.on("end", () => done(res.statusCode ?? 0));
      res.on("error", () => done(0));
    });
    req.setTimeout(5_000, () => req.destroy());
    req.on("error", () => done(0));
  });
}

/** The running world. */
export interface HostileWorld {
  h: Harness;
  server: ServerPorts;
  /** The agent process now (a new one after {@link restartAgentIfExited}). */
  agent: AgentHandle;
  gateway: Proc;
  /** The gateway's HTTPS port and health port (/metrics). */
  port: number;
  healthPort: number;
  /** The CA the gateway's serving certificate chains to (name `localhost`, IP 127.0.0.1). */
  servingCa: Buffer;
  apiserver: StandIn;
  service: StandIn;
  /** With {@link WorldOptions.frontProxy}: the hub apiserver's front-proxy client certificate. */
  frontProxy?: { cert: Buffer; key: Buffer };
  /** The gateway path of `path` on the stand-in Service. */
  servicePath(path: string): string;
  /**
   * Whether the gateway process still serves: its health port answers /healthz (a process that
   * threw out of its event loop is refusing connections by then); when it does not, waits (at most
   * 5 s) for the process to exit and says false.
   */
  gatewayAlive(): Promise<boolean>;
  /**
   * Starts a new gateway process if this one exited (so one crash does not hide the next case's
   * result); resolves with whether it did. `gateway`, `port` and `healthPort` then name the new one.
   */
  restartGatewayIfExited(): Promise<boolean>;
  /** Like {@link gatewayAlive}, for the agent (its health port). */
  agentAlive(): Promise<boolean>;
  /** Starts a new agent if this one exited and waits until the gateway reaches it; resolves with whether it did. */
  restartAgentIfExited(): Promise<boolean>;
  close(): Promise<void>;
}

/** Start the world (see the module comment); `npm run build` first (the server and agent are the built CLI). */
export async function startHostileWorld(opts: WorldOptions = {}): Promise<HostileWorld> {
  const h = await new Harness().init([CLUSTER]);
  try {
    const days = { validityDays: 1 };
    const clusterCa = await createCertificateAuthority({ commonName: "mc1-cluster-ca", ...days });
    const serviceCa = await createCertificateAuthority({ commonName: "mc1-service-ca", ...days });
    const gatewayCa = await createCertificateAuthority({ commonName: "gateway-ca", ...days });
    const servingCa = await createCertificateAuthority({ commonName: "gateway-serving-ca", ...days });
    const api = await issueCertificate(clusterCa, {
      commonName: "kube-apiserver",
      ipAddresses: ["127.0.0.1"],
      usage: "server",
      ...days,
    });
    const svc = await issueCertificate(serviceCa, {
      commonName: `${SERVICE.name}.${SERVICE.namespace}.svc`,
      dnsNames: [`${SERVICE.name}.${SERVICE.namespace}.svc`],
      usage: "server",
      ...days,
    });
    const gatewayId = await issueCertificate(gatewayCa, {
      commonName: "cluster-proxy-gateway",
      usage: "client",
      ...days,
    });
    const serving = await issueCertificate(servingCa, {
      commonName: "gateway",
      dnsNames: ["localhost"],
      ipAddresses: ["127.0.0.1"],
      usage: "server",
      ...days,
    });
    const frontProxyCa = opts.frontProxy
      ? await createCertificateAuthority({ commonName: "front-proxy-ca", ...days })
      : undefined;
    const frontProxy = frontProxyCa
      ? await issueCertificate(frontProxyCa, { commonName: FRONT_PROXY_NAME, usage: "client", ...days })
      : undefined;
    const saDir = join(h.dir, "sa");
    await mkdir(saDir);
    const files: Record<string, string> = {
      "sa/token": "mc1-agent-sa-token\n",
      "sa/ca.crt": clusterCa.certPem,
      "service-ca.crt": serviceCa.certPem,
      "gateway-ca.crt": gatewayCa.certPem,
      "gw-id.crt": gatewayId.certPem,
      "gw-id.key": gatewayId.keyPem,
      "gw-serving.crt": serving.certPem,
      "gw-serving.key": serving.keyPem,
    };
    for (const [name, text] of Object.entries(files)) await writeFile(join(h.dir, name), text);

    const apiserver = await startStandIn(h, { cert: api.certPem, key: api.keyPem });
    const service = await startStandIn(h, { cert: svc.certPem, key: svc.keyPem });
    const server = (await h.startServer()).ports;
    const preload = resolve(import.meta.dirname, "svc-loopback.mjs");
    const agentArgs = [
      `--gateway-ca-file=${join(h.dir, "gateway-ca.crt")}`,
      `--kube-apiserver-url=https://127.0.0.1:${apiserver.port}`,
      `--service-account-dir=${saDir}`,
      `--service-ca-file=${join(h.dir, "service-ca.crt")}`,
    ];
    const agentEnv = { ...process.env, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ""} --import=${preload}`.trim() };
    const startAgent = async (): Promise<{ handle: AgentHandle; exited: () => boolean }> => {
      const handle = await h.startAgent(CLUSTER, server.agent, agentArgs, true, agentEnv);
      let exited = false;
      void handle.proc.exited.then(() => (exited = true));
      return { handle, exited: () => exited };
    };
    let ag = await startAgent();

    const c = h.certs;
    const config: GatewayProcessConfig = {
      options: {
        port: 0,
        healthPort: 0,
        servingCert: join(h.dir, "gw-serving.crt"),
        servingKey: join(h.dir, "gw-serving.key"),
        proxyServerHost: "127.0.0.1",
        proxyServerPort: server.server,
        proxyCa: c.ca.cert,
        proxyCert: c.client.cert,
        proxyKey: c.client.key,
        identityCert: join(h.dir, "gw-id.crt"),
        identityKey: join(h.dir, "gw-id.key"),
        agentCa: c.agentCa.cert,
        namespace: "cluster-proxy",
        dialTimeout: 10_000,
      },
      tokens: Object.fromEntries(
        [READER, WRITER].map((u) => [u.token, { username: u.username, groups: u.groups }] as const),
      ),
      grants: {
        [READER.username]: { [CLUSTER]: ["get"] },
        [WRITER.username]: { [CLUSTER]: ["get", "create", "update", "patch", "delete"] },
      },
      clusters: [CLUSTER],
      exposedServices: `- clusters: [${CLUSTER}]\n  namespace: ${SERVICE.namespace}\n  service: ${SERVICE.name}\n`,
    };
    if (frontProxyCa) {
      config.clusters.push(OTHER_CLUSTER);
      config.grants[WRITER.username]![OTHER_CLUSTER] = ["get"];
      config.availableAddOns = [CLUSTER, OTHER_CLUSTER];
      config.configMaps = {
        "extension-apiserver-authentication": {
          "requestheader-client-ca-file": frontProxyCa.certPem,
          "requestheader-allowed-names": JSON.stringify([FRONT_PROXY_NAME]),
          "requestheader-username-headers": JSON.stringify(["X-Remote-User"]),
          "requestheader-group-headers": JSON.stringify(["X-Remote-Group"]),
          "requestheader-extra-headers-prefix": JSON.stringify(["X-Remote-Extra-"]),
        },
      };
    }
    const configFile = join(h.dir, "gateway.json");
    await writeFile(configFile, JSON.stringify(config));
    const spawnGateway = async (): Promise<{ proc: Proc; port: number; healthPort: number; exited: () => boolean }> => {
      const proc = h.spawnProc("gateway", process.execPath, [
        "--conditions=source",
        "--import",
        "tsx",
        resolve(import.meta.dirname, "gateway-main.ts"),
        configFile,
      ]);
      let ports = { port: 0, healthPort: 0 };
      // Generous: on a busy machine tsx compiling the gateway alone has taken more than 15 s.
      await waitForProc(
        proc,
        "the gateway process READY",
        () => {
          const m = /^READY (\{.*\})$/m.exec(proc.output());
          if (m?.[1]) ports = JSON.parse(m[1]) as typeof ports;
          return Promise.resolve(m !== null);
        },
        60_000,
      );
      await waitForProc(
        proc,
        "the gateway's /readyz",
        async () => (await httpGet(`http://127.0.0.1:${ports.healthPort}/readyz`)).status === 200,
      );
      let exited = false;
      void proc.exited.then(() => (exited = true));
      return { proc, ...ports, exited: () => exited };
    };
    let gw = await spawnGateway();
    const world: HostileWorld = {
      h,
      server,
      agent: ag.handle,
      gateway: gw.proc,
      port: gw.port,
      healthPort: gw.healthPort,
      servingCa: Buffer.from(servingCa.certPem),
      apiserver,
      service,
      ...(frontProxy
        ? { frontProxy: { cert: Buffer.from(frontProxy.certPem), key: Buffer.from(frontProxy.keyPem) } }
        : {}),
      servicePath: (path) =>
        `/${CLUSTER}/api/v1/namespaces/${SERVICE.namespace}/services/https:${SERVICE.name}:${service.port}/proxy-service${path}`,
      gatewayAlive: async () => {
        if (gw.exited()) return false;
        try {
          if ((await httpGet(`http://127.0.0.1:${gw.healthPort}/healthz`)).status === 200) return !gw.exited();
        } catch {
          // refused or cut: see whether the process is going away
        }
        await Promise.race([gw.proc.exited, new Promise((r) => setTimeout(r, 5_000).unref())]);
        return !gw.exited();
      },
      agentAlive: async () => {
        if (ag.exited()) return false;
        try {
          if ((await httpGet(`http://127.0.0.1:${ag.handle.healthPort}/healthz`)).status === 200) return !ag.exited();
        } catch {
          // refused or cut: see whether the process is going away
        }
        await Promise.race([ag.handle.proc.exited, new Promise((r) => setTimeout(r, 5_000).unref())]);
        return !ag.exited();
      },
      restartAgentIfExited: async () => {
        if (!ag.exited()) return false;
        ag = await startAgent();
        world.agent = ag.handle;
        // The gateway learns of the new agent through the server: wait until a request reaches it.
        await waitFor(
          "the new agent serving the gateway",
          async () => {
            const r = await httpsGetStatus(world, `/${CLUSTER}/version`);
            return r === 200;
          },
          30_000,
          200,
        );
        return true;
      },
      restartGatewayIfExited: async () => {
        if (!gw.exited()) return false;
        gw = await spawnGateway();
        Object.assign(world, { gateway: gw.proc, port: gw.port, healthPort: gw.healthPort });
        return true;
      },
      close: () => h.close(),
    };
    return world;
  } catch (err) {
    await h.close();
    throw err;
  }
}
