// Per-cluster PKI made with the openssl CLI: a CA, the apiserver serving certificate, an admin
// client certificate (system:masters), a service-account key pair; on the hub also the klusterlet
// bootstrap client certificate and the addon webhook's serving certificate.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BOOTSTRAP_USER, CLUSTERS, HOST_ADDR, type ClusterName, SERVICE_CIDR, paths } from "./config.js";
import { run } from "./exec.js";

const ossl = (args: string[], input?: string): string => run("openssl", args, { input }).stdout;

function key(file: string): void {
  ossl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", file]);
}

function ca(dir: string, cn: string): void {
  key(join(dir, "ca.key"));
  ossl([
    "req",
    "-x509",
    "-new",
    "-key",
    join(dir, "ca.key"),
    "-subj",
    `/CN=${cn}`,
    "-days",
    "3650",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    "-out",
    join(dir, "ca.crt"),
  ]);
}

function leaf(dir: string, name: string, subj: string, ext: string): void {
  const k = join(dir, `${name}.key`);
  key(k);
  const csr = ossl(["req", "-new", "-key", k, "-subj", subj]);
  const extFile = join(dir, `${name}.ext`);
  writeFileSync(extFile, ext);
  ossl(
    [
      "x509",
      "-req",
      "-CA",
      join(dir, "ca.crt"),
      "-CAkey",
      join(dir, "ca.key"),
      "-CAcreateserial",
      "-days",
      "3650",
      "-extfile",
      extFile,
      "-out",
      join(dir, `${name}.crt`),
    ],
    csr,
  );
}

function firstServiceIp(cidr: string): string {
  const [a, b, c] = cidr.split("/")[0]!.split(".");
  return `${a}.${b}.${c}.1`;
}

export function kubeconfig(server: string, caFile: string, certFile: string, keyFile: string, user: string): string {
  const b64 = (f: string): string => readFileSync(f).toString("base64");
  return [
    "apiVersion: v1",
    "kind: Config",
    "clusters:",
    "- name: cluster",
    "  cluster:",
    `    server: ${server}`,
    `    certificate-authority-data: ${b64(caFile)}`,
    "users:",
    `- name: ${user}`,
    "  user:",
    `    client-certificate-data: ${b64(certFile)}`,
    `    client-key-data: ${b64(keyFile)}`,
    "contexts:",
    "- name: default",
    "  context:",
    "    cluster: cluster",
    `    user: ${user}`,
    "current-context: default",
    "",
  ].join("\n");
}

export function createPki(): void {
  for (const c of CLUSTERS) {
    const dir = join(paths.pki, c);
    mkdirSync(dir, { recursive: true });
    ca(dir, `cpenv-${c}-ca`);
    leaf(
      dir,
      "apiserver",
      `/CN=kube-apiserver`,
      "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n" +
        `subjectAltName=IP:${HOST_ADDR[c]},IP:127.0.0.1,IP:${firstServiceIp(SERVICE_CIDR[c])},DNS:localhost,DNS:kubernetes,` +
        `DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n`,
    );
    const client =
      "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n";
    leaf(dir, "admin", "/O=system:masters/CN=cpenv-admin", client);
    // The kubelet API (test/infra/k8s/kubelet-api) as in a real cluster: a serving certificate for the
    // node's address, which kube-apiserver verifies against the cluster CA
    // (--kubelet-certificate-authority), and kube-apiserver's client certificate towards it
    // (--kubelet-client-certificate), which the kubelet API requires.
    leaf(
      dir,
      "kubelet",
      `/O=system:nodes/CN=system:node:${c}`,
      "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n" +
        `subjectAltName=IP:${HOST_ADDR[c]},DNS:${c}\n`,
    );
    leaf(dir, "apiserver-kubelet-client", `/O=system:masters/CN=${KUBELET_CLIENT_CN}`, client);
    // The front proxy, as kubeadm and kind set it up: a CA of its own (--requestheader-client-ca-file,
    // published in kube-system/extension-apiserver-authentication) and the apiserver's client
    // certificate with which the aggregator calls aggregated APIs (--proxy-client-cert-file).
    const frontProxy = join(dir, "front-proxy");
    mkdirSync(frontProxy, { recursive: true });
    ca(frontProxy, `cpenv-${c}-front-proxy-ca`);
    leaf(frontProxy, "client", `/CN=${FRONT_PROXY_CLIENT_CN}`, client);
    key(join(dir, "sa.key"));
    ossl(["pkey", "-in", join(dir, "sa.key"), "-pubout", "-out", join(dir, "sa.pub")]);
    if (c === "hub") {
      leaf(dir, "bootstrap", `/O=system:bootstrappers:cpenv/CN=${BOOTSTRAP_USER}`, client);
      leaf(
        dir,
        "webhook",
        "/CN=cpenv-addon-webhook",
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n" +
          `subjectAltName=IP:127.0.0.1,IP:${HOST_ADDR.hub},DNS:localhost\n`,
      );
    }
    // In-namespace kubeconfig (127.0.0.1) for the cluster's own controllers.
    writeFileSync(
      join(dir, "local.kubeconfig"),
      kubeconfig(
        "https://127.0.0.1:6443",
        join(dir, "ca.crt"),
        join(dir, "admin.crt"),
        join(dir, "admin.key"),
        "cpenv-admin",
      ),
    );
  }
}

/** Common name of the aggregator's client certificate (--requestheader-allowed-names). */
export const FRONT_PROXY_CLIENT_CN = "cpenv-front-proxy";

/** Common name of kube-apiserver's client certificate towards the kubelet API (as kubeadm names it). */
export const KUBELET_CLIENT_CN = "kube-apiserver-kubelet-client";

export const pkiFile = (c: ClusterName, f: string): string => join(paths.pki, c, f);
