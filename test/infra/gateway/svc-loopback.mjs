// Preloaded (node --import) into an agent process of the gateway's hostile suite: names of the
// form <name>.<namespace>.svc resolve to 127.0.0.1, where the suite's stand-in Service listens,
// as the agent's unit fixture does with its injected lookup. Every other name is resolved as usual.
import dns from "node:dns";
import { syncBuiltinESMExports } from "node:module";

const lookup = dns.lookup;
dns.lookup = function svcLoopback(host, options, callback) {
  const cb = typeof options === "function" ? options : callback;
  const opts = typeof options === "function" ? {} : typeof options === "number" ? { family: options } : (options ?? {});
  if (typeof host === "string" && host.endsWith(".svc")) {
    if (opts.all) return process.nextTick(cb, null, [{ address: "127.0.0.1", family: 4 }]);
    return process.nextTick(cb, null, "127.0.0.1", 4);
  }
  return lookup.call(dns, host, options, callback);
};
// ESM imports of node:dns (named or namespace) see the patched function too.
syncBuiltinESMExports();
