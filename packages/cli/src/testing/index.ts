/** Test-only entry point (`@cluster-proxy/cli/testing`): the CLI run in the test's own process. */
export { UpNotReady, startUpInProcess, type InProcessUp } from "./in-process-up.js";
