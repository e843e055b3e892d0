#!/usr/bin/env bash
# The Node.js package (node/): installs its dependencies (npm ci), packs it (npm pack: builds ESM +
# CommonJS; the tarball unpacked and checked to carry the contract, the Lua library and its scripts as the
# repository has them), checks the types with tsc --strict (sources and tests), and runs its tests against
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
# npm pack builds the package (prepack: npm run build, which copies the contract, the library and its
# scripts from the repository first); the tarball, unpacked, carries both builds and those files
# (every script of lua/scripts/ and no other) byte for byte.
pack=$(mktemp -d)
trap 'rm -rf "$pack"' EXIT
npm pack --silent --pack-destination "$pack" >/dev/null
tar -xzf "$pack"/*.tgz -C "$pack"
cmp ../contract/contract.json "$pack/package/contract.json"
cmp ../lua/ratelimit.lua "$pack/package/lua/ratelimit.lua"
diff -r ../lua/scripts "$pack/package/lua/scripts"
for f in dist/esm/index.js dist/esm/index.d.ts dist/cjs/index.js README.md; do
  [ -f "$pack/package/$f" ] || { echo "node.sh: the tarball lacks $f" >&2; exit 1; }
done
echo "node.sh: $(cd "$pack" && echo *.tgz), $(find "$pack/package" -type f | wc -l) files: both builds, the contract," \
  "the library and $(find ../lua/scripts -name '*.lua' | wc -l) scripts as lua/ and contract/ have them" >&2
npm run --silent typecheck
npm test
