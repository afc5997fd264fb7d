#!/usr/bin/env -S node --initial-old-space-size=64 --max-semi-space-size=4
/**
 * The `cluster-proxy` executable. Everything heavy (server, agent, pino, X.509) is loaded by
 * the subcommand that needs it, so `cluster-proxy --help` stays fast.
 */
import { runCli } from "./program.js";

const code = await runCli(process.argv.slice(2));
// Long-running commands have closed everything they started; exit now rather than wait for
// stray handles (e.g. a client that never hung up).
process.exit(code);
