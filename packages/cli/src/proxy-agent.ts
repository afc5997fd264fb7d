#!/usr/bin/env -S node --initial-old-space-size=64 --max-semi-space-size=4
/**
 * The `proxy-agent` executable: `cluster-proxy agent` under the Go binary's name, so a
 * container or manifest that runs `/proxy-agent <Go flags>` runs ours with the same arguments.
 */
import { loadAgentProgram } from "./agent-loader.js";
import { restartWithNodeFlags } from "./node-flags.js";

restartWithNodeFlags("agent");
const code = await (await loadAgentProgram()).runAgentCli(process.argv.slice(2));
process.exit(code);
