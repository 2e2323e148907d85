# syntax=docker/dockerfile:1
# The ferrogate container image: the `ferrogate` binary (serve, sidecar, sim, check, keys) with
# the filter module next to it, on a distroless glibc base, running as a non-root user.
#
#   docker build -t ghcr.io/ferrogate/ferrogate:0.1.0 \
#     --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg CREATED="$(git log -1 --format=%cI)" .
#
# docs/images.md explains the image, its ports and how to run it in Kubernetes;
# scripts/check-dockerfile checks this file against the repository and the Makefile.

# The toolchain of rust-toolchain.toml. The builder's Debian release must be the runtime's:
# the binary links the builder's glibc, so it may not be newer than the runtime image's
# (bookworm <-> distroless debian12).
ARG RUST_VERSION=1.95.0
ARG DEBIAN_RELEASE=bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM docker.io/library/rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS builder
WORKDIR /src

# The toolchain file first: `rustup toolchain install` adds what it lists (the wasm32 target
# and its components) to the image's toolchain, in a layer that outlives source edits.
COPY rust-toolchain.toml ./
RUN rustup toolchain install && rustc --version

# Dependency layer: the manifests of every workspace member and the lock file with stub
# crates, built with the same commands as below, so a source edit rebuilds only the
# workspace's own crates. cargo loads the whole workspace (and --locked checks Cargo.lock
# against all of it) even to build one package, so each member of Cargo.toml's `members`
# needs its manifest and a target here.
# traefik/ (the Traefik middleware, a separate artifact) is a member the image does not build:
# only its manifest is in the context, and its stub stays for the real build below.
COPY Cargo.toml Cargo.lock ./
COPY .cargo/config.toml .cargo/
COPY filter/Cargo.toml filter/
COPY filter/core/Cargo.toml filter/core/
COPY sidecar/Cargo.toml sidecar/
COPY sidecar/host/Cargo.toml sidecar/host/
COPY sidecar/host/testfilter/Cargo.toml sidecar/host/testfilter/
COPY traefik/Cargo.toml traefik/
RUN for crate in filter filter/core sidecar sidecar/host sidecar/host/testfilter traefik; do \
        mkdir -p "$crate/src" && touch "$crate/src/lib.rs"; \
    done \
 && echo 'fn main() {}' > sidecar/src/main.rs \
 && cargo build --locked --release --target wasm32-unknown-unknown -p ferrogate-filter \
 && cargo build --locked --profile native -p ferrogate-sidecar \
 && rm -rf filter/src filter/core/src sidecar/src sidecar/host/src sidecar/host/testfilter/src

# The sources. COPY keeps their modification times, which can be older than the stub
# builds above; touching them makes cargo rebuild the workspace crates for certain.
# The same builds as `make wasm` / `make build` (Makefile), minus the test-only filter.
# envoy/stats-tags.yaml is compiled into the sidecar (include_str! in
# sidecar/src/services/metrics.rs): serve names its metrics with the tags Envoy is given.
COPY envoy/stats-tags.yaml envoy/
COPY filter filter
COPY sidecar sidecar
RUN find filter sidecar -name '*.rs' -exec touch {} + \
 && cargo build --locked --release --target wasm32-unknown-unknown -p ferrogate-filter \
 && cargo build --locked --profile native -p ferrogate-sidecar \
 && mkdir /out \
 && cp target/native/ferrogate target/wasm32-unknown-unknown/release/ferrogate_filter.wasm /out/

FROM ${RUNTIME_IMAGE}
ARG RUNTIME_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.title="ferrogate" \
      org.opencontainers.image.description="OpenAI/Anthropic/Gemini-compatible AI gateway: the ferrogate binary and its proxy-wasm filter" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/ferrogate/ferrogate" \
      org.opencontainers.image.base.name="${RUNTIME_IMAGE}"

# `serve` finds ferrogate_filter.wasm next to its own executable (sidecar/src/serve.rs,
# find_filter), so no --filter flag is needed. Root owns both files, read-only: the process
# cannot replace its own code.
COPY --from=builder --chown=0:0 --chmod=0555 /out/ferrogate /usr/local/bin/ferrogate
COPY --from=builder --chown=0:0 --chmod=0444 /out/ferrogate_filter.wasm /usr/local/bin/ferrogate_filter.wasm

# distroless's `nonroot` user, numeric so that Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# 8080: gateway (serve); 9001: admin API, health and metrics (serve, sidecar);
# 9000: filter-facing listener of `ferrogate sidecar` (Envoy reaches it in the pod).
EXPOSE 8080 9000 9001
ENTRYPOINT ["/usr/local/bin/ferrogate"]
# A non-loopback admin listener needs FERROGATE_ADMIN_TOKEN, or `serve` refuses to start.
CMD ["serve", "--config", "/etc/ferrogate/config.yaml", "--listen", "0.0.0.0:8080", "--admin-listen", "0.0.0.0:9001"]
