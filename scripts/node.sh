#!/usr/bin/env bash
# The Node.js package (node/): installs its dependencies (npm ci), builds ESM + CommonJS, checks the
# types with tsc --strict (sources and tests), lists what `npm pack` ships, and runs its tests against
# real redis-server processes they start (REDIS_SERVER, default /usr/bin/redis-server; the module at
# target/release/libredis_ratelimit.so, built beforehand).
#
#   scripts/node.sh          the above
#   scripts/node.sh peer-suites   express-rate-limit's own test suite against this package's store
#   scripts/node.sh bench    docs/bench-node.md: Express on this package (module and library) against
#                            express-rate-limit + rate-limit-redis and rate-limiter-flexible, autocannon
#                            (node/bench/run.mjs; RL_BENCH_ROUNDS, RL_BENCH_SECONDS)
set -euo pipefail
cd "$(dirname "$0")/../node"
if [ "${1:-}" = peer-suites ]; then
  # express-rate-limit's own test suite (test/library) against ExpressRateLimitStore, from a snapshot
  # of its repository (RL_ERL_REPO; skipped with the reason when absent), its test tools installed
  # from npm into a temporary directory (node/peer/erl-suite.mjs). Not in `make test`: it installs
  # about 430 packages.
  npm ci --no-audit --no-fund --loglevel=error
  npm run --silent build
  exec node peer/erl-suite.mjs
fi
if [ "${1:-}" = bench ]; then
  npm ci --no-audit --no-fund --loglevel=error
  npm run --silent build
  exec node bench/run.mjs
fi
npm ci --no-audit --no-fund --loglevel=error
npm run --silent build
npm run --silent typecheck
npm pack --dry-run 2>&1 | grep -E "contract.json|lua/ratelimit.lua|dist/esm/index.js|dist/cjs/index.js|total files"
npm test
