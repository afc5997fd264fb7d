// Run inside the lab network namespace by test/gateway/gateway.test.ts:
//
//   identity-probe.ts <proxyHost:port> <proxyServername> <proxyCertDir> <cluster> <agentCaFile> [<clientCertDir>]
//
// Dials the agents' reserved gateway address `gateway.cluster-proxy.invalid.<cluster>:443` through
// the hub's gRPC front door (our SDK, with the proxy-client certificate in proxyCertDir: ca.crt,
// tls.crt, tls.key), as any hub program holding the proxy-client certificate could, then speaks
// TLS to the agent's gateway endpoint, presenting the certificate of clientCertDir (tls.crt,
// tls.key; none without it), checking the endpoint's certificate against agentCaFile and its URI
// SAN `cluster-proxy://cluster/<cluster>`, and asks for `/version` of the cluster's kube-apiserver
// as an impersonated user (`Cluster-Proxy-Target: kube`, `Impersonate-User: cluster:hub:identity-probe`).
// Prints one JSON line {tunnel, status?, body?, error?}: tunnel false when the dial failed.
import { readFileSync } from "node:fs";
import https from "node:https";
import { join } from "node:path";
import tls from "node:tls";
import { tunnelClientFromCertDir } from "../env/proxy-client.js";

const [address, servername, proxyCertDir, cluster, agentCaFile, clientCertDir] = process.argv.slice(2);

interface ProbeResult {
  tunnel: boolean;
  status?: number;
  body?: string;
  error?: string;
}

async function main(): Promise<ProbeResult> {
  const client = tunnelClientFromCertDir(address ?? "", servername ?? "", proxyCertDir ?? "");
  try {
    const dialled = await client.dial(`gateway.cluster-proxy.invalid.${cluster}:443`).then(
      (socket) => ({ socket }),
      (err: Error) => ({ error: err.message }),
    );
    if ("error" in dialled) return { tunnel: false, error: dialled.error };
    const { socket } = dialled;
    const expectedUri = `URI:cluster-proxy://cluster/${cluster}`;
    return await new Promise<ProbeResult>((resolve) => {
      const req = https.get(
        {
          host: "gateway.cluster-proxy.invalid",
          path: "/version",
          timeout: 20_000,
          headers: { "Cluster-Proxy-Target": "kube", "Impersonate-User": "cluster:hub:identity-probe" },
          createConnection: () =>
            tls.connect({
              socket,
              servername: "gateway.cluster-proxy.invalid",
              ca: readFileSync(agentCaFile!),
              ...(clientCertDir
                ? {
                    cert: readFileSync(join(clientCertDir, "tls.crt")),
                    key: readFileSync(join(clientCertDir, "tls.key")),
                  }
                : {}),
              checkServerIdentity: (_name, cert) =>
                (cert.subjectaltname ?? "").split(", ").includes(expectedUri)
                  ? undefined
                  : new Error(`the endpoint's certificate lacks ${expectedUri}: ${cert.subjectaltname}`),
            }),
        },
        (res) => {
          let body = "";
          res.setEncoding("utf8");
          res.on("data", (d: string) => (body += d));
          res.on("end", () => resolve({ tunnel: true, status: res.statusCode, body: body.slice(0, 500) }));
        },
      );
      req.on("timeout", () => req.destroy(new Error("no answer within 20 s")));
      req.on("error", (err) => resolve({ tunnel: true, error: err.message }));
    });
  } finally {
    await client.close();
  }
}

try {
  console.log(JSON.stringify(await main()));
} catch (err) {
  console.log(JSON.stringify({ tunnel: false, error: (err as Error).message }));
}
