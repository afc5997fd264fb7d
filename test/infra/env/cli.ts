// npm run env:up   -> brings the environment up (or reuses a running one); last stdout line = its dir
//                     (CPENV_CLUSTER_PROFILE=1: with ClusterProfiles, see EnvOptions in environment.ts)
// npm run env:down -> removes everything env:up made
// node --conditions=source --import tsx test/infra/env/cli.ts status|prepare
import { stateDir } from "./config.js";
import {
  buildBinaries,
  buildHelm,
  buildKubeletApi,
  buildClusterProfileConsumer,
  buildClusteradm,
  buildClusterGateway,
  clusterInventoryApiDir,
  describe,
  down,
  isRunning,
  log,
  ocmApiDir,
  readState,
  up,
} from "./environment.js";
import { checkNetworkPrereqs, ensureNft } from "./network.js";
import { errorMessage } from "@cluster-proxy/errors";

async function main(): Promise<void> {
  const cmd = process.argv[2];
  if (cmd === "up") {
    const { state } = await up();
    process.stderr.write(`${describe(state)}\n`);
    process.stdout.write(`${stateDir}\n`);
  } else if (cmd === "prepare") {
    // Everything that needs the package registries (Go module proxy, Debian): run it before
    // entering a namespace without a route out (scripts/test.sh). Prints the binaries' cache dir.
    checkNetworkPrereqs();
    ensureNft(log);
    const dir = buildBinaries();
    ocmApiDir();
    clusterInventoryApiDir();
    buildHelm();
    buildKubeletApi();
    buildClusterProfileConsumer();
    buildClusteradm();
    buildClusterGateway();
    process.stdout.write(`${dir}\n`);
  } else if (cmd === "down") {
    await down();
    log("environment removed");
  } else if (cmd === "status") {
    const s = readState();
    if (isRunning(s)) {
      process.stderr.write(`${describe(s)}\n`);
      process.stdout.write(`${stateDir}\n`);
    } else {
      log(s ? "recorded environment is not (fully) running: npm run env:down cleans it" : "no environment");
      process.exitCode = 1;
    }
  } else {
    process.stderr.write("usage: test/infra/env/cli.ts up|down|status|prepare\n");
    process.exitCode = 2;
  }
}

main().catch((err: unknown) => {
  log(`error: ${errorMessage(err)}`);
  process.exitCode = 1;
});
