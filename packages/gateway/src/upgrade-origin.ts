/**
 * Upgrades from browser pages (docs/design/gateway.md, "Browsers"): a browser sends `Origin` with
 * every WebSocket handshake and presents its client certificate on its own, so a foreign page
 * could open exec or port-forward as a certificate-authenticated user (cross-site WebSocket
 * hijacking). An upgrade that carries `Origin` is refused with 403 unless the origin is in
 * --allowed-upgrade-origins (default none). kubectl and client-go send no `Origin`.
 */
import type { IncomingHttpHeaders } from "node:http";
import { GatewayError } from "./gateway-error.js";

/** Refuse (GatewayError 403) an upgrade whose `Origin` is not in `allowed`. */
export function checkUpgradeOrigin(headers: IncomingHttpHeaders, allowed: readonly string[]): void {
  const origin = headers.origin;
  if (origin === undefined) return;
  if (allowed.includes(origin)) return;
  throw new GatewayError(
    403,
    "origin-forbidden",
    `upgrade from browser origin ${JSON.stringify(origin.slice(0, 200))} refused: it is not in --allowed-upgrade-origins`,
  );
}
