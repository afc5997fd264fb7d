/** Plain HTTP against loopback, for health and readiness checks. */
import * as http from "node:http";

/** GET a loopback URL; resolves with status and body. */
export function httpGet(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolvePromise, reject) => {
    const req = http.get(url, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => resolvePromise({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.setTimeout(5000, () => req.destroy(new Error(`GET ${url} timed out`)));
  });
}
