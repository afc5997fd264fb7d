/**
 * What a browser may do with content relayed from a cluster (docs/design/gateway.md, "Browsers"):
 * the fleet page shares the gateway's origin and keeps a hub token in `sessionStorage`, so every
 * relayed response (a Service's, a pod's or node's `proxy` subresource, and any other kube answer)
 * gets `Content-Security-Policy: sandbox` (no `allow-same-origin`: a page rendered from it runs in
 * an opaque origin and reads nothing of the gateway's) and `X-Content-Type-Options: nosniff`. A
 * policy the cluster sent stays beside it: browsers enforce every policy a response carries.
 */
import type * as http from "node:http";
import type { CallerExchange } from "./relay.js";

/** The policy every relayed response carries. */
export const RELAYED_CONTENT_POLICY = "sandbox";

/** `headers` with the sandbox policy added and `nosniff` set. */
export function sandboxedHeaders(headers: http.OutgoingHttpHeaders): http.OutgoingHttpHeaders {
  const theirs = headers["content-security-policy"];
  const policies = theirs === undefined ? [] : Array.isArray(theirs) ? theirs : [String(theirs)];
  return {
    ...headers,
    // One header may carry several policies, comma-separated; each is enforced.
    "content-security-policy": [...policies, RELAYED_CONTENT_POLICY].join(", "),
    "x-content-type-options": "nosniff",
  };
}

/** `caller` whose response head carries {@link sandboxedHeaders}. */
export function sandboxed(caller: CallerExchange): CallerExchange {
  return { ...caller, writeHead: (status, headers) => caller.writeHead(status, sandboxedHeaders(headers)) };
}
