/**
 * CPU-bound processes beside a test, to check that it holds on a busy machine (issue 18). Their
 * number comes from `CP_TEST_CPU_BURNERS` (default 0): `CP_TEST_CPU_BURNERS=2 scripts/test.sh`
 * runs the suite with two processes spinning beside it. Each is a child of the test process,
 * stopped by PID (and killed with the test's namespace if the test dies).
 */
import { spawn, type ChildProcess } from "node:child_process";

/** How many burners the environment asks for (0 when unset; a bad value is an error). */
export function cpuBurnersFromEnv(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.CP_TEST_CPU_BURNERS ?? "";
  if (raw === "") return 0;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > 64) {
    throw new Error(`CP_TEST_CPU_BURNERS: "${raw}" is not a whole number of processes (0-64)`);
  }
  return n;
}

/** Start `count` processes that spin on the CPU; resolves with a function that stops them. */
export function startCpuBurners(count: number): () => Promise<void> {
  const children: ChildProcess[] = [];
  for (let i = 0; i < count; i++) {
    children.push(spawn(process.execPath, ["-e", "for (;;) {}"], { stdio: "ignore" }));
  }
  return async () => {
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            child.once("exit", () => resolve());
            child.kill("SIGKILL");
          }),
      ),
    );
  };
}
