import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Command } from "commander";
import {
  ConfigError,
  defineOptions,
  opt,
  parseOptions,
  rules,
  serverOptionSpecs,
  type OptionsOf,
} from "@cluster-proxy/api";
import { CommandFailure } from "../cli-context.js";
import { exitStatusOf } from "../exit-status.js";
import { registerOptionCommand, startComponent } from "./option-command.js";
import { PortInUseError } from "../up/port-conflicts.js";
import { capture } from "../testing/capture.js";

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

describe("registerOptionCommand", () => {
  const fields = {
    name: opt.string("", { flag: "name", description: "a name" }, rules.nonEmpty()),
    wait: opt.duration(1000, { flag: "wait", description: "a wait" }),
  };
  const schema = defineOptions(fields);

  function program(ran: OptionsOf<typeof fields>[]): Command {
    const root = new Command("t").exitOverride();
    registerOptionCommand(root, capture({}), {
      name: "cmd",
      summary: "s",
      description: "d",
      example: "",
      schema,
      run: (options) => Promise.resolve(void ran.push(options)),
    });
    return root;
  }

  test("runs with the schema's validated options, which are not validated again", async () => {
    const ran: OptionsOf<typeof fields>[] = [];
    await program(ran).parseAsync(["cmd", "--name", "x", "--wait", "2s"], { from: "user" });
    assert.deepEqual(ran, [{ name: "x", wait: 2000 }]);
    assert.equal(parseOptions(schema, ran[0]), ran[0]);
  });

  test("a schema problem is a ConfigError naming the flag, before run", async () => {
    const ran: OptionsOf<typeof fields>[] = [];
    await assert.rejects(program(ran).parseAsync(["cmd"], { from: "user" }), /^ConfigError: --name: must not be empty/);
    assert.deepEqual(ran, []);
  });
});
