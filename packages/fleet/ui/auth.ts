/**
 * The viewer's bearer token: asked for when an API call answers 401, kept in sessionStorage (gone
 * with the tab; never a cookie, so no other site can act as the viewer) and sent as
 * `Authorization: Bearer <token>` on every call.
 */

/** The sessionStorage key of the token. */
export const TOKEN_KEY = "cluster-proxy.fleet.token";

/** The stored token, or null. */
export function loadToken(): string | null {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

/** Store the token (null forgets it). */
export function saveToken(token: string | null): void {
  try {
    if (token === null) sessionStorage.removeItem(TOKEN_KEY);
    else sessionStorage.setItem(TOKEN_KEY, token);
  } catch {
    // Storage refused (private mode quota): the token lives only as long as the page.
  }
}

/** The headers of an API call. */
export function authHeaders(token: string | null): Record<string, string> {
  return token === null || token === "" ? {} : { authorization: `Bearer ${token}` };
}
