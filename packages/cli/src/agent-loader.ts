/**
 * Where the agent's command tree is loaded from: the bundle `npm run build` writes beside this
 * module (`agent-bundle.js`, see agent-program.ts), else agent-program.js itself (running from
 * the sources, or a build without the bundle step).
 */
import { existsSync } from "node:fs";
import type * as AgentProgram from "./agent-program.js";

/** The file of the agent's bundle beside this module. */
export const AGENT_BUNDLE = new URL("./agent-bundle.js", import.meta.url);

/** agent-program's exports, from the bundle when there is one. */
export async function loadAgentProgram(): Promise<typeof AgentProgram> {
  if (existsSync(AGENT_BUNDLE)) return (await import(AGENT_BUNDLE.href)) as typeof AgentProgram;
  return import("./agent-program.js");
}
