/**
 * `node:http`, loaded with `require`: import it as `import * as http from "@cluster-proxy/kit/http"`
 * where you would import `node:http`; `http.X` is both the value and the type, as there.
 *
 * Why: importing `node:http` as an ES module builds its module namespace, which reads the lazy
 * `WebSocket`, `CloseEvent` and `MessageEvent` exports of Node 22 and later and so loads undici:
 * about 10 MiB more RSS in every process (Node 26.12: an idle process that imports `node:http`
 * 60.4 MiB, one that requires it 50 MiB), for code we never run. `require` leaves them lazy. Lint
 * refuses value imports of `node:http` in the packages' runtime code.
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
