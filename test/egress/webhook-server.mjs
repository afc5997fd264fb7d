// A validating admission webhook for the egress-selector suite: HTTPS on the address and port of
// argv (a Service's cluster IP inside a network namespace only the agent reaches), denying every
// object it is asked about with a message the test looks for in kubectl's answer.
//   node webhook-server.mjs <host> <port> <cert.pem> <key.pem>
import { readFileSync } from "node:fs";
import { createServer } from "node:https";

const [host, port, certFile, keyFile] = process.argv.slice(2);
let reviews = 0;
const server = createServer({ cert: readFileSync(certFile), key: readFileSync(keyFile) }, (req, res) => {
  let body = "";
  req.on("data", (c) => (body += c.toString()));
  req.on("end", () => {
    let uid = "";
    try {
      uid = JSON.parse(body).request?.uid ?? "";
    } catch {
      res.writeHead(400).end("not an AdmissionReview");
      return;
    }
    reviews++;
    process.stdout.write(`webhook: review ${reviews} uid ${uid} from ${req.socket.remoteAddress}\n`);
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
      JSON.stringify({
        apiVersion: "admission.k8s.io/v1",
        kind: "AdmissionReview",
        response: {
          uid,
          allowed: false,
          status: { code: 403, message: `egress-webhook: reached through the agent (review ${reviews})` },
        },
      }),
    );
  });
});
server.listen(Number(port), host, () => process.stdout.write(`webhook: listening on ${host}:${port}\n`));
process.on("SIGTERM", () => server.close(() => process.exit(0)));
