# The demo application (client/examples/server.rs): an HTTP service behind the rate limit layer.
#
#   docker build -f docker/Dockerfile.app -t redis-ratelimit-app .
#   docker run -e REDIS_URL=redis://redis:6379/ -e LISTEN=0.0.0.0:8080 -p 8080:8080 redis-ratelimit-app
#
# Build arguments as in docker/Dockerfile: BUILDER_IMAGE, RUNTIME_IMAGE (any glibc Linux image;
# default Debian's slim image), MODULE_FROM=builder|context (context: target/release/examples/server).
ARG BUILDER_IMAGE=docker.io/library/rust:1-bookworm
ARG RUNTIME_IMAGE=docker.io/library/debian:bookworm-slim
ARG MODULE_FROM=builder

FROM ${BUILDER_IMAGE} AS builder
ENV RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo PATH=/usr/local/cargo/bin:$PATH
WORKDIR /src
COPY Cargo.toml Cargo.lock rustfmt.toml ./
COPY src src
COPY core core
COPY testkit testkit
COPY bench bench
COPY client client
RUN cargo build --release --locked -p redis-ratelimit-client --example server \
    && mkdir -p /out && cp target/release/examples/server /out/

FROM scratch AS module-from-context
COPY target/release/examples/server /out/server

FROM builder AS module-from-builder

FROM module-from-${MODULE_FROM} AS app

FROM ${RUNTIME_IMAGE}
COPY --from=app /out/server /usr/local/bin/redis-ratelimit-app
USER nobody
ENV LISTEN=0.0.0.0:8080 REDIS_URL=redis://redis:6379/ FAILURE_POLICY=open
EXPOSE 8080
CMD ["/usr/local/bin/redis-ratelimit-app"]
