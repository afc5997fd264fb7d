/**
 * GET a JSON document over https with a given CA bundle (the OIDC issuer's discovery document
 * and JWKS), bounded in time and size.
 */
import * as https from "node:https";
import { errorMessage } from "@cluster-proxy/errors";

const MAX_BYTES = 1024 * 1024;

/** Options of {@link getJson}. */
export interface GetJsonOptions {
  /** CA bundle the server is verified with (undefined: the system's). */
  ca?: Buffer;
  timeoutMs?: number;
}

/** The parsed JSON body of `url` (which must be https). Rejects on non-200, a timeout or bad JSON. */
export function getJson(url: string, options: GetJsonOptions = {}): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    if (u.protocol !== "https:") {
      reject(new Error(`${url}: not an https URL`));
      return;
    }
    const req = https.get(
      u,
      {
        ...(options.ca ? { ca: options.ca } : {}),
        timeout: options.timeoutMs ?? 10_000,
        headers: { accept: "application/json" },
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (c: Buffer) => {
          size += c.length;
          if (size > MAX_BYTES) req.destroy(new Error(`${url}: response larger than ${MAX_BYTES} bytes`));
          else chunks.push(c);
        });
        res.on("end", () => {
          if (res.statusCode !== 200) {
            reject(new Error(`${url}: HTTP ${res.statusCode}`));
            return;
          }
          try {
            resolve(JSON.parse(Buffer.concat(chunks).toString("utf8")));
          } catch (err) {
            reject(new Error(`${url}: not JSON: ${errorMessage(err)}`));
          }
        });
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error(`${url}: no answer within ${options.timeoutMs ?? 10_000} ms`)));
    req.on("error", reject);
  });
}
