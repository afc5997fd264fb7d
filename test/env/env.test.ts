// The multi-cluster environment end to end: real etcd, kube-apiservers, OCM hub and klusterlets in
// isolated network namespaces, plus the process kubelet. Needs root and Go (builds from the Go
// module proxy into .cache/k8s-binaries on first use); fails with the reason when either is missing.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { HOST_ADDR } from "./config.js";
import { waitFor } from "./exec.js";
import { type TestEnv, startTestEnv } from "./fixture.js";

// Connect to host:port from inside a namespace; prints "connected" or "failed: <reason>".
const probeScript = (host: string, port: number, timeoutMs: number): string =>
  `const s=require("net").connect({host:${JSON.stringify(host)},port:${port}});` +
  `const t=setTimeout(()=>{console.log("failed: timeout");process.exit(0)},${timeoutMs});` +
  `s.on("connect",()=>{console.log("connected");s.destroy();clearTimeout(t)});` +
  `s.on("error",e=>{console.log("failed: "+e.code);clearTimeout(t)});`;

const httpGetScript = (url: string): string =>
  `require("http").get(${JSON.stringify(url)},{timeout:3000},r=>{let b="";r.on("data",d=>b+=d);r.on("end",()=>console.log(r.statusCode+" "+b))})` +
  `.on("error",e=>console.log("error "+e.code)).on("timeout",function(){this.destroy();console.log("error timeout")});`;

