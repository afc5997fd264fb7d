/**
 * The gateway endpoint's Service dials go through the agent's destination policy after the name
 * is resolved: an ExternalName-like answer pointing at a metadata address, at the agent's own
 * port on this host, or at a NAT64/6to4 spelling of either is refused before any connection,
 * with the policy's refusal as the error; an allowed Service is reached as before.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import * as http from "@cluster-proxy/kit/http";
import type { AddressInfo, LookupFunction } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import {
  DESTINATION_POLICY_REFUSAL,
  DestinationPolicy,
  DestinationRefusedError,
} from "../destination/destination-policy.js";
import { parseServiceTarget, type GatewayTarget } from "./gateway-request.js";
import { ClusterUpstreams, FILE_RECHECK_MS, type Upstream } from "./gateway-upstreams.js";
import { createCertificateAuthority } from "@cluster-proxy/pki";
import { loadCaFile, TlsFileError } from "@cluster-proxy/tunnel";

/** A server counting the requests it gets. */
async function standIn(): Promise<{ server: http.Server; port: number; hits: string[] }> {
  const hits: string[] = [];
  const server = http.createServer((req, res) => {
    hits.push(req.url ?? "");
    res.end("stand-in\n");
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return { server, port: (server.address() as AddressInfo).port, hits };
}

/** One GET through an upstream as the endpoint opens it: the answer's body, or the error. */
function get(upstream: Upstream): Promise<string | Error> {
  return new Promise((resolve) => {
    const req = http.request({
      host: upstream.host,
      port: upstream.port,
      path: "/",
      agent: upstream.agent,
      ...(upstream.lookup ? { lookup: upstream.lookup } : {}),
    });
    req.on("error", resolve);
    req.on("response", (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (body += d));
      res.on("end", () => resolve(body));
    });
    req.end();
  });
}

function service(text: string): GatewayTarget {
  const t = parseServiceTarget(text);
  assert.ok(!("refused" in t), text);
  return t;
}

describe("gateway upstreams and the destination policy", () => {
  let dir: string;
  let web: Awaited<ReturnType<typeof standIn>>;
  let admin: Awaited<ReturnType<typeof standIn>>;
  let upstreams: ClusterUpstreams;
  const lookedUp: string[] = [];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cp-upstreams-"));
    await writeFile(join(dir, "token"), "sa-token\n");
    web = await standIn();
    admin = await standIn();
    // Cluster DNS as the test wants it: ExternalName-like answers for some Services.
    const answers: Record<string, string[]> = {
      "web.apps.svc": ["127.0.0.1"],
      "metadata.apps.svc": ["169.254.169.254"],
      "nat64.apps.svc": ["64:ff9b::a9fe:a9fe"],
      "sixtofour.apps.svc": ["2002:a9fe:a9fe::1"],
      "mapped.apps.svc": ["::ffff:169.254.169.254"],
      "admin.apps.svc": ["127.0.0.1"],
      "admin-nat64.apps.svc": ["64:ff9b::7f00:1"],
      "mixed.apps.svc": ["169.254.169.254", "127.0.0.1"],
    };
    const lookup: LookupFunction = (hostname, options, callback) => {
      lookedUp.push(hostname);
      const addresses = (answers[hostname] ?? []).map((address) => ({
        address,
        family: address.includes(":") ? 6 : 4,
      }));
      if (addresses.length === 0) {
        callback(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: "ENOTFOUND" }), "");
      } else if (options.all) callback(null, addresses);
      else callback(null, addresses[0]!.address, addresses[0]!.family);
    };
    upstreams = new ClusterUpstreams({
      apiserverUrl: new URL("http://127.0.0.1:1"),
      serviceAccountDir: dir,
      serviceCaFile: "",
      serviceLookup: lookup,
      // The agent's default policy, with the admin stand-in's port as the agent's own port.
      destinationPolicy: DestinationPolicy.builtIn([admin.port]),
    });
  });
  after(async () => {
    upstreams.close();
    web.server.close();
    admin.server.close();
    await rm(dir, { recursive: true, force: true });
  });

  test("a Service the policy allows is reached", async () => {
    const answer = await get(await upstreams.resolve(service(`http://web.apps.svc:${web.port}`)));
    assert.equal(answer, "stand-in\n");
    assert.equal(web.hits.length, 1);
  });

  test("a Service resolving to a metadata address, in any spelling, is refused before connecting", async () => {
    for (const name of ["metadata", "nat64", "sixtofour", "mapped"]) {
      const answer = await get(await upstreams.resolve(service(`http://${name}.apps.svc:80`)));
      assert.ok(answer instanceof DestinationRefusedError, `${name}: ${String(answer)}`);
      assert.match(
        answer.message,
        new RegExp(`^dial to ${name}\\.apps\\.svc:80 \\(resolves to .*\\) ${DESTINATION_POLICY_REFUSAL}`),
      );
      assert.match(answer.message, /denied by the default policy \(link-local/);
    }
  });

  test("a Service resolving to the agent's own port on this host is refused; nothing reaches it", async () => {
    for (const name of ["admin", "admin-nat64"]) {
      const answer = await get(await upstreams.resolve(service(`http://${name}.apps.svc:${admin.port}`)));
      assert.ok(answer instanceof DestinationRefusedError, `${name}: ${String(answer)}`);
      assert.match(answer.message, /the agent's own ports on this host/);
    }
    assert.deepEqual(admin.hits, []);
  });

  test("of a name's addresses only the allowed ones are dialled", async () => {
    const before = web.hits.length;
    const answer = await get(await upstreams.resolve(service(`http://mixed.apps.svc:${web.port}`)));
    assert.equal(answer, "stand-in\n");
    assert.equal(web.hits.length, before + 1);
  });

  test("the kube-apiserver is the configured URL, not judged; its token is read", async () => {
    const kube = await upstreams.resolve({ kind: "kube", credential: "impersonate" });
    assert.equal(kube.token, "sa-token");
    assert.equal(kube.lookup, undefined);
  });
});

