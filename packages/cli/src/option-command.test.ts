import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ConfigError, serverOptionSpecs } from "@cluster-proxy/api";
import { CommandFailure } from "./cli-context.js";
import { exitStatusOf } from "./exit-status.js";
import { startComponent } from "./option-command.js";
import { PortInUseError } from "./port-conflicts.js";

/** A component whose start fails with `err`; records whether it was closed. */
function failing(err: Error): { start(): Promise<void>; close(): Promise<void>; closed: boolean } {
  return {
    closed: false,
    start: () => Promise.reject(err),
    close() {
      this.closed = true;
      return Promise.resolve();
    },
  };
}

describe("startComponent", () => {
  const options = { serverPort: 8090, agentPort: 8091 };

  test("a started component is left running", async () => {
    let started = false;
    const component = { start: () => Promise.resolve((started = true)), close: () => Promise.reject(new Error("no")) };
    await startComponent("server", component, serverOptionSpecs, options);
    assert.equal(started, true);
  });

  test("a port conflict is explained, naming the flag, and the component is closed", async () => {
    const errno = Object.assign(new Error("listen EADDRINUSE: address already in use 127.0.0.1:8090"), {
      code: "EADDRINUSE",
      port: 8090,
      address: "127.0.0.1",
    });
    const err = new ConfigError(
      "--server-port: cannot listen on 127.0.0.1:8090: listen EADDRINUSE: address already in use 127.0.0.1:8090",
      { cause: errno },
    );
    const component = failing(err);
    await assert.rejects(startComponent("server", component, serverOptionSpecs, options), (e: unknown) => {
      assert.ok(e instanceof PortInUseError);
      assert.equal(exitStatusOf(e), 1);
      assert.equal(e.cause, err);
      assert.match(e.message, /^port 8090 \(--server-port\) on 127\.0\.0\.1 is already in use/);
      return true;
    });
    assert.equal(component.closed, true);
  });

  test("a ConfigError stays itself; anything else is `<what> failed to start` with exit status 1", async () => {
    const config = new ConfigError("--ca-cert: not a PEM file");
    await assert.rejects(startComponent("agent", failing(config), serverOptionSpecs, options), (e) => e === config);
    const other = new Error("disk on fire");
    await assert.rejects(startComponent("agent", failing(other), serverOptionSpecs, options), (e: unknown) => {
      assert.ok(e instanceof CommandFailure);
      assert.deepEqual([e.message, exitStatusOf(e), e.cause], ["agent failed to start: disk on fire", 1, other]);
      return true;
    });
  });
});