describe("multi-cluster test environment", { timeout: 90 * 60_000 }, () => {
  let env: TestEnv;

  before(
    async () => {
      const t0 = Date.now();
      env = await startTestEnv();
      console.log(
        `environment ${env.reused ? "reused" : "ready"} in ${((Date.now() - t0) / 1000).toFixed(1)}s (dir ${env.dir})`,
      );
    },
    { timeout: 90 * 60_000 },
  );

  after(async () => {
    await env?.close();
  });

  test("mc1 and mc2 are Joined and Available on the hub", async () => {
    for (const name of ["mc1", "mc2"]) {
      const mc = (await env.custom("hub").getClusterCustomObject({
        group: "cluster.open-cluster-management.io",
        version: "v1",
        plural: "managedclusters",
        name,
      })) as { spec: { hubAcceptsClient: boolean }; status: { conditions: { type: string; status: string }[] } };
      const cond = Object.fromEntries(mc.status.conditions.map((c) => [c.type, c.status]));
      assert.equal(mc.spec.hubAcceptsClient, true);
      assert.equal(cond.HubAcceptedManagedCluster, "True", `${name}: ${JSON.stringify(cond)}`);
      assert.equal(cond.ManagedClusterJoined, "True", `${name}: ${JSON.stringify(cond)}`);
      assert.equal(cond.ManagedClusterConditionAvailable, "True", `${name}: ${JSON.stringify(cond)}`);
    }
    // The same through the printed kubeconfig + kubectl, from the lab namespace.
    const out = env.kubectl("hub", ["get", "managedclusters", "-o", "name"]).stdout;
    assert.match(out, /managedcluster\.cluster\.open-cluster-management\.io\/mc1/);
    assert.match(out, /managedcluster\.cluster\.open-cluster-management\.io\/mc2/);
  });

  test("kube-apiserver reports the pinned version", () => {
    const v = JSON.parse(env.kubectl("mc1", ["get", "--raw", "/version"]).stdout) as {
      gitVersion: string;
      major: string;
    };
    assert.match(v.gitVersion, /^v1\.36\.\d+$/);
    assert.equal(v.major, "1");
  });

  test("the addon API is served as v1alpha1 and v1beta1 through the OCM conversion webhook", async () => {
    const name = `cpenv-addon-${process.pid}`;
    const hub = env.custom("hub");
    const group = "addon.open-cluster-management.io";
    await hub.createClusterCustomObject({
      group,
      version: "v1alpha1",
      plural: "clustermanagementaddons",
      body: {
        apiVersion: `${group}/v1alpha1`,
        kind: "ClusterManagementAddOn",
        metadata: { name },
        spec: { addOnMeta: { displayName: "cpenv test" }, installStrategy: { type: "Manual" } },
      },
    });
    try {
      const v1beta1 = (await hub.getClusterCustomObject({
        group,
        version: "v1beta1",
        plural: "clustermanagementaddons",
        name,
      })) as {
        apiVersion: string;
        spec: { addOnMeta?: { displayName?: string } };
      };
      assert.equal(v1beta1.apiVersion, `${group}/v1beta1`);
      assert.equal(v1beta1.spec.addOnMeta?.displayName, "cpenv test");
    } finally {
      await hub
        .deleteClusterCustomObject({ group, version: "v1alpha1", plural: "clustermanagementaddons", name })
        .catch(() => undefined);
    }
  });

  test("a ManifestWork on the hub is applied in mc1 by the real work agent", async () => {
    const name = `cpenv-work-${process.pid}`;
    const work = {
      apiVersion: "work.open-cluster-management.io/v1",
      kind: "ManifestWork",
      metadata: { name, namespace: "mc1" },
      spec: {
        workload: {
          manifests: [
            {
              apiVersion: "v1",
              kind: "ConfigMap",
              metadata: { name, namespace: "default" },
              data: { hello: "from-the-hub" },
            },
          ],
        },
      },
    };
    const hub = env.custom("hub");
    await hub.createNamespacedCustomObject({
      group: "work.open-cluster-management.io",
      version: "v1",
      namespace: "mc1",
      plural: "manifestworks",
      body: work,
    });
    try {
      const cm = await waitFor("the ConfigMap in mc1", 90_000, async () => {
        try {
          return await env.core("mc1").readNamespacedConfigMap({ name, namespace: "default" });
        } catch {
          return null;
        }
      });
      assert.equal(cm.data?.hello, "from-the-hub");
      await waitFor("ManifestWork Applied+Available", 60_000, async () => {
        const w = (await hub.getNamespacedCustomObject({
          group: "work.open-cluster-management.io",
          version: "v1",
          namespace: "mc1",
          plural: "manifestworks",
          name,
        })) as {
          status?: { conditions?: { type: string; status: string }[] };
        };
        const c = Object.fromEntries((w.status?.conditions ?? []).map((x) => [x.type, x.status]));
        return c.Applied === "True" && c.Available === "True";
      });
    } finally {
      await hub
        .deleteNamespacedCustomObject({
          group: "work.open-cluster-management.io",
          version: "v1",
          namespace: "mc1",
          plural: "manifestworks",
          name,
        })
        .catch(() => undefined);
    }
    // Deleting the work removes the ConfigMap from mc1 again.
    await waitFor("the ConfigMap to be removed from mc1", 90_000, async () => {
      try {
        await env.core("mc1").readNamespacedConfigMap({ name, namespace: "default" });
        return false;
      } catch {
        return true;
      }
    });
  });

  test("the process kubelet runs any Deployment in mc1, with its ConfigMap, Secret, env and restarts", async () => {
    const name = `cpenv-app-${process.pid}`;
    const ns = "default";
    await env.core("mc1").createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name }, data: { "greeting.txt": "hello-from-configmap" } },
    });
    await env.core("mc1").createNamespacedSecret({
      namespace: ns,
      body: { metadata: { name }, stringData: { token: "secret-v1" } },
    });
    const server =
      `const fs=require("fs");const http=require("http");` +
      `http.createServer((q,s)=>{if(q.url==="/exit"){s.end("bye");setTimeout(()=>process.exit(3),50);return}` +
      `if(q.url==="/secret"){s.end(fs.readFileSync(process.argv[2]+"/token","utf8")+" "+process.pid);return}` +
      `s.end(fs.readFileSync(process.argv[1]+"/greeting.txt","utf8")+" "+process.env.POD_NS+" "+process.pid)}).listen(18080,"0.0.0.0");`;
    // No label or annotation: the process kubelet runs every Deployment whose image it can map.
    await env.apps("mc1").createNamespacedDeployment({
      namespace: ns,
      body: {
        metadata: { name },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: name } },
          template: {
            metadata: { labels: { app: name } },
            spec: {
              containers: [
                {
                  name: "app",
                  image: "cpenv.local/node:20",
                  command: ["node"],
                  args: ["-e", server, "/etc/app-config", "/etc/app-secret"],
                  env: [{ name: "POD_NS", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } }],
                  volumeMounts: [
                    { name: "cfg", mountPath: "/etc/app-config" },
                    { name: "sec", mountPath: "/etc/app-secret", readOnly: true },
                  ],
                  readinessProbe: { tcpSocket: { port: 18080 }, periodSeconds: 1 },
                },
              ],
              volumes: [
                { name: "cfg", configMap: { name } },
                { name: "sec", secret: { secretName: name } },
              ],
            },
          },
        },
      },
    });
    try {
      const ready = async (): Promise<boolean> => {
        const d = await env.apps("mc1").readNamespacedDeployment({ name, namespace: ns });
        const avail = d.status?.conditions?.find((c) => c.type === "Available")?.status;
        return (
          d.status?.readyReplicas === 1 &&
          d.status?.availableReplicas === 1 &&
          avail === "True" &&
          d.status?.observedGeneration === d.metadata?.generation
        );
      };
      await waitFor("Deployment ready in mc1", 60_000, ready);
      // It runs in mc1's network: reachable from the lab at mc1's address.
      const url = `http://${HOST_ADDR.mc1}:18080/`;
      const get = (path: string): string =>
        env.exec("lab", process.execPath, ["-e", httpGetScript(`${url}${path}`)]).stdout.trim();
      const first = get("");
      assert.match(first, /^200 hello-from-configmap default \d+$/);
      const pid1 = first.split(" ").pop()!;
      // A changed Secret reaches the running process's volume in place, without a restart.
      assert.equal(get("secret"), `200 secret-v1 ${pid1}`);
      await env.core("mc1").replaceNamespacedSecret({
        name,
        namespace: ns,
        body: { metadata: { name }, stringData: { token: "secret-v2" } },
      });
      await waitFor("the new Secret content in the running process's volume", 30_000, () =>
        get("secret") === `200 secret-v2 ${pid1}` ? true : null,
      );
      // Make it exit: the kubelet restarts it and readiness comes back.
      get("exit");
      const second = await waitFor("the restarted process", 60_000, () => {
        const out = get("");
        return out.startsWith("200 ") && out.split(" ").pop() !== pid1 ? out : null;
      });
      assert.match(second, /^200 hello-from-configmap default \d+$/);
      await waitFor("Deployment ready again", 60_000, ready);
    } finally {
      await env
        .apps("mc1")
        .deleteNamespacedDeployment({ name, namespace: ns })
        .catch(() => undefined);
      await env
        .core("mc1")
        .deleteNamespacedConfigMap({ name, namespace: ns })
        .catch(() => undefined);
      await env
        .core("mc1")
        .deleteNamespacedSecret({ name, namespace: ns })
        .catch(() => undefined);
    }
    await waitFor("the process to stop after the Deployment is deleted", 30_000, () => {
      const out = env
        .exec("lab", process.execPath, ["-e", httpGetScript(`http://${HOST_ADDR.mc1}:18080/`)])
        .stdout.trim();
      return out.startsWith("error");
    });
  });

  test("a Deployment whose image the process kubelet cannot map is unavailable, saying why", async () => {
    const name = `cpenv-unmapped-${process.pid}`;
    await env.apps("mc1").createNamespacedDeployment({
      namespace: "default",
      body: {
        metadata: { name },
        spec: {
          selector: { matchLabels: { app: name } },
          template: {
            metadata: { labels: { app: name } },
            spec: { containers: [{ name: "app", image: "registry.example/some/thing:1.0" }] },
          },
        },
      },
    });
    try {
      // The first status (pod just created) says only "0/1 ready"; the reason follows once the
      // kubelet tried to start the pod.
      const cond = await waitFor("Available=False naming the image", 30_000, async () => {
        const d = await env.apps("mc1").readNamespacedDeployment({ name, namespace: "default" });
        const c = d.status?.conditions?.find((x) => x.type === "Available");
        return c?.status === "False" && /not mapped/.test(c.message ?? "") ? c : null;
      });
      assert.match(cond.message ?? "", /image registry\.example\/some\/thing:1\.0 of container app is not mapped/);
    } finally {
      await env
        .apps("mc1")
        .deleteNamespacedDeployment({ name, namespace: "default" })
        .catch(() => undefined);
    }
  });

  test("the apiserver certificates carry no cluster-name SAN (real ones do not)", () => {
    for (const c of ["hub", "mc1", "mc2"] as const) {
      const script =
        `const s=require("tls").connect({host:${JSON.stringify(HOST_ADDR[c])},port:6443,rejectUnauthorized:false},()=>{` +
        `console.log(s.getPeerCertificate().subjectaltname);s.destroy()});s.on("error",e=>console.log("error "+e.code));`;
      const sans = env.exec("lab", process.execPath, ["-e", script]).stdout.trim();
      assert.match(sans, /DNS:kubernetes\.default\.svc/, `${c}: ${sans}`);
      const names = sans.split(", ").map((x) => x.replace(/^(DNS|IP Address):/, ""));
      for (const cluster of ["hub", "mc1", "mc2"])
        assert.ok(!names.includes(cluster), `${c}'s certificate names ${cluster}: ${sans}`);
    }
  });

  test("the hub cannot open a connection to mc1's apiserver; mc1 reaches the hub's", () => {
    const hubToMc1 = env.exec("hub", process.execPath, ["-e", probeScript(HOST_ADDR.mc1, 6443, 3000)]).stdout.trim();
    assert.equal(hubToMc1, "failed: timeout", "new connections from the hub into mc1 must be dropped");
    const hubToMc2 = env.exec("hub", process.execPath, ["-e", probeScript(HOST_ADDR.mc2, 6443, 3000)]).stdout.trim();
    assert.equal(hubToMc2, "failed: timeout");
    const mc1ToHub = env.exec("mc1", process.execPath, ["-e", probeScript(HOST_ADDR.hub, 6443, 3000)]).stdout.trim();
    assert.equal(mc1ToHub, "connected");
    // mc1's apiserver is up and reachable from elsewhere (the lab), so the hub's failure is the firewall.
    const labToMc1 = env.exec("lab", process.execPath, ["-e", probeScript(HOST_ADDR.mc1, 6443, 3000)]).stdout.trim();
    assert.equal(labToMc1, "connected");
    // Managed clusters cannot reach each other, and no namespace has a default route.
    const mc1ToMc2 = env.exec("mc1", process.execPath, ["-e", probeScript(HOST_ADDR.mc2, 6443, 3000)]).stdout.trim();
    assert.match(mc1ToMc2, /^failed: (ENETUNREACH|EHOSTUNREACH|timeout)/);
    for (const where of ["hub", "mc1", "mc2", "lab"] as const) {
      const routes = env.exec(where, "ip", ["route", "show", "default"]).stdout.trim();
      assert.equal(routes, "", `${where} has a default route`);
    }
  });
});
