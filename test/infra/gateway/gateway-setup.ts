/**
 * Helpers of the gateway suites (test/gateway): the README's chart install with the waits for the
 * addon and the gateway, the gateway's pods and their audit records, a probe of the agents' gateway endpoint from the lab, and a test OpenID Connect issuer
 * in the lab namespace (reachable from the hub's pods) with ID tokens signed by keys it can rotate.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createSign, generateKeyPairSync, type KeyObject, randomUUID } from "node:crypto";
import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createCertificateAuthority, issueCertificate } from "@cluster-proxy/pki";
import { type KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "@cluster-proxy/addon-manager";
import { HOST_ADDR, nsOf, repoRoot } from "../env/config.js";
import type { TestEnv } from "../env/fixture.js";
import { docBlock } from "../addon/readme-install.js";
import type { GuideOperator } from "../addon/guide-operator.js";
import { RELEASE } from "../chart.js";
import type { AttackAnswer, AttackRequest } from "./attack-probe.js";

/** The release namespace of the README's chart install (also the proxy-servers' and the gateway's). */
export const NS = "open-cluster-management-addon";
/** The gateway's Deployment and Service (docs/design/gateway.md). */
export const GATEWAY = "cluster-proxy-addon-user";

/**
 * The README's chart install as `operator` runs it, then the waits the guides have them run: the
 * addon Available on each of `clusters` and the gateway Deployment Available (`kubectl wait`, each
 * bounded by 300 s).
 */
export async function installChartAndWaitAvailable(
  operator: GuideOperator,
  clusters: readonly string[],
): Promise<void> {
  await operator.run("README install-chart", docBlock("install-chart"));
  for (const c of clusters)
    await operator.run(
      `${c} Available`,
      `kubectl wait managedclusteraddon/${RELEASE} -n ${c} --for=condition=Available --timeout=300s`,
    );
  await operator.run(
    "the gateway Available",
    `kubectl -n ${NS} wait deploy/${GATEWAY} --for=condition=Available --timeout=300s`,
  );
}

interface Pod extends KubeObject {
  status?: {
    phase?: string;
    podIP?: string;
    conditions?: { type: string; status: string }[];
    containerStatuses?: { restartCount?: number }[];
  };
}

/** The gateway Deployment's pod selector, as a label selector. */
async function gatewaySelector(hub: KubeApi): Promise<string> {
  const d = await hub.get<KubeObject & { spec: { selector: { matchLabels?: Record<string, string> } } }>(
    Resources.deployment,
    GATEWAY,
    NS,
  );
  return Object.entries(d.spec.selector.matchLabels ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(",");
}

/** The gateway's ready pods (not being deleted), found by its Deployment's selector. */
export async function gatewayPods(hub: KubeApi): Promise<string[]> {
  const labelSelector = await gatewaySelector(hub);
  const pods = (await hub.list(Resources.pod, { namespace: NS, labelSelector })).items as Pod[];
  return pods
    .filter(
      (p) =>
        p.status?.phase === "Running" &&
        !p.metadata.deletionTimestamp &&
        p.status.conditions?.some((c) => c.type === "Ready" && c.status === "True"),
    )
    .map((p) => p.metadata.name)
    .sort();
}

/**
 * Every gateway pod (ready or not, not being deleted) with the restarts of its containers: a
 * gateway process that exited shows as a higher count on the same pod (the kubelet restarts it).
 */
export async function gatewayRestarts(hub: KubeApi): Promise<Record<string, number>> {
  const labelSelector = await gatewaySelector(hub);
  const pods = (await hub.list(Resources.pod, { namespace: NS, labelSelector })).items as Pod[];
  const out: Record<string, number> = {};
  for (const p of pods
    .filter((x) => !x.metadata.deletionTimestamp)
    .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name)))
    out[p.metadata.name] = (p.status?.containerStatuses ?? []).reduce((n, c) => n + (c.restartCount ?? 0), 0);
  return out;
}

/**
 * Sends `request` with attack-probe.ts from the lab (the workstation's network), writing its file
 * to `dir`, and returns what came back.
 */
export function attackProbe(env: TestEnv, dir: string, request: AttackRequest): AttackAnswer {
  const file = join(dir, `attack-${randomUUID()}.json`);
  writeFileSync(file, JSON.stringify(request));
  const out = env.exec(
    "lab",
    process.execPath,
    ["--conditions=source", "--import", "tsx", join(repoRoot, "test", "infra", "gateway", "attack-probe.ts"), file],
    { timeoutMs: 90_000, allowFail: true },
  );
  const last = out.stdout.trim().split("\n").at(-1);
  if (!last) return { error: `attack-probe printed nothing: ${out.stderr}` };
  return JSON.parse(last) as AttackAnswer;
}

/** One audit record: a JSON object the gateway printed as one line of its standard output. */
export type AuditRecord = Record<string, unknown>;

/** The audit records in the logs of the gateway pods `pods`, read with `kubectl logs` as the guide does. */
export function auditRecords(env: TestEnv, pods: readonly string[]): AuditRecord[] {
  const out: AuditRecord[] = [];
  for (const pod of pods) {
    const r = env.kubectl("hub", ["-n", NS, "logs", pod], { allowFail: true });
    for (const line of r.stdout.split("\n")) {
      if (!line.startsWith("{")) continue;
      try {
        const v: unknown = JSON.parse(line);
        if (v && typeof v === "object" && !Array.isArray(v)) out.push(Object.fromEntries(Object.entries(v)));
      } catch {
        // not JSON: another log line
      }
    }
  }
  return out;
}

