/**
 * The reserved dial address of the gateway endpoint (docs/design/gateway.md) and the in-process
 * byte stream a dial to it is served over: the tunnel writes into one end with the flow control a
 * dialled socket gets, the endpoint's TLS server reads the other.
 */
import { duplexPair, type Duplex } from "node:stream";
import { GATEWAY_ENDPOINT_HOST } from "@cluster-proxy/api";
import { parseHostPort } from "@cluster-proxy/protocol";

/** Whether a DIAL_REQ address (as the server routed it) is the reserved one: host match, any port, any case. */
export function isGatewayAddress(address: string): boolean {
  const hp = parseHostPort(address);
  const host = hp ? hp.host : address;
  return host.toLowerCase().replace(/\.$/, "") === GATEWAY_ENDPOINT_HOST;
}

/** Both ends of one in-process connection. */
export interface InProcessStream {
  /** The end the tunnel reads from and writes to. */
  tunnelSide: Duplex;
  /** The end handed to the in-process server. */
  endpointSide: Duplex;
}

/**
 * A connected pair of streams that behaves like a socket: a write is acknowledged only once the
 * other end reads it (so `writableLength` and "drain" carry backpressure), the end of one
 * direction ends the other (as a socket without allowHalfOpen), and destroying either end
 * destroys both.
 */
export function openInProcessStream(): InProcessStream {
  const [tunnelSide, endpointSide] = duplexPair({ allowHalfOpen: false });
  tunnelSide.once("close", () => endpointSide.destroy());
  endpointSide.once("close", () => tunnelSide.destroy());
  return { tunnelSide, endpointSide };
}
