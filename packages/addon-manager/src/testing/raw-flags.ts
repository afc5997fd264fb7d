/**
 * Test helper: a rendered command line (`--flag=value` words, as `argsFor` writes them) back into
 * the raw flag values `resolveOptions` takes, so a test parses it with the component's own parser.
 */
import assert from "node:assert/strict";

/** The raw value of each `--flag=value` word, keyed by flag; any other word fails the test. */
export function rawFlags(args: readonly string[]): Record<string, string> {
  return Object.fromEntries(
    args.map((word) => {
      const m = /^--([^=]+)=(.*)$/s.exec(word);
      assert.ok(m, `not a --flag=value word: ${word}`);
      return [m[1]!, m[2]!];
    }),
  );
}
