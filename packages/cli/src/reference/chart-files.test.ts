import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { load } from "js-yaml";
import { chartValuesSchema, managedProxyConfigurationCrd, type JsonSchemaProps } from "@cluster-proxy/api";
import { CHART_GENERATED, chartFiles, replaceValuesTable, schemaDefaults, valuesYaml } from "./chart-files.js";
import { crdManifestYaml } from "./crd-manifest.js";

const chartDir = fileURLToPath(new URL("../../../../charts/cluster-proxy/", import.meta.url));

describe("the Helm chart's generated files", () => {
  test("match the values schema and the CRD (run npm run docs:flags)", async () => {
    const wanted = await chartFiles(() => readFile(`${chartDir}README.md`, "utf8"));
    for (const [rel, content] of wanted) {
      assert.equal(await readFile(`${chartDir}${rel}`, "utf8"), content, `charts/cluster-proxy/${rel} is stale`);
    }
  });

  test("values come from the CRD and the flags: bounds, enums and defaults are theirs", () => {
    const s = chartValuesSchema();
    const server = s.properties!.proxyServer!.properties!;
    assert.deepEqual(server.replicas, {
      description: "Number of proxy-servers; also their --server-count, so agents connect to every one.",
      type: "integer",
      default: 3,
      minimum: 1,
      maximum: 100,
    });
    assert.equal(server.port!.maximum, 65535);
    const manager = s.properties!.addonManager!.properties!;
    assert.deepEqual(manager.logLevel!.enum, ["debug", "info", "warn", "error"]);
    assert.equal(manager.certValidity!.default, "4320h");
    // Every object refuses unknown keys, so a typo fails helm install.
    const walk = (node: typeof s, path: string): void => {
      if (node.properties) assert.equal(node.additionalProperties, false, `${path} allows unknown keys`);
      for (const [k, v] of Object.entries(node.properties ?? {})) walk(v, `${path}.${k}`);
    };
    walk(s, "values");
  });

  test("values.yaml holds every default, commented", () => {
    const yaml = valuesYaml();
    const d = schemaDefaults(chartValuesSchema()) as Record<string, Record<string, unknown>>;
    assert.equal(d.proxyServer!.entrypointAddress, "");
    assert.match(yaml, /^# Image tag; empty: the chart's appVersion\.\ntag: ""$/m);
    assert.match(yaml, /^ {2}entrypointLoadBalancer: false$/m);
    assert.throws(() => replaceValuesTable("# no markers\n"), /values:begin/);
  });

  test("the shipped CRD holds the schema's CEL rules and defaults (what the apiserver enforces and fills in)", async () => {
    type Crd = { spec: { versions: { schema: { openAPIV3Schema: JsonSchemaProps } }[] } };
    const shipped = load(await readFile(`${chartDir}${CHART_GENERATED.crd}`, "utf8")) as Crd;
    assert.deepEqual(shipped, managedProxyConfigurationCrd());
    assert.deepEqual(load(await crdManifestYaml()), managedProxyConfigurationCrd(), "cluster-proxy manifests crds");
    const spec = shipped.spec.versions[0]!.schema.openAPIV3Schema.properties!.spec!;
    const server = spec.properties!.proxyServer!.properties!;
    const rules = (s: JsonSchemaProps | undefined): string[] =>
      (s?.["x-kubernetes-validations"] ?? []).map((r) => `${r.fieldPath ?? ""} ${r.message}`);
    assert.equal(server.replicas!.default, 3);
    assert.equal(server.inClusterServiceName!.default, "proxy-entrypoint");
    assert.deepEqual(spec.properties!.authentication!.default, {});
    assert.equal(
      spec.properties!.authentication!.properties!.dump!.properties!.secrets!.properties!.signingProxyClientSecretName!
        .default,
      "proxy-client",
    );
    assert.doesNotMatch(rules(server.entrypoint).join("\n"), /PortForward/);
    assert.match(rules(server.entrypoint).join("\n"), /\.hostname entrypoint type Hostname needs hostname\.value/);
    assert.match(rules(server.entrypoint!.properties!.hostname).join("\n"), /\.value hostname\.value must be/);
    assert.match(
      rules(spec.properties!.authentication!.properties!.signer).join("\n"),
      /\.type signer type CertManager is not supported/,
    );
    // No YAML aliases: every shared sub-schema is written out.
    assert.doesNotMatch(await crdManifestYaml(), /[&*]ref_/);
  });
});
