# The two commands: `make demo` (the main job) and `make test` (the whole suite).
CARGO ?= cargo
MODULE := target/release/libredis_ratelimit.so

.PHONY: all deps build demo test test-matrix test-gcra-harness bench check fmt clippy contract clean docker docker-test compose-test examples install

all: build

deps:
	@scripts/ensure-deps.sh

build: deps
	$(CARGO) build --release

# Starts a throwaway module-enabled redis-server on a free port, runs the lab scenarios, stops it.
# (--workspace: built with the features make test builds with; `cargo run -p` would build the client twice.)
demo: build
	$(CARGO) build --release --quiet --workspace --example demo
	$${CARGO_TARGET_DIR:-target}/release/examples/demo
	@scripts/go.sh demo

# Unit and property tests of the pure code and integration tests against real servers (the binaries
# `cargo test --release --workspace` builds, three at a time: scripts/cargo-tests.sh), the doc tests; then the Python
# package's suite (python/; a virtualenv in target/py-venv), whose cross-language tests run the Rust demo server;
# then the Go package's (go/: gofmt, go vet, go test -race; skipped with the reason where Go is missing) and
# the Node.js package's (node/: npm ci, npm pack with the ESM and CommonJS builds, its tarball unpacked and checked,
# tsc --strict, node --test).
test: build
	scripts/cargo-tests.sh --workspace
	$(CARGO) test --release --workspace --doc
	$(CARGO) build --release --workspace --example server
	scripts/python.sh test
	scripts/go.sh test
	scripts/node.sh

# The integration suite on Redis 7.0, Valkey 8.0, Redis 8.0 and Valkey 9.1 (fetched or built once per machine;
# a server that cannot be had here is skipped with the reason).
test-matrix: build
	scripts/test-matrix.sh

# Redis core's tests/unit/gcra.tcl through Redis' test harness against the module's GCRA (skipped without a Redis clone).
test-gcra-harness: build
	scripts/gcra-harness.sh

# Throughput, latency and memory against the Lua scripts they replace and plain commands (writes
# docs/benchmarks.md and docs/bench.png), the Python middleware under uvicorn (docs/bench-python.md), token budgets beside LiteLLM's TPM limiter
# (docs/bench-tokens.md), the Go middleware under wrk (docs/bench-go.md),
# Express on the Node.js package beside express-rate-limit and rate-limiter-flexible (docs/bench-node.md),
# the Envoy rate limit service beside envoyproxy/ratelimit (docs/bench-rls.md), then ns
# per decision of the pure algorithms (Criterion).
bench: build
	@scripts/ensure-deps.sh fonts-dejavu-core
	$(CARGO) run --release --quiet -p bench --bin rl-bench
	@scripts/ensure-deps.sh wrk
	$(CARGO) run --release --quiet -p bench --bin rl-bench-http
	scripts/python.sh bench
	scripts/python.sh bench-tokens
	scripts/go.sh bench
	scripts/node.sh bench
	rls/scripts/peer.sh bench
	$(CARGO) bench -p ratelimit-core --bench decide

# Container images (module on Redis and Valkey, the demo application): podman here, Docker elsewhere.
docker: build
	scripts/containers.sh build
	rls/scripts/container.sh build

# Builds the module image, runs the integration suite against a container of it, removes it.
docker-test: build
	scripts/containers.sh test
	rls/scripts/container.sh test

# docker/compose.yaml up: the application reaches the module-enabled Redis by service name.
compose-test: build
	scripts/containers.sh compose

# The Python, Node.js and Go examples against a throwaway module-enabled server; docs/client.md's snippets checked.
examples: build
	scripts/examples.sh

PREFIX ?= /usr/local
MODULE_DIR ?= $(PREFIX)/lib/redis/modules

# Installs the module where a system redis-server can load it (a new file: never overwrite in place).
install: build
	install -D -m 0755 $(MODULE) $(DESTDIR)$(MODULE_DIR)/libredis_ratelimit.so
	@echo "loadmodule $(MODULE_DIR)/libredis_ratelimit.so   # add to redis.conf, or: redis-server --loadmodule $(MODULE_DIR)/libredis_ratelimit.so"

fmt:
	$(CARGO) fmt --all -- --check

# Writes every generated file again (contract/, its vectors, the Lua library's block and scripts, the
# packages' copies): after a change to core, the client or lua/src/.
contract: deps
	$(CARGO) run --release -q -p contract-gen

clippy: deps
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

check: fmt clippy test

clean:
	$(CARGO) clean
