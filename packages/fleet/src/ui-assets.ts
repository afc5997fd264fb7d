/**
 * The built page (`packages/fleet/dist/ui`, written by `npm run build`), read into memory once:
 * `index.html` and the files beside it and below it. Names with a content hash are cached by
 * browsers for a year; the rest (`index.html`) are revalidated.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { extname, join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";

/** One file of the page. */
export interface UiAsset {
  body: Buffer;
  type: string;
  /** The `cache-control` to answer with. */
  cache: string;
}

/** The page's files by their path below `/-/fleet/` (`""` is `index.html` too). */
export type UiAssets = ReadonlyMap<string, UiAsset>;

/** Where `npm run build` writes the page (from `src/` and from `dist/` alike). */
export const UI_DIR = fileURLToPath(new URL("../dist/ui/", import.meta.url));

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".json": "application/json",
  ".txt": "text/plain; charset=utf-8",
};
const HASHED = /[-.][A-Za-z0-9_]{8,}\.[a-z]+$/;
const MAX_FILES = 200;

/** Read the page from `dir` (default {@link UI_DIR}); empty when it was not built. */
export function loadUiAssets(dir: string = UI_DIR): UiAssets {
  const assets = new Map<string, UiAsset>();
  if (!existsSync(join(dir, "index.html"))) return assets;
  const walk = (at: string): void => {
    for (const name of readdirSync(at)) {
      const file = join(at, name);
      if (statSync(file).isDirectory()) walk(file);
      else if (assets.size < MAX_FILES && name !== ".gitkeep" && !name.endsWith(".map")) {
        const rel = relative(dir, file).split(sep).join("/");
        const asset = {
          body: readFileSync(file),
          type: TYPES[extname(name)] ?? "application/octet-stream",
          cache: HASHED.test(name) ? "public, max-age=31536000, immutable" : "no-cache",
        };
        assets.set(rel, asset);
        if (rel === "index.html") assets.set("", asset);
      }
    }
  };
  walk(dir);
  return assets;
}
