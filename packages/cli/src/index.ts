/**
 * @cluster-proxy/cli: the `cluster-proxy` command. Its main entry promises only the Node.js flags
 * a component process needs (what tests and the image use to start `bin/cluster-proxy.js`); the
 * command runs from `bin/`. Subpaths: `@cluster-proxy/cli/reference` (the generated references'
 * data, for `npm run docs:flags`), `@cluster-proxy/cli/testing` (test-only: `up` in process).
 */
export { NODE_FLAGS, nodeFlagsFor } from "./node-flags.js";
