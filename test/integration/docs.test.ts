/**
 * The documentation holds together: the README stays a front page, every relative link of the
 * README and of docs/ reaches a file (and its heading, when it names one), and every marked block a
 * suite runs verbatim is where that suite reads it (so a moved block fails here, in seconds,
 * instead of in a suite that needs the test environment).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { DOC_BLOCKS, docBlock, type DocBlockName } from "../infra/addon/readme-install.js";
import { REPO } from "../framework/repo.js";

const README_MAX_LINES = 350;
/** The longest opening comment a source file may have: what it owns and a link, the essay in docs/. */
const HEADER_MAX_LINES = 8;

/** README.md and every .md file under docs/, relative to the repository root. */
function markdownFiles(): string[] {
  const out = ["README.md"];
  const walk = (dir: string): void => {
    for (const name of readdirSync(join(REPO, dir)).sort()) {
      const rel = join(dir, name);
      if (statSync(join(REPO, rel)).isDirectory()) walk(rel);
      else if (name.endsWith(".md")) out.push(rel);
    }
  };
  walk("docs");
  return out;
}

/** The text outside fenced code blocks and inline code spans (links in code are not links). */
function prose(text: string): string {
  return text
    .replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, "")
    .replace(/`[^`\n]*`/g, "")
    .replace(/<!--[\s\S]*?-->/g, "");
}

/** GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`. */
function slug(heading: string): string {
  return heading
    .trim()
    .replace(/`/g, "")
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

/** The anchors of a markdown file's headings, numbered as GitHub numbers repeated ones. */
function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of text.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, "").matchAll(/^#{1,6}\s+(.+?)\s*#*$/gm)) {
    const base = slug(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

test(`README.md is a front page: at most ${README_MAX_LINES} lines`, () => {
  const lines = readFileSync(join(REPO, "README.md"), "utf8").trimEnd().split("\n").length;
  assert.ok(lines <= README_MAX_LINES, `README.md has ${lines} lines; move detail into docs/ (docs/README.md)`);
});

test("every relative link of README.md and docs/**/*.md reaches a file, and the heading it names", () => {
  const broken: string[] = [];
  let checked = 0;
  for (const file of markdownFiles()) {
    const text = readFileSync(join(REPO, file), "utf8");
    for (const m of prose(text).matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      const target = m[1]!;
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
      checked++;
      const [path = "", anchor] = target.split("#", 2);
      const resolved = path === "" ? join(REPO, file) : resolve(REPO, dirname(file), decodeURIComponent(path));
      if (relative(REPO, resolved).startsWith("..") || !existsSync(resolved)) {
        broken.push(`${file}: ${target} (no such file)`);
        continue;
      }
      if (anchor && resolved.endsWith(".md") && !anchors(readFileSync(resolved, "utf8")).has(anchor))
        broken.push(`${file}: ${target} (no heading #${anchor} in ${relative(REPO, resolved)})`);
    }
  }
  assert.ok(checked > 50, `only ${checked} links found: is the link pattern still right?`);
  assert.deepEqual(broken, []);
});

test("every docs/ page is reachable from the index docs/README.md or a page it links", () => {
  const reached = new Set<string>();
  const queue = ["docs/README.md"];
  while (queue.length > 0) {
    const file = queue.shift()!;
    if (reached.has(file) || !file.endsWith(".md") || !existsSync(join(REPO, file))) continue;
    reached.add(file);
    for (const m of prose(readFileSync(join(REPO, file), "utf8")).matchAll(/\]\(([^)\s#]+)[^)]*\)/g)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(m[1]!)) continue;
      const rel = relative(REPO, resolve(REPO, dirname(file), m[1]!));
      if (rel.startsWith("docs/")) queue.push(rel);
    }
  }
  const orphans = markdownFiles().filter((f) => f.startsWith("docs/") && !reached.has(f));
  assert.deepEqual(orphans, []);
});

test("every marked block a suite runs verbatim is in the file the suite reads it from", () => {
  for (const name of Object.keys(DOC_BLOCKS) as DocBlockName[]) {
    const block = docBlock(name);
    assert.ok(block.trim().length > 0, `${DOC_BLOCKS[name].file}: the ${name} block is empty`);
  }
  // first-hour.test.ts reads these two README sections by their headings.
  const readme = readFileSync(join(REPO, "README.md"), "utf8");
  for (const [heading, lang] of [
    ["## The local hub: `cluster-proxy up`", "sh"],
    ["## The SDK in five lines", "ts"],
  ] as const) {
    const start = readme.indexOf(`\n${heading}\n`);
    assert.ok(start >= 0, `README.md has the heading ${heading}`);
    const section = readme.slice(start + 1, readme.indexOf("\n## ", start + 1));
    assert.match(section, new RegExp("```" + lang + "\\n"), `${heading} has a ${lang} block`);
  }
});

/** The non-test TypeScript sources under packages/<name>/src, relative to the repository root. */
function sourceFiles(): string[] {
  const out: string[] = [];
  const walk = (dir: string): void => {
    for (const name of readdirSync(join(REPO, dir)).sort()) {
      const rel = join(dir, name);
      if (statSync(join(REPO, rel)).isDirectory()) walk(rel);
      else if (/\.tsx?$/.test(name) && !/\.test\.tsx?$/.test(name) && !name.endsWith(".d.ts")) out.push(rel);
    }
  };
  for (const pkg of readdirSync(join(REPO, "packages")).sort())
    if (existsSync(join(REPO, "packages", pkg, "src"))) walk(join("packages", pkg, "src"));
  return out;
}

/** The comment a source file opens with (after a shebang): a block comment or a run of `//` lines. */
function openingComment(text: string): string {
  const body = text.replace(/^#![^\n]*\n/, "");
  const block = /^\/\*[\s\S]*?\*\//.exec(body);
  if (block) return block[0];
  return /^(?:\/\/[^\n]*(?:\n|$))+/.exec(body)?.[0].trimEnd() ?? "";
}

test(`every source file opens with a header of at most ${HEADER_MAX_LINES} lines whose design links resolve`, () => {
  const long: string[] = [];
  const broken: string[] = [];
  const files = sourceFiles();
  assert.ok(files.length > 100, `only ${files.length} source files found: is the walk still right?`);
  for (const file of files) {
    const header = openingComment(readFileSync(join(REPO, file), "utf8"));
    const lines = header === "" ? 0 : header.split("\n").length;
    if (lines > HEADER_MAX_LINES) long.push(`${file}: ${lines} lines`);
    for (const m of header.matchAll(/\bdocs\/[\w./-]+\.md(?:#[\w-]+)?/g)) {
      const [path = "", anchor] = m[0].split("#", 2);
      if (!existsSync(join(REPO, path))) broken.push(`${file}: ${m[0]} (no such file)`);
      else if (anchor && !anchors(readFileSync(join(REPO, path), "utf8")).has(anchor))
        broken.push(`${file}: ${m[0]} (no heading #${anchor} in ${path})`);
    }
  }
  assert.deepEqual(long, [], "move the essay into docs/design and link its section");
  assert.deepEqual(broken, []);
});
