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
// as an impersonated user (`Cluster-Proxy-Target: kube`, `Impersonate-User: cluster:hub:identity-probe`)
// over HTTP/2, as the gateway does.
// Prints one JSON line {tunnel, status?, body?, error?}: tunnel false when the dial failed.
import { readFileSync } from "node:fs";
import http2 from "node:http2";
import { join } from "node:path";
import tls from "node:tls";
import { tunnelClientFromCertDir } from "../env/proxy-client.js";
import { errorMessage } from "@cluster-proxy/errors";

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
    // The endpoint serves plain requests over HTTP/2 only (docs/design/gateway.md). A refused
    // client certificate shows as the TLS socket's error (with TLS 1.3 after the client finished
    // its side of the handshake): that error, not what the HTTP/2 session says after it, is the
    // answer.
    return await new Promise<ProbeResult>((resolve) => {
      let settled = false;
      let tlsError: string | undefined;
      let sessionError: string | undefined;
      const endpoint = tls.connect({
        socket,
        servername: "gateway.cluster-proxy.invalid",
        ALPNProtocols: ["h2"],
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
      });
      const done = (r: ProbeResult): void => {
        if (settled) return;
        settled = true;
        session.destroy();
        endpoint.destroy();
        resolve(r);
      };
      // The connection ended without an answer (its close does not always come once the
      // session holds it): the TLS error if there was one, after every error of this turn is in.
      const failed = (): void =>
        void setImmediate(() => done({ tunnel: true, error: tlsError ?? sessionError ?? "the endpoint disconnected" }));
      endpoint.on("error", (err: Error) => {
        tlsError ??= err.message;
        failed();
      });
      socket.on("error", (err: Error) => {
        tlsError ??= err.message;
        failed();
      });
      endpoint.once("close", failed);
      const session = http2.connect("https://gateway.cluster-proxy.invalid", { createConnection: () => endpoint });
      session.on("error", (err: Error) => {
        sessionError ??= err.message;
        failed();
      });
      session.once("close", failed);
      const req = session.request(
        {
          ":method": "GET",
          ":path": "/version",
          "cluster-proxy-target": "kube",
          "impersonate-user": "cluster:hub:identity-probe",
        },
        { endStream: true },
      );
      req.setTimeout(20_000, () => done({ tunnel: true, error: "no answer within 20 s" }));
      let status: number | undefined;
      let body = "";
      req.on("response", (headers) => (status = Number(headers[":status"])));
      req.setEncoding("utf8");
      req.on("data", (d: string) => (body += d));
      // A stream that ends without a response head is the connection ending, not an answer.
      req.on("end", () => (status === undefined ? failed() : done({ tunnel: true, status, body: body.slice(0, 500) })));
      req.on("error", (err: Error) => {
        sessionError ??= err.message;
        failed();
      });
    });
  } finally {
    await client.close();
  }
}

// Whatever fails outside the handlers above still ends in one line, not a crash without output.
process.on("uncaughtException", (err) => {
  console.log(JSON.stringify({ tunnel: true, error: `uncaught: ${err.message}` }));
  process.exit(0);
});
try {
  console.log(JSON.stringify(await main()));
} catch (err) {
  console.log(JSON.stringify({ tunnel: false, error: errorMessage(err) }));
}
