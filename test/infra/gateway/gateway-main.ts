/**
 * A gateway process for the gateway's hostile suite (test/hostile/gateway-*.test.ts): the real
 * {@link Gateway} with an in-memory hub ({@link FakeHub}), dialing its clusters through a real
 * proxy-server, in a process of its own so that a crash is seen as an exit. Started by
 * `startHostileWorld` (hostile-world.ts) with the path of a JSON {@link GatewayProcessConfig};
 * prints one line `READY <json ports>` when it serves.
 */
import { readFileSync } from "node:fs";
import { parseGatewayOptions, type GatewayOptionsInput } from "@cluster-proxy/api";
import { Gateway } from "@cluster-proxy/gateway";
import { FakeHub } from "@cluster-proxy/gateway/testing";

/** What the parent hands the gateway process. */
export interface GatewayProcessConfig {
  options: GatewayOptionsInput;
  /** Bearer tokens the hub recognises: token -> user and groups. */
  tokens: Record<string, { username: string; groups: string[] }>;
  /** Hub grants on managedclusters/proxy: user -> cluster -> verbs. */
  grants: Record<string, Record<string, string[]>>;
  clusters: string[];
  /** The services ConfigMap's `services` key (the allowlist), if any. */
  exposedServices?: string;
  /** Other ConfigMaps of the hub by name (`extension-apiserver-authentication`: the front proxy's trust). */
  configMaps?: Record<string, Record<string, string>>;
  /** Clusters whose add-on is Available (rows of the fleet view). */
  availableAddOns?: string[];
}

const config = JSON.parse(readFileSync(process.argv[2] ?? "", "utf8")) as GatewayProcessConfig;
const hub = new FakeHub();
for (const c of config.clusters) hub.addCluster(c);
for (const [token, u] of Object.entries(config.tokens)) hub.tokens.set(token, { ...u, extra: {} });
for (const [user, byCluster] of Object.entries(config.grants))
  for (const [cluster, verbs] of Object.entries(byCluster)) hub.grantProxy(user, cluster, ...verbs);
if (config.exposedServices !== undefined) hub.setConfigMap({ services: config.exposedServices });
for (const [name, data] of Object.entries(config.configMaps ?? {})) hub.setConfigMap(data, name);
for (const c of config.availableAddOns ?? [])
  hub.setAddOn(c, {
    status: "True",
    reason: "ProxyAgentAvailable",
    message: "tunnel works",
    lastTransitionTime: new Date().toISOString(),
  });
const gateway = new Gateway(parseGatewayOptions(config.options), {
  hub,
  bindAddress: "127.0.0.1",
  audit: { write: () => undefined, close: () => undefined },
});
const ports = await gateway.start();
process.stdout.write(`READY ${JSON.stringify(ports)}\n`);
process.on("SIGTERM", () => void gateway.close(0).then(() => process.exit(0)));
