/** Where the repository and the built CLI are. */
import { join, resolve } from "node:path";
import { NODE_FLAGS } from "@cluster-proxy/cli";

/** The repository root. */
export const REPO = resolve(import.meta.dirname, "../..");
/** The built CLI entry point (`npm run build` first). */
export const CLI = join(REPO, "packages/cli/dist/main.js");
/** node's arguments that run the CLI as the `cluster-proxy` executable does (with its V8 flags). */
export const CLI_ARGV: readonly string[] = [...NODE_FLAGS, CLI];
