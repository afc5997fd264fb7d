/**
 * The page's one route: `#/cluster/<name>` opens that cluster's detail, so a detail is linkable and
 * the browser's back button closes it.
 */

const PREFIX = "#/cluster/";

/** The cluster a hash names, or null. */
export function clusterFromHash(hash: string): string | null {
  if (!hash.startsWith(PREFIX)) return null;
  try {
    const name = decodeURIComponent(hash.slice(PREFIX.length));
    return name === "" ? null : name;
  } catch {
    return null;
  }
}

/** The hash that opens a cluster's detail. */
export function clusterHash(name: string): string {
  return PREFIX + encodeURIComponent(name);
}

let openedHere = false;

/** Open a cluster's detail (a history entry, so back closes it). */
export function openCluster(name: string): void {
  openedHere = true;
  location.hash = clusterHash(name);
}

/** Close the detail: back when the page opened it, else drop the hash in place. */
export function closeCluster(): void {
  if (openedHere) {
    openedHere = false;
    history.back();
    return;
  }
  history.replaceState(null, "", location.pathname + location.search);
  window.dispatchEvent(new HashChangeEvent("hashchange"));
}
