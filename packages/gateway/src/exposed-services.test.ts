/** The services allowlist: strict parsing and matching by cluster, cluster set, port and protocol. */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { CLUSTER_SET_LABEL, ExposedServices, isExposed, parseExposedServices } from "./exposed-services.js";

describe("exposed services", () => {
  test("parses entries and refuses unknown keys and wrong types, naming the entry", () => {
    assert.deepEqual(parseExposedServices(""), []);
    assert.deepEqual(
      parseExposedServices("- clusters: [a]\n  namespace: n\n  service: s\n  port: 80\n  protocol: http\n"),
      [{ clusters: ["a"], clusterSets: [], namespace: "n", service: "s", port: 80, protocol: "http" }],
    );
    const bad: [string, RegExp][] = [
      ["a: b", /must be a YAML list/],
      ["- namespace: n\n  service: s\n  extra: 1", /entry 1: unknown key "extra"/],
      ["- service: s", /namespace is required/],
      ["- namespace: n\n  service: s\n  port: http", /port must be a port number/],
      ["- namespace: n\n  service: s\n  protocol: ftp", /protocol must be http or https/],
      ["- namespace: n\n  service: s\n  clusters: a", /clusters: must be a list/],
      ["- [", /not YAML/],
    ];
    for (const [text, why] of bad) assert.throws(() => parseExposedServices(text), why, text);
  });

  test("matches clusters by name or cluster set; port and protocol when given", () => {
    const entries = parseExposedServices(
      "- clusters: [a]\n  namespace: n\n  service: s\n  port: 80\n- clusterSets: [prod]\n  namespace: n\n  service: t\n  protocol: https\n",
    );
    const a = { name: "a", labels: {} };
    const b = { name: "b", labels: { [CLUSTER_SET_LABEL]: "prod" } };
    const req = (service: string, port: number, protocol: "http" | "https" = "https") => ({
      namespace: "n",
      service,
      port,
      protocol,
    });
    assert.equal(isExposed(entries, a, req("s", 80)), true);
    assert.equal(isExposed(entries, a, req("s", 81)), false);
    assert.equal(isExposed(entries, b, req("s", 80)), false);
    assert.equal(isExposed(entries, b, req("t", 1234)), true);
    assert.equal(isExposed(entries, b, req("t", 1234, "http")), false);
    assert.equal(isExposed(entries, a, req("t", 1234)), false);
  });

  test("a bad update keeps the last good list; deletion denies everything", () => {
    const s = new ExposedServices();
    const a = { name: "a", labels: {} };
    const r = { namespace: "n", service: "s", port: 80, protocol: "https" as const };
    assert.equal(s.allows(a, r), false);
    assert.deepEqual(s.update({ services: "- clusters: [a]\n  namespace: n\n  service: s\n" }), {
      kind: "loaded",
      entries: 1,
    });
    assert.equal(s.allows(a, r), true);
    assert.equal(s.update({ services: "- nope: 1" }).kind, "refused");
    assert.equal(s.allows(a, r), true);
    assert.equal(s.update(undefined).kind, "deleted");
    assert.equal(s.allows(a, r), false);
  });
});
