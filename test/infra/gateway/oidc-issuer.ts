// Run inside the lab network namespace by test/gateway/gateway.test.ts (ip netns exec ... node --import tsx):
//
//   oidc-issuer.ts <dir> <host>
//
// A test OpenID Connect issuer `https://<host>:<port>` (the port is chosen by the kernel and
// printed as the first line, `listening <port>`): its discovery document and its keys (JWKS), with
// the TLS certificate `<dir>/tls.crt`/`tls.key`. The keys are `<dir>/jwks.json`, read on every
// request, so the test rotates them by replacing that file. Each request is printed as one line
// `GET <path>`, so the test sees when the gateway fetched the keys.
import { readFileSync } from "node:fs";
import https from "node:https";
import { join } from "node:path";

const [dir, host] = process.argv.slice(2);
if (!dir || !host) throw new Error("usage: oidc-issuer.ts <dir> <host>");

let issuer = "";
const server = https.createServer(
  { cert: readFileSync(join(dir, "tls.crt")), key: readFileSync(join(dir, "tls.key")) },
  (req, res) => {
    console.log(`${req.method} ${req.url}`);
    const json = (status: number, body: string): void => {
      res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store" });
      res.end(body);
    };
    if (req.url === "/.well-known/openid-configuration")
      json(
        200,
        JSON.stringify({
          issuer,
          jwks_uri: `${issuer}/keys`,
          authorization_endpoint: `${issuer}/authorize`,
          response_types_supported: ["id_token"],
          subject_types_supported: ["public"],
          id_token_signing_alg_values_supported: ["RS256"],
        }),
      );
    else if (req.url === "/keys") json(200, readFileSync(join(dir, "jwks.json"), "utf8"));
    else json(404, JSON.stringify({ error: "not found" }));
  },
);
server.listen(0, host, () => {
  const address = server.address();
  if (!address || typeof address === "string") throw new Error(`unexpected listen address ${address}`);
  const { port } = address;
  issuer = `https://${host}:${port}`;
  console.log(`listening ${port}`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
