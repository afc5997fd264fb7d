// The multi-cluster environment end to end: real etcd, kube-apiservers, OCM hub and klusterlets in
// isolated network namespaces, plus the process kubelet. Needs root and Go (builds from the Go
// module proxy into .cache/k8s-binaries on first use); fails with the reason when either is missing.
import * as k8s from "@kubernetes/client-node";
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { HOST_ADDR, LB_INGRESS_ANNOTATION } from "../infra/env/config.js";
import { waitFor } from "../infra/env/exec.js";
import { type PodCensusWatch, watchPodCensus } from "../infra/env/pod-census.js";
import { templateHash } from "../infra/env/rollout.js";
import { type TestEnv, startTestEnv } from "../infra/env/fixture.js";

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
    let url = "";
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
      // It runs in its own network namespace with a pod address from mc1's range, routed from the lab.
      const podIp = await waitFor("the pod's address", 30_000, async () => {
        const list = await env.core("mc1").listNamespacedPod({ namespace: ns, labelSelector: `app=${name}` });
        return list.items[0]?.status?.podIP;
      });
      assert.ok(podIp.startsWith("10.200.21."), podIp);
      // One pod, of the Deployment's template as the API serves it (no spurious rollout).
      const [pod] = (await env.core("mc1").listNamespacedPod({ namespace: ns, labelSelector: `app=${name}` })).items;
      const dep = await env.apps("mc1").readNamespacedDeployment({ name, namespace: ns });
      assert.equal(pod?.metadata?.labels?.["pod-template-hash"], templateHash(dep));
      assert.equal(dep.status?.replicas, 1);
      url = `http://${podIp}:18080/`;
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
    await waitFor("the pod to go after the Deployment is deleted", 60_000, async () => {
      const list = await env.core("mc1").listNamespacedPod({ namespace: ns, labelSelector: `app=${name}` });
      return list.items.length === 0;
    });
    await waitFor("the process to stop after the Deployment is deleted", 30_000, () =>
      env
        .exec("lab", process.execPath, ["-e", httpGetScript(url)])
        .stdout.trim()
        .startsWith("error"),
    );
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

  // ------------------------------------------------------------ pod network, Services, DNS, LoadBalancers

  // An HTTP server on :8080 answering "<pod name> <pod ip>"; /healthz fails after /unready.
  const echoServer =
    `const http=require("http");let ok=true;http.createServer((q,s)=>{` +
    `if(q.url==="/healthz"){s.statusCode=ok?200:500;return s.end(ok?"ok":"unready")}` +
    `if(q.url==="/unready"){ok=false;return s.end("ok")}` +
    `s.end(process.env.POD_NAME+" "+process.env.POD_IP)}).listen(8080,"0.0.0.0");`;

  // n sequential GETs, each on a new connection; prints {"<body>": count, ...}.
  const spreadScript =
    `const http=require("http");const url=process.argv[1];const n=+process.argv[2];const seen={};let i=0;` +
    `const add=k=>{seen[k]=(seen[k]||0)+1;one()};` +
    `function one(){if(i++>=n){console.log(JSON.stringify(seen));return}` +
    `http.get(url,{agent:false,timeout:3000},r=>{let b="";r.on("data",d=>b+=d);r.on("end",()=>add(b))})` +
    `.on("error",e=>add("error "+e.code)).on("timeout",function(){this.destroy()})}one();`;

  const spread = (out: string): Record<string, number> =>
    JSON.parse(out.trim().split("\n").pop() ?? "{}") as Record<string, number>;

  async function echoDeployment(c: "hub" | "mc1", name: string, replicas: number): Promise<void> {
    await env.apps(c).createNamespacedDeployment({
      namespace: "default",
      body: {
        metadata: { name },
        spec: {
          replicas,
          selector: { matchLabels: { app: name } },
          template: {
            metadata: { labels: { app: name } },
            spec: {
              containers: [
                {
                  name: "echo",
                  image: "cpenv.local/node",
                  command: ["node"],
                  args: ["-e", echoServer],
                  ports: [{ name: "http", containerPort: 8080 }],
                  env: [
                    { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
                    { name: "POD_IP", valueFrom: { fieldRef: { fieldPath: "status.podIP" } } },
                  ],
                  readinessProbe: {
                    httpGet: { path: "/healthz", port: "http" },
                    periodSeconds: 1,
                    failureThreshold: 1,
                  },
                },
              ],
            },
          },
        },
      },
    });
    await waitFor(`${c}/${name}: ${replicas} ready`, 90_000, async () => {
      const d = await env.apps(c).readNamespacedDeployment({ name, namespace: "default" });
      return d.status?.readyReplicas === replicas && d.status.observedGeneration === d.metadata?.generation;
    });
  }

  async function readyPods(c: "hub" | "mc1", app: string): Promise<{ name: string; ip: string; ready: boolean }[]> {
    const list = await env.core(c).listNamespacedPod({ namespace: "default", labelSelector: `app=${app}` });
    // Not those being stopped (marked terminating: a rollout or a user deleted them).
    return list.items
      .filter((p) => !p.metadata?.deletionTimestamp)
      .map((p) => ({
        name: p.metadata!.name!,
        ip: p.status?.podIP ?? "",
        ready: p.status?.conditions?.find((x) => x.type === "Ready")?.status === "True",
      }));
  }

  const cleanup = async (c: "hub" | "mc1", name: string): Promise<void> => {
    await env
      .apps(c)
      .deleteNamespacedDeployment({ name, namespace: "default" })
      .catch(() => undefined);
    await env
      .core(c)
      .deleteNamespacedService({ name, namespace: "default" })
      .catch(() => undefined);
  };

  test("three replicas get three pod addresses; a ClusterIP Service spreads over the ready ones; cluster DNS", async () => {
    const name = `cpenv-web-${process.pid}`;
    try {
      await echoDeployment("mc1", name, 3);
      const pods = await waitFor("three Pods with addresses, Ready", 30_000, async () => {
        const l = await readyPods("mc1", name);
        return l.length === 3 && l.every((p) => p.ip && p.ready) ? l : null;
      });
      const ips = new Set(pods.map((p) => p.ip));
      assert.equal(ips.size, 3, JSON.stringify(pods));
      for (const p of pods) {
        assert.match(p.ip, /^10\.200\.21\.\d+$/);
        // Each answers on its own address and reports it through the status.podIP fieldRef.
        const out = env.exec("lab", process.execPath, ["-e", httpGetScript(`http://${p.ip}:8080/`)]).stdout.trim();
        assert.equal(out, `200 ${p.name} ${p.ip}`);
      }

      const svc = await env.core("mc1").createNamespacedService({
        namespace: "default",
        body: {
          metadata: { name },
          spec: { selector: { app: name }, ports: [{ name: "web", port: 80, targetPort: "http" }] },
        },
      });
      const vip = svc.spec!.clusterIP!;
      assert.match(vip, /^10\.200\.101\.\d+$/);
      await waitFor("an EndpointSlice with three ready endpoints", 30_000, async () => {
        const l = await env
          .kubeConfig("mc1")
          .makeApiClient(k8s.DiscoveryV1Api)
          .listNamespacedEndpointSlice({
            namespace: "default",
            labelSelector: `kubernetes.io/service-name=${name}`,
          });
        const eps = l.items.flatMap((x) => x.endpoints ?? []);
        return eps.length === 3 && eps.every((e) => e.conditions?.ready) && l.items[0]?.ports?.[0]?.port === 8080;
      });

      // From the cluster's host namespace: every pod gets connections.
      const fromNode = await waitFor("connections from mc1 spread over all three pods", 30_000, () => {
        const seen = spread(env.exec("mc1", process.execPath, ["-e", spreadScript, `http://${vip}/`, "30"]).stdout);
        return pods.every((p) => seen[`${p.name} ${p.ip}`]) ? seen : null;
      });
      assert.equal(
        Object.values(fromNode).reduce((a, b) => a + b, 0),
        30,
        JSON.stringify(fromNode),
      );

      // From a pod, by Service name through the cluster DNS (and hairpin back to itself).
      const inPod = (args: string[]) => env.podExec("mc1", "default", pods[0]!.name, process.execPath, args);
      const fromPod = spread(
        (await inPod(["-e", spreadScript, `http://${name}.default.svc.cluster.local/`, "30"])).stdout,
      );
      assert.ok(
        pods.every((p) => fromPod[`${p.name} ${p.ip}`]),
        JSON.stringify(fromPod),
      );
      const short = spread((await inPod(["-e", spreadScript, `http://${name}/`, "6"])).stdout);
      assert.equal(Object.keys(short).filter((k) => k.startsWith("error")).length, 0, JSON.stringify(short));

      // kubernetes.default.svc resolves to the kubernetes Service and reaches mc1's apiserver, whose
      // certificate is valid for that name.
      const k8sSvc = await env.core("mc1").readNamespacedService({ name: "kubernetes", namespace: "default" });
      const ca = join(env.dir, "pki", "mc1", "ca.crt");
      const apiScript =
        `require("dns").lookup("kubernetes.default.svc",(e,a)=>{console.log("lookup "+(e?e.code:a));` +
        `require("https").get({host:"kubernetes.default.svc",port:443,path:"/version",ca:require("fs").readFileSync(process.argv[1]),timeout:5000},` +
        `r=>{let b="";r.on("data",d=>b+=d);r.on("end",()=>console.log(r.statusCode+" "+JSON.parse(b).gitVersion))})` +
        `.on("error",e=>console.log("error "+e.code))})`;
      const api = (await inPod(["-e", apiScript, ca])).stdout.trim().split("\n");
      assert.equal(api[0], `lookup ${k8sSvc.spec!.clusterIP}`);
      assert.match(api[1] ?? "", /^200 v1\.36\.\d+$/);

      // One pod's readiness fails: it leaves the endpoints and gets no new connections.
      const sick = pods[1]!;
      env.exec("lab", process.execPath, ["-e", httpGetScript(`http://${sick.ip}:8080/unready`)]);
      await waitFor("the unready pod marked not ready", 30_000, async () => {
        const l = await readyPods("mc1", name);
        return l.find((p) => p.name === sick.name)?.ready === false;
      });
      // 30 connections a sample: with the pod still in the table, (2/3)^30 (5e-6) is the chance a
      // sample misses it (with 10 it was 2%, and a slow kubelet gave the poll many tries to be lucky).
      await waitFor("connections to avoid the unready pod", 60_000, () => {
        const seen = spread(env.exec("mc1", process.execPath, ["-e", spreadScript, `http://${vip}/`, "30"]).stdout);
        return !seen[`${sick.name} ${sick.ip}`];
      });
      const after = spread(env.exec("mc1", process.execPath, ["-e", spreadScript, `http://${vip}/`, "30"]).stdout);
      assert.equal(after[`${sick.name} ${sick.ip}`], undefined, JSON.stringify(after));
      for (const p of [pods[0]!, pods[2]!]) assert.ok(after[`${p.name} ${p.ip}`], JSON.stringify(after));
      const d = await env.apps("mc1").readNamespacedDeployment({ name, namespace: "default" });
      assert.equal(d.status?.readyReplicas, 2);
    } finally {
      await cleanup("mc1", name);
    }
  });

  test("a template change rolls out within maxSurge/maxUnavailable; a deleted Pod is replaced", async () => {
    const name = `cpenv-roll-${process.pid}`;
    let census: PodCensusWatch | undefined;
    try {
      await echoDeployment("mc1", name, 2);
      await env.apps("mc1").patchNamespacedDeployment(
        {
          name,
          namespace: "default",
          body: [
            {
              op: "add",
              path: "/spec/strategy",
              value: { type: "RollingUpdate", rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
            },
          ],
        },
        k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.JsonPatch),
      );
      const before = new Set((await readyPods("mc1", name)).map((p) => p.name));
      // Every state of the Pods, from the apiserver's watch: a poll could miss the brief surge.
      const watch = await watchPodCensus(env.kubeConfig("mc1"), "default", `app=${name}`);
      census = watch;
      await env.apps("mc1").patchNamespacedDeployment(
        {
          name,
          namespace: "default",
          body: [{ op: "add", path: "/spec/template/metadata/annotations", value: { "cpenv.test/rev": "2" } }],
        },
        k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.JsonPatch),
      );
      await waitFor(
        "the rollout to complete",
        90_000,
        async () => {
          const d = await env.apps("mc1").readNamespacedDeployment({ name, namespace: "default" });
          const st = d.status ?? {};
          const prog = st.conditions?.find((c) => c.type === "Progressing");
          return (
            st.observedGeneration === d.metadata?.generation &&
            st.updatedReplicas === 2 &&
            st.replicas === 2 &&
            st.readyReplicas === 2 &&
            prog?.reason === "NewReplicaSetAvailable"
          );
        },
        200,
      );
      // The Pod objects caught up (the old ones marked terminating or gone, the new ones Ready).
      await waitFor("the Pod objects to show the rollout's end", 30_000, () => {
        const now = watch.census.now;
        return now.running === 2 && now.ready === 2 && !watch.census.runningNames().some((n) => before.has(n));
      });
      const { maxRunning, minReady, history } = watch.stop();
      const states = history.map((s) => `${s.running}/${s.ready}`).join(" ");
      // With maxUnavailable 0 the rollout can only progress by surging: a third pod must have run.
      assert.equal(maxRunning, 3, `never more than replicas + maxSurge pods, and a surge (running/ready: ${states})`);
      assert.equal(minReady, 2, `never fewer than replicas - maxUnavailable ready (running/ready: ${states})`);
      const after = await readyPods("mc1", name);
      assert.equal(after.length, 2);
      for (const p of after) assert.ok(!before.has(p.name), `${p.name} is from the old template`);

      // Deleting a Pod object stops that pod; the Deployment gets a new one.
      const victim = after[0]!;
      await env.core("mc1").deleteNamespacedPod({ name: victim.name, namespace: "default" });
      await waitFor("a replacement pod, ready", 60_000, async () => {
        const l = await readyPods("mc1", name);
        return l.length === 2 && !l.some((p) => p.name === victim.name) && l.every((p) => p.ready);
      });
      await waitFor("the deleted pod's process to stop", 30_000, () =>
        env
          .exec("lab", process.execPath, ["-e", httpGetScript(`http://${victim.ip}:8080/`)])
          .stdout.trim()
          .startsWith("error"),
      );
    } finally {
      census?.close();
      await cleanup("mc1", name);
    }
  });

  test("LoadBalancer Services: a hub one is reachable from mc1 (by IP and hostname); an mc1 one not from the hub", async () => {
    const hubApp = `cpenv-lb-${process.pid}`;
    const hostApp = `cpenv-lbh-${process.pid}`;
    const mcApp = `cpenv-lbm-${process.pid}`;
    const lbService = (name: string, app: string, annotations?: Record<string, string>): k8s.V1Service => ({
      metadata: { name, annotations },
      spec: { type: "LoadBalancer", selector: { app }, ports: [{ name: "https", port: 8443, targetPort: 8080 }] },
    });
    const ingressOf = (c: "hub" | "mc1", name: string) =>
      waitFor(`${c}/${name} load balancer ingress`, 30_000, async () => {
        const s = await env.core(c).readNamespacedService({ name, namespace: "default" });
        return s.status?.loadBalancer?.ingress?.[0];
      });
    try {
      await echoDeployment("hub", hubApp, 2);
      await env.core("hub").createNamespacedService({ namespace: "default", body: lbService(hubApp, hubApp) });
      const ing = await ingressOf("hub", hubApp);
      assert.match(ing.ip ?? "", /^10\.200\.30\.\d+$/);
      assert.equal(ing.hostname, undefined);
      // mc1 (its host namespace) reaches the hub's load balancer, which balances over hub pods.
      const hubPods = await readyPods("hub", hubApp);
      const seen = await waitFor("mc1 -> hub LB reaching both pods", 30_000, () => {
        const s = spread(
          env.exec("mc1", process.execPath, ["-e", spreadScript, `http://${ing.ip}:8443/`, "20"]).stdout,
        );
        return hubPods.every((p) => s[`${p.name} ${p.ip}`]) ? s : null;
      });
      assert.ok(seen);

      // The hostname-only form (as some clouds report): resolvable from a pod in mc1.
      await env.core("hub").createNamespacedService({
        namespace: "default",
        body: lbService(hostApp, hubApp, { [LB_INGRESS_ANNOTATION]: "hostname" }),
      });
      const hing = await ingressOf("hub", hostApp);
      assert.equal(hing.ip, undefined);
      assert.match(hing.hostname ?? "", /^10-200-30-\d+\.lb\.cpenv\.test$/);
      await echoDeployment("mc1", mcApp, 1);
      const [mcPod] = await readyPods("mc1", mcApp);
      const viaName = spread(
        (
          await env.podExec("mc1", "default", mcPod!.name, process.execPath, [
            "-e",
            spreadScript,
            `http://${hing.hostname}:8443/`,
            "4",
          ])
        ).stdout,
      );
      assert.ok(
        Object.keys(viaName).every((k) => hubPods.some((p) => k === `${p.name} ${p.ip}`)),
        JSON.stringify(viaName),
      );

      // A load balancer in mc1: the lab reaches it, the hub cannot open a connection to it (nor to the pod).
      await env.core("mc1").createNamespacedService({ namespace: "default", body: lbService(mcApp, mcApp) });
      const ming = await ingressOf("mc1", mcApp);
      assert.match(ming.ip ?? "", /^10\.200\.31\.\d+$/);
      await waitFor("lab -> mc1 LB", 30_000, () =>
        env.exec("lab", process.execPath, ["-e", httpGetScript(`http://${ming.ip}:8443/`)]).stdout.startsWith("200 "),
      );
      for (const target of [`${ming.ip}:8443`, `${mcPod!.ip}:8080`]) {
        const [h, port] = target.split(":");
        const out = env.exec("hub", process.execPath, ["-e", probeScript(h!, Number(port), 3000)]).stdout.trim();
        assert.equal(out, "failed: timeout", `hub -> ${target}`);
      }
    } finally {
      await cleanup("hub", hubApp);
      await env
        .core("hub")
        .deleteNamespacedService({ name: hostApp, namespace: "default" })
        .catch(() => undefined);
      await cleanup("mc1", mcApp);
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

  test("a blackhole between mc1 and the hub drops packets silently both ways; lifting it restores the path", () => {
    const probe = (): string =>
      env.exec("mc1", process.execPath, ["-e", probeScript(HOST_ADDR.hub, 6443, 3000)]).stdout.trim();
    try {
      env.blackhole("mc1", true);
      env.blackhole("mc1", true); // idempotent
      assert.equal(probe(), "failed: timeout", "a blackhole must time out, not refuse");
      const mc2ToHub = env.exec("mc2", process.execPath, ["-e", probeScript(HOST_ADDR.hub, 6443, 3000)]).stdout.trim();
      assert.equal(mc2ToHub, "connected", "mc2 is not affected");
    } finally {
      env.blackhole("mc1", false);
    }
    assert.equal(probe(), "connected");
  });
});
