#!/usr/bin/env bash
# The Node.js package (node/): installs its dependencies (npm ci), builds ESM + CommonJS, checks the
# types with tsc --strict (sources and tests), lists what `npm pack` ships, and runs its tests against
# real redis-server processes they start (REDIS_SERVER, default /usr/bin/redis-server; the module at
# target/release/libredis_ratelimit.so, built beforehand).
#
#   scripts/node.sh          the above
#   scripts/node.sh peer-suites   express-rate-limit's, @fastify/rate-limit's and rate-limiter-flexible's
#                                 own test suites against this package's stores and RateLimiterModule
#   scripts/node.sh bench    docs/bench-node.md: Express on this package (module and library) against
#                            express-rate-limit + rate-limit-redis and rate-limiter-flexible, autocannon
#                            (node/bench/run.mjs; RL_BENCH_ROUNDS, RL_BENCH_SECONDS)
set -euo pipefail
cd "$(dirname "$0")/../node"
if [ "${1:-}" = peer-suites ]; then
  # The peers' own test suites, each from a snapshot of its repository (skipped with the reason when
  # absent), its test tools installed from npm into a temporary directory: express-rate-limit's
  # (test/library) against ExpressRateLimitStore (RL_ERL_REPO, node/peer/erl-suite.mjs),
  # @fastify/rate-limit's (test/) against fastifyRateLimitStore (RL_FASTIFY_RL_REPO, frl-suite.mjs),
  # rate-limiter-flexible's RateLimiterRedis tests against RateLimiterModule (RL_FLEXIBLE_REPO,
  # flexible-suite.mjs). All three run; the status is the first failure's. Not in `make test`: they
  # install about 500 packages and need the snapshots.
  npm ci --no-audit --no-fund --loglevel=error
  npm run --silent build
  status=0
  for suite in erl frl flexible; do
    node "peer/$suite-suite.mjs" || { rc=$?; [ "$status" = 0 ] && status=$rc; }
  done
  exit "$status"
fi
if [ "${1:-}" = bench ]; then
  npm ci --no-audit --no-fund --loglevel=error
  npm run --silent build
  ../scripts/ensure-deps.sh wrk || true  # without it, the bench's load is autocannon's
  exec node bench/run.mjs
fi
npm ci --no-audit --no-fund --loglevel=error
npm run --silent build
npm run --silent typecheck
npm pack --dry-run 2>&1 | grep -E "contract.json|lua/ratelimit.lua|dist/esm/index.js|dist/cjs/index.js|total files"
npm test
