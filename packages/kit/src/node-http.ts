/**
 * `node:http`, loaded with `require` (import it as `import * as http from "@cluster-proxy/kit/http"`;
 * `http.X` is value and type, as there), so undici stays unloaded.
 * Design: docs/design/decisions.md#nodehttp-loaded-with-require-kithttp
 */
import { createRequire } from "node:module";
import type * as NodeHttp from "node:http";

const http = createRequire(import.meta.url)("node:http") as typeof NodeHttp;

export const {
  Agent,
  ClientRequest,
  IncomingMessage,
  STATUS_CODES,
  Server,
  ServerResponse,
  createServer,
  get,
  request,
  validateHeaderName,
  validateHeaderValue,
} = http;

/** node:http's `Agent`. */
export type Agent = NodeHttp.Agent;
/** node:http's `ClientRequest`. */
export type ClientRequest = NodeHttp.ClientRequest;
/** node:http's `IncomingMessage`. */
export type IncomingMessage = NodeHttp.IncomingMessage;
/** node:http's `Server`. */
export type Server<
  Request extends typeof NodeHttp.IncomingMessage = typeof NodeHttp.IncomingMessage,
  Response extends typeof NodeHttp.ServerResponse<InstanceType<Request>> = typeof NodeHttp.ServerResponse,
> = NodeHttp.Server<Request, Response>;
/** node:http's `ServerResponse`. */
export type ServerResponse<Request extends NodeHttp.IncomingMessage = NodeHttp.IncomingMessage> =
  NodeHttp.ServerResponse<Request>;
export type {
  AgentOptions,
  ClientRequestArgs,
  IncomingHttpHeaders,
  OutgoingHttpHeaders,
  RequestListener,
} from "node:http";

/** Whether Node accepts `name: value` on an outgoing message (writing one it refuses throws). */
export function isWritableHeader(name: string, value: string): boolean {
  try {
    http.validateHeaderName(name);
    http.validateHeaderValue(name, value);
    return true;
  } catch {
    return false;
  }
}
