/**
 * The operator the guides address: a person at a machine outside the hub (the lab namespace), in a
 * working directory of their own with the chart at hand, running the guides' blocks as written.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoRoot } from "../env/config.js";
import type { TestEnv } from "../env/fixture.js";
import { operatorPath, runAsOperator } from "./readme-install.js";

/** Options of {@link GuideOperator.run}. */
export interface OperatorRunOptions {
  /** Extra environment (e.g. KUBECONFIG of a managed cluster, for its admin). */
  env?: Record<string, string>;
  /** Default 10 minutes. */
  timeoutMs?: number;
  /** The output is a credential: log that there was one, not what it is. */
  secret?: boolean;
}

export class GuideOperator {
  private constructor(
    private readonly env: TestEnv,
    /** The working directory: the guides' files (kubeconfigs, certificates) land here; `charts/` links to the chart. */
    readonly dir: string,
    /** The PATH of the operator's commands ({@link operatorPath}). */
    readonly path: string,
  ) {}

  /** A fresh working directory under the system's temp dir, named `<prefix>XXXXXX`. */
  static create(env: TestEnv, prefix: string): GuideOperator {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    const path = operatorPath(env, dir);
    // The guides run `helm install ... ./charts/cluster-proxy` from where the operator stands.
    symlinkSync(join(repoRoot, "charts"), join(dir, "charts"));
    return new GuideOperator(env, dir, path);
  }

  /**
   * Runs a guide block (or a command) in {@link dir} (see {@link runAsOperator}) and resolves with
   * its standard output, which is also logged; fails the test with the script and both outputs.
   */
  async run(what: string, script: string, opts: OperatorRunOptions = {}): Promise<string> {
    const r = await runAsOperator(this.env, this.path, script, opts.timeoutMs ?? 600_000, {
      cwd: this.dir,
      env: opts.env,
    });
    assert.equal(r.status, 0, `${what} failed:\n${script}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
    console.log(`# ${what}\n# ${opts.secret ? "(a credential)" : r.stdout.trim().split("\n").join("\n# ")}`);
    return r.stdout;
  }

  /** Removes the working directory. */
  remove(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}
