// Lint rules: type-aware typescript-eslint, no floating promises, no `any` leaks.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["**/dist/**", "**/node_modules/**", ".cache/**", "bench/**", "**/*.js", "**/*.mjs"] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { project: "./tsconfig.json", tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": [
        "error",
        {
          allowForKnownSafeCalls: [
            { from: "package", package: "node:test", name: ["test", "describe", "it", "suite"] },
          ],
        },
      ],
      "@typescript-eslint/no-misused-promises": "error",
      "@typescript-eslint/no-explicit-any": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/consistent-type-imports": "error",
    },
  },
  {
    // The fleet page (browser code, JSX): its own project, with the DOM's types.
    files: ["packages/fleet/ui/**/*.ts", "packages/fleet/ui/**/*.tsx"],
    ignores: ["**/*.test.ts"],
    languageOptions: {
      parserOptions: { project: "./packages/fleet/ui/tsconfig.json", tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // The bundle holds no server code: only types come from src/, nothing from Node.
      "@typescript-eslint/no-restricted-imports": [
        "error",
        {
          patterns: [
            { regex: "^node:", message: "the fleet page runs in a browser" },
            { regex: "^@cluster-proxy/", message: "the fleet page bundles no workspace package" },
            {
              regex: "^\\.\\./src/",
              allowTypeImports: true,
              message: "the fleet page imports only types from src/ (import type)",
            },
          ],
        },
      ],
    },
  },
  ...packageLayers(),
  {
    // The addon manager's wiring, runtime and reconcilers are small named steps (issue 30): no
    // function over 60 lines. Rendering is exempt: its functions are manifests written as literals.
    files: ["packages/addon-manager/src/**/*.ts"],
    ignores: [
      "**/*.test.ts",
      "**/src/testing/**",
      "packages/addon-manager/src/agent-manifests.ts",
      "packages/addon-manager/src/render-proxy-server.ts",
    ],
    rules: { "max-lines-per-function": ["error", { max: 60, skipBlankLines: true, skipComments: true }] },
  },
  {
    // Contracts are declared once (issue 42): the gateway endpoint's host and headers and the hub
    // names both sides of a wire read come from @cluster-proxy/api, never a copy. Tests spell the
    // values out on purpose (they pin the wire).
    files: ["packages/*/src/**/*.ts"],
    ignores: ["packages/api/src/**", "**/*.test.ts", "**/src/testing/**"],
    rules: {
      "no-restricted-syntax": [
        "error",
        {
          selector: `Literal[value=/${contractLiterals()}/]`,
          message: "a contract value: import its name from @cluster-proxy/api (gateway-endpoint.ts, hub-names.ts)",
        },
      ],
    },
  },
  ...testLayers(),
);

/**
 * Values declared in packages/api/src/gateway-endpoint.ts and hub-names.ts, as an esquery regex
 * source matching a whole string literal (a `/` escaped: it would end the selector's regex).
 */
function contractLiterals() {
  const values = [
    "gateway\\.cluster-proxy\\.invalid",
    "cluster-proxy-(target|service|passthrough|forwarded-for|forwarded-proto)",
    "proxy-server-ca",
    "cluster-proxy-addon-user",
    "cluster-proxy-gateway-(serving|identity)",
    "open-cluster-management\\.io\\/addon-name",
    "proxy\\.open-cluster-management\\.io\\/component-name",
  ];
  return `^(${values.join("|")})$`;
}

/**
 * The layering of the packages (each package's README): what a package's source must not
 * import. Test files and src/testing/ may also use the test-only `testing` entry points and
 * `@cluster-proxy/pki`; runtime code may not. `@cluster-proxy/errors` (the error catalog) may be
 * imported by every package, and so may `@cluster-proxy/api/cluster-name`.
 */
