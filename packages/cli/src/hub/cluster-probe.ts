/**
 * End-to-end readiness of a demo cluster: an HTTP GET to `<cluster>:80` through the hub's
 * plain loopback HTTP CONNECT door, exactly what the printed `curl` line does. The server
 * answers `500 No agent available` until the cluster's agent has connected.
 */
import * as http from "@cluster-proxy/kit/http";

/** Result of one probe. */
export type ProbeResult = { ok: true; body: string } | { ok: false; reason: string };

/**
 * Send `GET /` to `target` (e.g. `east:80`) through the CONNECT proxy at `proxy`, and resolve
 * with the response body if it contains `expect`. Never rejects.
 */
export function probeThroughConnect(
  proxy: { host: string; port: number },
  target: string,
  expect: string,
  timeoutMs: number,
): Promise<ProbeResult> {
  return new Promise<ProbeResult>((resolve) => {
    let settled = false;
    const done = (result: ProbeResult): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      req.destroy();
      resolve(result);
    };
    const timer = setTimeout(() => done({ ok: false, reason: `no answer within ${timeoutMs} ms` }), timeoutMs);
    const req = http.request({ host: proxy.host, port: proxy.port, method: "CONNECT", path: target, agent: false });
    req.on("error", (err) => done({ ok: false, reason: err.message }));
    req.on("connect", (res, socket) => {
      if (res.statusCode !== 200) {
        socket.destroy();
        done({ ok: false, reason: `CONNECT ${target}: ${res.statusCode} ${res.statusMessage ?? ""}`.trim() });
        return;
      }
      const inner = http.request({
        createConnection: () => socket,
        host: target,
        path: "/",
        headers: { host: target, connection: "close", "user-agent": "cluster-proxy-up-probe" },
      });
      inner.on("error", (err) => done({ ok: false, reason: err.message }));
      inner.on("response", (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (c: Buffer) => chunks.push(c));
        response.on("error", (err) => done({ ok: false, reason: err.message }));
        response.on("end", () => {
          const body = Buffer.concat(chunks).toString("utf8");
          socket.destroy();
          done(body.includes(expect) ? { ok: true, body } : { ok: false, reason: `unexpected answer: ${body.trim()}` });
        });
      });
      inner.end();
    });
    req.end();
  });
}
