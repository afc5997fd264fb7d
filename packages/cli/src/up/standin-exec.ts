/**
 * `kubectl exec` against the stand-in kube-apiserver of `cluster-proxy up`, so that exec through
 * a generated kubeconfig can be tried (and tested) end to end without Kubernetes: kubectl's
 * WebSocket streaming protocol (`v5.channel.k8s.io` or `v4.channel.k8s.io`: binary messages whose
 * first byte is the channel, 1 stdout, 2 stderr, 3 the final Status) on the `ws` library, and a
 * pretend container that knows `echo` and `hostname`; any other command is not found (exit 127).
 * `ws` is loaded when the first exec arrives.
 */
import type http from "node:http";
import type { Duplex } from "node:stream";

/** The streaming subprotocols kubectl offers for exec that the stand-in speaks (newest first). */
export const EXEC_PROTOCOLS = ["v5.channel.k8s.io", "v4.channel.k8s.io"] as const;

/** What the pretend container of `cluster` prints for `argv`, and its exit code. */
export function demoCommand(argv: readonly string[]): { stdout: string; stderr: string; exitCode: number } {
  const [command = "", ...args] = argv;
  if (command === "echo") return { stdout: `${args.join(" ")}\n`, stderr: "", exitCode: 0 };
  if (command === "hostname") return { stdout: "sample\n", stderr: "", exitCode: 0 };
  return {
    stdout: "",
    stderr: `${command}: command not found (the stand-in container of cluster-proxy up knows echo and hostname)\n`,
    exitCode: 127,
  };
}

/** The Status kubectl reads on channel 3 when the command ended with `exitCode`. */
export function execStatus(exitCode: number): Record<string, unknown> {
  if (exitCode === 0) return { metadata: {}, status: "Success" };
  return {
    metadata: {},
    status: "Failure",
    message: `command terminated with non-zero exit code: exit status ${exitCode}`,
    reason: "NonZeroExitCode",
    details: { causes: [{ reason: "ExitCode", message: String(exitCode) }] },
  };
}

/** True when `req` asks to exec over WebSocket with a subprotocol the stand-in speaks. */
export function isWebSocketExec(req: http.IncomingMessage, path: string): boolean {
  const offered = (req.headers["sec-websocket-protocol"] ?? "").split(",").map((p) => p.trim());
  return (
    /\/exec$/.test(path) &&
    (req.headers.upgrade ?? "").toLowerCase() === "websocket" &&
    EXEC_PROTOCOLS.some((p) => offered.includes(p))
  );
}

/** Run the exec `req` asks for on `socket`: the command's output, its Status, then close. */
export async function serveWebSocketExec(req: http.IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
  const { WebSocketServer } = await import("ws");
  const argv = new URL(req.url ?? "/", "https://kubernetes.default.svc").searchParams.getAll("command");
  const wss = new WebSocketServer({
    noServer: true,
    handleProtocols: (offered) => EXEC_PROTOCOLS.find((p) => offered.has(p)) ?? false,
  });
  wss.handleUpgrade(req, socket, head, (ws) => {
    const frame = (channel: number, text: string): Buffer => Buffer.concat([Buffer.from([channel]), Buffer.from(text)]);
    const result = demoCommand(argv);
    ws.on("error", () => undefined);
    if (result.stdout) ws.send(frame(1, result.stdout));
    if (result.stderr) ws.send(frame(2, result.stderr));
    ws.send(frame(3, JSON.stringify(execStatus(result.exitCode))));
    ws.close(1000);
    wss.close();
  });
}
