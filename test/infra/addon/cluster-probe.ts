// Run inside the lab network namespace by test/addon-manager/agents.test.ts:
//
//   cluster-probe.ts <proxyHost:port> <proxyServername> <certDir> <cluster> <clusterCaFile> <kubeconfig> [target]
//
// Dials <cluster>:443 (or target, e.g. kubernetes.default.svc.<cluster>:443) through the hub's gRPC front door (our SDK, with the proxy-client
// certificate in certDir: ca.crt, tls.crt, tls.key), then speaks TLS to that cluster's
// kube-apiserver over the tunnel, verified against clusterCaFile (the CA the ManagedCluster
// publishes) for the name kubernetes.default.svc, authenticates with the client certificate of
// the kubeconfig, and lists namespaces. Prints one JSON line {ok, namespaces?, error?}.
// With GO_CLIENT=<path of konnectivity-go-client> the tunnel is the real Go konnectivity-client
// library's (tunnel.DialContext, tcp mode over the child's stdin/stdout) instead of our SDK.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import https from "node:https";
import { join } from "node:path";
import { Duplex } from "node:stream";
import tls from "node:tls";
import { tunnelClientFromCertDir } from "../env/proxy-client.js";
import { errorMessage } from "@cluster-proxy/errors";

const [address, servername, certDir, cluster, clusterCaFile, kubeconfig, target] = process.argv.slice(2);
const [host, portText] = (address ?? "").split(/:(?=\d+$)/);

function kubeconfigCredential(key: "client-certificate-data" | "client-key-data"): Buffer {
  const m = new RegExp(`${key}: (\\S+)`).exec(readFileSync(kubeconfig!, "utf8"));
  if (!m) throw new Error(`${kubeconfig} has no ${key}`);
  return Buffer.from(m[1]!, "base64");
}

/** GET /api/v1/namespaces over `socket` with TLS verified against the cluster's CA. */
async function listNamespaces(socket: Duplex): Promise<string[]> {
  const body = await new Promise<string>((resolve, reject) => {
    const req = https.get(
      {
        host: "kubernetes.default.svc",
        path: "/api/v1/namespaces",
        timeout: 20_000,
        createConnection: () =>
          tls.connect({
            socket,
            servername: "kubernetes.default.svc",
            ca: readFileSync(clusterCaFile!),
            cert: kubeconfigCredential("client-certificate-data"),
            key: kubeconfigCredential("client-key-data"),
          }),
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => (text += d));
        res.on("end", () =>
          res.statusCode === 200 ? resolve(text) : reject(new Error(`HTTP ${res.statusCode}: ${text.slice(0, 200)}`)),
        );
      },
    );
    req.on("timeout", () => req.destroy(new Error("no answer within 20 s")));
    req.on("error", reject);
  });
  const list = JSON.parse(body) as { items: { metadata: { name: string } }[] };
  return list.items.map((n) => n.metadata.name);
}

/** A tunnelled connection made by the Go konnectivity-client (its stdin/stdout are the bytes). */
function goDial(to: string): { socket: Duplex; close: () => void } {
  const child = spawn(
    process.env.GO_CLIENT!,
    [
      "--mode=tcp",
      `--address=${to}`,
      `--proxy-host=${host!}`,
      `--proxy-port=${portText!}`,
      `--tls-server-name=${servername!}`,
      `--ca-cert=${join(certDir!, "ca.crt")}`,
      `--client-cert=${join(certDir!, "tls.crt")}`,
      `--client-key=${join(certDir!, "tls.key")}`,
      "--timeout=40s",
    ],
    { stdio: ["pipe", "pipe", "inherit"] },
  );
  return { socket: Duplex.from({ readable: child.stdout, writable: child.stdin }), close: () => child.kill("SIGKILL") };
}

async function main(): Promise<void> {
  if (process.env.GO_CLIENT) {
    const { socket, close } = goDial(target ?? `${cluster}:443`);
    try {
      console.log(JSON.stringify({ ok: true, namespaces: await listNamespaces(socket) }));
    } finally {
      close();
    }
    return;
  }
  const client = tunnelClientFromCertDir(address ?? "", servername ?? "", certDir ?? "");
  try {
    const socket = await client.dial(target ?? `${cluster}:443`);
    console.log(JSON.stringify({ ok: true, namespaces: await listNamespaces(socket) }));
  } finally {
    await client.close();
  }
}

try {
  await main();
} catch (err) {
  console.log(JSON.stringify({ ok: false, error: errorMessage(err) }));
}
