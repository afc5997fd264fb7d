#!/usr/bin/env bash
# Runs the test suites with node's test runner, on the Node.js the container image ships (the
# version image/versions.json pins, fetched by scripts/node-runtime.mjs), not on the machine's
# node: every process a test starts with `process.execPath` or `node` from PATH (servers, agents,
# the addon manager, the test environment's pods) runs on it too. The runner itself runs inside a
# fresh network namespace with only loopback (no default route), so a test that addresses anything
# but loopback or a namespace it created fails with "network unreachable" instead of leaving the
# machine. Usage: scripts/test.sh [unit|integration|all]   (default: all)
# Environment: CP_TEST_TIMEOUT_MS (deadline per test, suite and file; default 30 min),
# CP_TEST_CPU_BURNERS (CPU-bound processes beside the scale fault tests; default 0), CI=true
# (a suite whose prerequisites are missing fails instead of skipping).
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}

files=()
if [[ $which == unit || $which == all ]]; then
  while IFS= read -r f; do files+=("$f"); done < <(find packages -path '*/node_modules' -prune -o -path '*/dist' -prune -o -name '*.test.ts' -print | sort)
fi
if [[ $which == integration || $which == all ]]; then
  while IFS= read -r f; do files+=("$f"); done < <(find test -name '*.test.ts' -not -path '*/node_modules/*' 2>/dev/null | sort)
fi
if [[ ${#files[@]} -eq 0 ]]; then
  echo "no test files found" >&2
  exit 1
fi

# The runtime, and the other supported majors node-flags.test.ts starts (npm registry: before the
# namespace below). The scripts that prepare suites below are tooling and run on the machine's node.
runtimes=$(node scripts/node-runtime.mjs --supported)
runtime=$(head -n 1 <<<"$runtimes")

# The interop tests (test/interop) run the real Go konnectivity binaries. Build them (or reuse the
# cache) here, before the loopback-only namespace below cuts off the Go module proxy; the tests call
# the same script again and find the cache. A missing Go toolchain fails here with a clear message.
if [[ $which == integration || $which == all ]] && compgen -G "test/interop/*.test.ts" >/dev/null; then
  node scripts/go-peers.mjs >/dev/null
fi
# The multi-cluster environment (test/infra/env) builds etcd, kube-apiserver and OCM from the Go module
# proxy and installs nftables: both need the network, so prepare them here as well.
if [[ $which == integration || $which == all ]] && [[ -f test/env/env.test.ts ]]; then
  node --conditions=source --import tsx test/infra/env/cli.ts prepare >/dev/null
fi

# The browser suites (test/browser) drive Debian's Chromium with playwright-core (which never
# downloads a browser): install it here when missing, since apt-get needs the network. Without
# root or apt-get the suites skip, or fail under CI=true.
if [[ $which == integration || $which == all ]] && compgen -G "test/browser/*.test.ts" >/dev/null &&
  [[ ! -x /usr/bin/chromium ]]; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "installing chromium (apt-get) for the browser suites ..."
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends chromium >/dev/null
  else
    echo "chromium is missing and we cannot install it (not root, or no apt-get): apt-get install chromium" >&2
  fi
fi

# The image test (test/image) runs the container image's entry points: build it here (apt-get,
# npm and buildah need the registries), after the workspace was built.
if [[ $which == integration || $which == all ]] && [[ -f test/image/image.test.ts ]]; then
  node scripts/image.mjs >/dev/null
fi

# Every test, suite and file gets a deadline, so a hang fails with its name instead of stalling
# the run: node applies --test-timeout to each test and each suite and file around them (a suite
# with its own `timeout` keeps it). 30 minutes by default, for the longest files on a busy
# machine; CP_TEST_TIMEOUT_MS overrides it. CP_TEST_CPU_BURNERS=<n> makes the scale fault tests
# run n CPU-bound processes beside themselves (docs/testing/faults.md).
timeout_ms=${CP_TEST_TIMEOUT_MS:-1800000}
runner=(env "PATH=$(dirname "$runtime"):$PATH" "$runtime" --conditions=source --import tsx --test --test-reporter=spec
  --test-concurrency=1 "--test-timeout=$timeout_ms" "${files[@]}")
echo "test runner: node $("$runtime" --version) ($runtime)"

if [[ $(id -u) -eq 0 ]] && command -v ip >/dev/null && [[ ${CP_TEST_NO_NETNS:-} != 1 ]]; then
  ns="cp-test-$$"
  ip netns add "$ns"
  # Whatever a test started and failed to stop dies with the namespace.
  cleanup() { ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null; ip netns del "$ns" 2>/dev/null || true; }
  trap cleanup EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
  ip -n "$ns" link set lo up
  echo "test runner: network namespace $ns (loopback only)"
  ip netns exec "$ns" "${runner[@]}"
else
  echo "test runner: not root or no iproute2; running in the current network namespace (set up a namespace by hand to isolate)" >&2
  "${runner[@]}"
fi