/** What identity-probe.ts reports. */
export interface IdentityProbeResult {
  tunnel?: boolean;
  status?: number;
  body?: string;
  error?: string;
}

/**
 * Runs identity-probe.ts in the lab: the agents' gateway endpoint of `cluster`, dialled through the
 * proxy-server door `door` with the proxy-client files of `proxyCertDir`, presenting the client
 * certificate of `clientCertDir` (none when undefined).
 */
export function probeGatewayEndpoint(
  env: TestEnv,
  o: {
    door: string;
    servername: string;
    proxyCertDir: string;
    cluster: string;
    agentCaFile: string;
    clientCertDir?: string;
  },
): IdentityProbeResult {
  const out = env.exec(
    "lab",
    process.execPath,
    [
      "--conditions=source",
      "--import",
      "tsx",
      join(repoRoot, "test", "infra", "gateway", "identity-probe.ts"),
      o.door,
      o.servername,
      o.proxyCertDir,
      o.cluster,
      o.agentCaFile,
      ...(o.clientCertDir ? [o.clientCertDir] : []),
    ],
    { timeoutMs: 60_000, allowFail: true },
  ).stdout;
  return JSON.parse(out.trim().split("\n").at(-1) || "{}") as IdentityProbeResult;
}

/** An RSA key of the test issuer, with its key id. */
export interface SigningKey {
  kid: string;
  privateKey: KeyObject;
  publicKey: KeyObject;
}

/** A fresh RS256 signing key named `kid`. */
export function signingKey(kid: string): SigningKey {
  const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  return { kid, privateKey, publicKey };
}

const b64url = (v: string | Buffer): string => Buffer.from(v).toString("base64url");

/** An ID token (a JWS, RS256) with `claims`, signed by `key`. */
export function mintIdToken(key: SigningKey, claims: Record<string, unknown>): string {
  const input = `${b64url(JSON.stringify({ alg: "RS256", typ: "JWT", kid: key.kid }))}.${b64url(JSON.stringify(claims))}`;
  const signature = createSign("RSA-SHA256").update(input).sign(key.privateKey);
  return `${input}.${b64url(signature)}`;
}

/** The test issuer, running in the lab namespace. */
export interface OidcIssuer {
  /** `https://<lab address>:<port>`, the `iss` of its tokens. */
  url: string;
  /** The CA that signed its serving certificate (PEM). */
  caPem: string;
  /** Serve these keys (and only these) from now on. */
  publish(keys: readonly SigningKey[]): void;
  /** The requests it has served so far (`GET <path>`). */
  requests(): string[];
  /** An ID token of this issuer for `sub`, audience `audience`, valid 10 minutes. */
  token(key: SigningKey, sub: string, audience: string, extra?: Record<string, unknown>): string;
  stop(): Promise<void>;
}

/**
 * Starts oidc-issuer.ts in the lab namespace on the lab's address (the hub's pods route there), with
 * a serving certificate for that address from a CA of its own, publishing `keys`. Files go to `dir`.
 */
export async function startOidcIssuer(dir: string, keys: readonly SigningKey[]): Promise<OidcIssuer> {
  mkdirSync(dir, { recursive: true });
  const ca = await createCertificateAuthority({ commonName: "cluster-proxy gateway test issuer CA" });
  const leaf = await issueCertificate(ca, {
    commonName: "test issuer",
    ipAddresses: [HOST_ADDR.lab],
    usage: "server",
  });
  writeFileSync(join(dir, "tls.crt"), leaf.certPem);
  writeFileSync(join(dir, "tls.key"), leaf.keyPem, { mode: 0o600 });
  const publish = (list: readonly SigningKey[]): void => {
    const jwks = {
      keys: list.map((k) => ({ ...k.publicKey.export({ format: "jwk" }), kid: k.kid, use: "sig", alg: "RS256" })),
    };
    // Replaced atomically: the issuer reads the file whole on each request.
    writeFileSync(join(dir, "jwks.json.new"), JSON.stringify(jwks));
    renameSync(join(dir, "jwks.json.new"), join(dir, "jwks.json"));
  };
  publish(keys);
  const child: ChildProcess = spawn(
    "ip",
    [
      ...["netns", "exec", nsOf("lab"), process.execPath, "--conditions=source", "--import", "tsx"],
      ...[join(repoRoot, "test", "infra", "gateway", "oidc-issuer.ts"), dir, HOST_ADDR.lab],
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let out = "";
  let err = "";
  child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
  const exited = new Promise<void>((resolve) => child.on("close", () => resolve()));
  const port = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`the test issuer did not start within 60 s: ${out}${err}`)),
      60_000,
    );
    const check = (): void => {
      const m = /^listening (\d+)$/m.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    };
    child.stdout!.on("data", check);
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`the test issuer exited: ${out}${err}`));
    });
  });
  const url = `https://${HOST_ADDR.lab}:${port}`;
  return {
    url,
    caPem: ca.certPem,
    publish,
    requests: () => out.split("\n").filter((l) => l.startsWith("GET ")),
    token: (key, sub, audience, extra = {}) => {
      const now = Math.floor(Date.now() / 1000);
      return mintIdToken(key, {
        iss: url,
        aud: audience,
        sub,
        iat: now,
        nbf: now - 5,
        exp: now + 600,
        jti: randomUUID(),
        ...extra,
      });
    },
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), 5_000);
      await exited;
      clearTimeout(t);
    },
  };
}