function packageLayers() {
  /**
   * Runtime code of these packages takes `node:http` from `@cluster-proxy/kit/http` (types may
   * still be imported from `node:http`): see
   * packages/kit/src/node-http.ts for the RSS it saves.
   * Not the gateway and the addon manager: `@kubernetes/client-node` loads undici there anyway.
   */
  const requireHttp = ["kit", "protocol", "tunnel", "client", "server", "agent", "fleet", "cli"];
  const NODE_HTTP_RULE = {
    name: "node:http",
    allowTypeImports: true,
    message:
      'import * as http from "@cluster-proxy/kit/http" instead: an ES import of node:http loads undici (~10 MiB RSS); see packages/kit/src/node-http.ts',
  };
  const dataPlane = ["protocol", "tunnel", "client", "server", "agent"];
  const forbidden = {
    errors: ["protocol", "api", "pki", "tunnel", "client", "server", "agent", "addon-manager", "cli"],
    protocol: ["api", "pki", "tunnel", "client", "server", "agent", "addon-manager", "cli", "fleet"],
    api: ["pki", "tunnel", "client", "server", "agent", "addon-manager", "cli"],
    pki: ["protocol", "api", "tunnel", "client", "server", "agent", "addon-manager", "cli"],
    tunnel: ["api", "pki", "client", "server", "agent", "addon-manager", "cli", "prom-client", "fleet"],
    client: ["api", "pki", "server", "agent", "addon-manager", "cli", "prom-client", "k8s", "fleet"],
    server: ["client", "agent", "addon-manager", "cli", "fleet"],
    agent: ["pki", "client", "server", "addon-manager", "cli", "k8s", "fleet"],
    "addon-manager": [...dataPlane, "cli"],
    gateway: ["server", "agent", "addon-manager", "cli", "protocol"],
    kit: [
      "errors",
      "protocol",
      "api",
      "pki",
      "tunnel",
      "client",
      "server",
      "agent",
      "addon-manager",
      "gateway",
      "fleet",
      "cli",
      "prom-client",
      "k8s",
    ],
    fleet: [
      "protocol",
      "api",
      "pki",
      "client",
      "server",
      "agent",
      "addon-manager",
      "gateway",
      "cli",
      "prom-client",
      "k8s",
    ],
  };
  const spec = (name) =>
    name === "prom-client" ? "prom-client" : name === "k8s" ? "@kubernetes/client-node" : `@cluster-proxy/${name}`;
  const testFiles = ["**/*.test.ts", "**/src/testing/**"];
  return Object.entries(forbidden).flatMap(([pkg, names]) => {
    const message = `packages/${pkg} must not import this (see packages/${pkg}/README.md)`;
    const rule = (regexes, paths = []) => ["error", { patterns: regexes.map((regex) => ({ regex, message })), paths }];
    const escape = (x) => x.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
    // A package and its subpaths, except `@cluster-proxy/api/cluster-name` (the cluster-name rule,
    // a module that loads no schema), which is open to every package.
    const banned = (name) => {
      const s = escape(spec(name));
      return name === "api" ? `^${s}(?!\\/cluster-name$)(\\/.*)?$` : `^${s}(\\/.*)?$`;
    };
    const runtime = names.map(banned);
    const inTests = names.filter((n) => n !== "pki").map(banned);
    const inner = innerLayerRules()[pkg] ?? [];
    return [
      {
        files: [`packages/${pkg}/src/**/*.ts`],
        ignores: testFiles,
        rules: {
          "no-restricted-imports": rule(
            [...runtime, "^@cluster-proxy\\/[^/]+\\/testing$"],
            requireHttp.includes(pkg) ? [NODE_HTTP_RULE] : [],
          ),
        },
      },
      {
        files: testFiles.map((t) => `packages/${pkg}/src/${t.replace("**/src/", "")}`),
        rules: { "no-restricted-imports": rule(inTests) },
      },
      // A folder with its own layer rule: the package's rule and the folder's together (a later
      // block's options replace an earlier one's, so the folder's block repeats the package's).
      ...inner.map(({ dir, patterns }) => ({
        files: [`packages/${pkg}/src/${dir}/**/*.ts`],
        // A folder inside it with a rule of its own follows that rule.
        ignores: inner.filter((o) => o.dir.startsWith(`${dir}/`)).map((o) => `packages/${pkg}/src/${o.dir}/**`),
        rules: {
          "no-restricted-imports": [
            "error",
            {
              patterns: [...runtime.map((regex) => ({ regex, message })), ...patterns],
            },
          ],
        },
      })),
    ];
  });
}

/**
 * Layers inside a package: a folder whose modules must not import the rest of their package.
 * The addon manager's controller runtime (`src/runtime/`: client, watches, queues, leader
 * election, Events, conditions) knows Kubernetes, not cluster-proxy: it imports nothing outside
 * its folder (no reconciler, no rendering, no wiring) and no X.509 (docs/design/addon-manager.md,
 * "Shape").
 */
function innerLayerRules() {
  return {
    "addon-manager": [
      {
        dir: "runtime",
        patterns: [
          {
            regex: "^\\.\\./",
            message:
              'the controller runtime (src/runtime/) must not import the reconcilers, rendering or wiring of the addon manager (docs/design/addon-manager.md, "Shape")',
          },
          {
            regex: "^@cluster-proxy\\/pki(\\/.*)?$",
            message: "the controller runtime (src/runtime/) knows Kubernetes, not certificates",
          },
        ],
      },
      {
        // The runtime's test fakes (the faithful fake API server): the runtime's layer, one level down.
        dir: "runtime/testing",
        patterns: [
          {
            regex: "^\\.\\./\\.\\./",
            message:
              'the controller runtime (src/runtime/) must not import the reconcilers, rendering or wiring of the addon manager (docs/design/addon-manager.md, "Shape")',
          },
          {
            regex: "^@cluster-proxy\\/pki(\\/.*)?$",
            message: "the controller runtime (src/runtime/) knows Kubernetes, not certificates",
          },
        ],
      },
    ],
  };
}

/**
 * The layering of test/ (docs/testing/framework.md): a suite (test/<suite>/) imports its own files,
 * test/framework and test/infra, never another suite; test/infra imports test/framework; test/framework
 * imports nothing else of test/. test/integration/suite-hygiene.test.ts checks the same for dynamic
 * imports and for bench/.
 */
function testLayers() {
  const message = "a suite imports test/framework or test/infra, never another suite (docs/testing/framework.md)";
  const rule = (regex, msg = message) => ["error", { patterns: [{ regex, message: msg }] }];
  return [
    {
      files: ["test/*/*.ts"],
      ignores: ["test/framework/**", "test/infra/**"],
      rules: { "no-restricted-imports": rule("^\\.\\./(?!framework/|infra/|\\.\\./)") },
    },
    {
      files: ["test/infra/*.ts"],
      rules: {
        "no-restricted-imports": rule("^\\.\\./(?!framework/|\\.\\./)", "test/infra imports only test/framework"),
      },
    },
    {
      files: ["test/infra/*/*.ts"],
      rules: {
        "no-restricted-imports": rule(
          "^\\.\\./\\.\\./(?!framework/|\\.\\./)",
          "test/infra imports only test/framework",
        ),
      },
    },
    {
      files: ["test/framework/**/*.ts"],
      rules: {
        "no-restricted-imports": rule("^\\.\\./(?!\\.\\./)", "test/framework imports nothing else of test/"),
      },
    },
  ];
}
