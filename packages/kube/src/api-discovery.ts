/** Whether the apiserver serves an API group version, asked until it answers. */
import { backoffDelay, delay, type Logger } from "@cluster-proxy/kit";
import { isNotFound, type KubeApi } from "./kube-api.js";
import { errorMessage } from "@cluster-proxy/errors";

/**
 * Whether every one of `apiVersions` (`<group>/<version>`) is served: `GET /apis/<apiVersion>`
 * each, in order. A 404 is an answer (false); any other failure is logged (`cannot discover
 * <what>; retrying`) and asked again with backoff until `signal` aborts (false).
 */
export async function apisServed(
  api: KubeApi,
  apiVersions: readonly string[],
  what: string,
  signal: AbortSignal,
  log: Logger,
): Promise<boolean> {
  for (let attempt = 0; !signal.aborted; attempt++) {
    try {
      for (const apiVersion of apiVersions) await api.request("GET", `/apis/${apiVersion}`);
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      log.warn({ err: errorMessage(err) }, `cannot discover ${what}; retrying`);
      await delay(backoffDelay(attempt, 500, 10_000), signal);
    }
  }
  return false;
}