describe("the token and CA files are read once per recheck interval, not per request", () => {
  const kube: GatewayTarget = { kind: "kube", credential: "impersonate" };
  let caPem = "";
  before(async () => {
    caPem = (await createCertificateAuthority({ commonName: "sa-ca", validityDays: 1 })).certPem;
  });

  test("requests within the interval share one read; the first after it reads the rotated token", async () => {
    const reads: string[] = [];
    let token = "sa-token-1\n";
    let clock = 0;
    const upstreams = new ClusterUpstreams(
      { apiserverUrl: new URL("https://127.0.0.1:1"), serviceAccountDir: "/sa", serviceCaFile: "" },
      (path) => {
        reads.push(path);
        return Promise.resolve(Buffer.from(path.endsWith("token") ? token : caPem));
      },
      () => clock,
    );
    try {
      const first = await Promise.all([upstreams.resolve(kube), upstreams.resolve(kube)]);
      clock = FILE_RECHECK_MS - 1;
      token = "sa-token-2\n";
      const stillFirst = await upstreams.resolve(kube);
      assert.deepEqual(
        [...first, stillFirst].map((u) => u.token),
        ["sa-token-1", "sa-token-1", "sa-token-1"],
      );
      assert.deepEqual(reads, ["/sa/token", "/sa/ca.crt"]);
      // The same bundle: the same pools.
      assert.equal(stillFirst.agent, first[0]?.agent);
      clock = FILE_RECHECK_MS;
      const rotated = await upstreams.resolve(kube);
      assert.equal(rotated.token, "sa-token-2");
      assert.deepEqual(reads, ["/sa/token", "/sa/ca.crt", "/sa/token", "/sa/ca.crt"]);
      assert.equal(rotated.agent, first[0]?.agent, "an unchanged CA keeps its pool");
    } finally {
      upstreams.close();
    }
  });

  test("a bad CA file on re-read is the TlsFileError (CP_ERR_TLS_FILE) start gives, naming the flag", async () => {
    let ca = caPem;
    let clock = 0;
    const read = (path: string): Promise<Buffer> =>
      Promise.resolve(Buffer.from(path.endsWith("token") ? "sa-token\n" : ca));
    const upstreams = new ClusterUpstreams(
      { apiserverUrl: new URL("https://127.0.0.1:1"), serviceAccountDir: "/sa", serviceCaFile: "" },
      read,
      () => clock,
    );
    try {
      await upstreams.resolve(kube);
      ca = "not a certificate\n";
      clock = FILE_RECHECK_MS;
      const atStart = await loadCaFile({ flag: "--service-account-dir", path: "/sa/ca.crt" }, read).then(
        () => assert.fail("a bad CA was accepted"),
        (err: unknown) => err,
      );
      assert.ok(atStart instanceof TlsFileError);
      await assert.rejects(upstreams.resolve(kube), (err: unknown) => {
        assert.ok(err instanceof TlsFileError, String(err));
        assert.equal(err.code, "CP_ERR_TLS_FILE");
        assert.equal(err.message, atStart.message);
        assert.match(err.message, /^--service-account-dir: \/sa\/ca\.crt: holds no PEM certificate/);
        return true;
      });
    } finally {
      upstreams.close();
    }
  });

  test("a failed read is not kept: the next request reads again", async () => {
    let fail = true;
    let reads = 0;
    const upstreams = new ClusterUpstreams(
      { apiserverUrl: new URL("http://127.0.0.1:1"), serviceAccountDir: "/sa", serviceCaFile: "" },
      () => {
        reads++;
        return fail ? Promise.reject(new Error("ENOENT")) : Promise.resolve(Buffer.from("sa-token\n"));
      },
      () => 0,
    );
    try {
      await assert.rejects(upstreams.resolve(kube), /cannot read \/sa\/token/);
      fail = false;
      assert.equal((await upstreams.resolve(kube)).token, "sa-token");
      assert.equal(reads, 2);
    } finally {
      upstreams.close();
    }
  });
});
