/** Test-only entry point (`@cluster-proxy/cli/testing`): the CLI run in the test's own process. */
export { capture, runCaptured, type Captured } from "./capture.js";
export { UP_READY_LINE, UpNotReady, startUpInProcess, type InProcessUp } from "./in-process-up.js";
