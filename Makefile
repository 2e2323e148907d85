# ferrogate — build, run and test from a fresh clone.
#
#   make run    build, then start `ferrogate sim` (:8000) and `ferrogate serve` (:8080)
#   make test   everything the tests need, then all tests (what CI runs)
#   make build  the optimised binary for deployment and benchmarks (target/native/ferrogate)
#   make bench  gateway vs direct latency/throughput (scripts/bench)
#
# `make run` and `make test` share one build (cargo's dev profile, with wasmtime's compiler
# optimised): whichever runs first pays for it, the other reuses it.

SHELL := /bin/bash
CARGO ?= cargo
WASM_TARGET := wasm32-unknown-unknown
WASM_DIR := target/$(WASM_TARGET)/release
FILTER_WASM := $(WASM_DIR)/ferrogate_filter.wasm
TESTFILTER_WASM := $(WASM_DIR)/ferrogate_testfilter.wasm
# The Traefik middleware (http-wasm ABI): Traefik runs guests with WASI preview 1.
TRAEFIK_TARGET := wasm32-wasip1
TRAEFIK_WASM := target/$(TRAEFIK_TARGET)/release/ferrogate_traefik.wasm
TOOLCHAIN := $(shell sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
BIN := target/native/ferrogate
DEV_BIN := target/debug/ferrogate
# Addresses of `make run` (scripts/quickstart); the quickstart config expects the sim on :8000.
LISTEN ?= 127.0.0.1:8080
SIM_LISTEN ?= 127.0.0.1:8000
CONFIG ?= examples/quickstart.yaml

.PHONY: all toolchain wasm build dev run test test-rust test-python test-envoy test-k8s test-monitoring test-traefik test-docs bench fuzz clean

all: build

## toolchain: the pinned toolchain and its wasm32 targets (rustup is idempotent)
toolchain:
	@rustup toolchain list | grep -q "^$(TOOLCHAIN)" || rustup toolchain install $(TOOLCHAIN) --profile minimal
	@for t in $(WASM_TARGET) $(TRAEFIK_TARGET); do \
	  rustup target list --installed --toolchain $(TOOLCHAIN) | grep -qx $$t || rustup target add $$t --toolchain $(TOOLCHAIN); \
	done
	@rustup component list --installed --toolchain $(TOOLCHAIN) | grep -q '^clippy' || rustup component add clippy --toolchain $(TOOLCHAIN)

## wasm: the filter, the host's test filters and the Traefik middleware, release builds
wasm: toolchain
	$(CARGO) build --release --target $(WASM_TARGET) -p ferrogate-filter -p ferrogate-testfilter
	$(CARGO) build --release --target $(TRAEFIK_TARGET) -p ferrogate-traefik
	@ls -l $(FILTER_WASM) $(TESTFILTER_WASM) $(TRAEFIK_WASM) | awk '{print $$5, $$9}'

## build: wasm + the native `ferrogate` binary (optimised, no LTO)
build: wasm
	$(CARGO) build --profile native -p ferrogate-sidecar
	cp $(FILTER_WASM) target/native/ferrogate_filter.wasm

## dev: the filter wasm + the `ferrogate` binary of the dev profile, the build `make test` uses
## (`cargo test` builds the binary with the same features, so neither rebuilds the other's)
dev: wasm
	$(CARGO) test --workspace --exclude ferrogate-testfilter --exclude ferrogate-traefik --no-run

## run: sim on $(SIM_LISTEN), gateway on $(LISTEN) (Ctrl-C stops both; scripts/quickstart)
run:
	@if [ ! -x $(DEV_BIN) ]; then echo "make run: first build of ferrogate and its tests (about 4 minutes on 2 cores, ~3 GB in target/; later runs take seconds)"; fi
	@$(MAKE) --no-print-directory dev >/dev/null
	@BIN=$(DEV_BIN) LISTEN=$(LISTEN) SIM_LISTEN=$(SIM_LISTEN) CONFIG=$(CONFIG) scripts/quickstart

## test: everything (CI runs this)
test: wasm test-rust test-python test-envoy test-k8s test-monitoring test-traefik

## test-envoy: the shipped Envoy/Istio configs against Envoy's API schema (+ a self-test
## proving broken configs are rejected)
test-envoy: dev
	FERROGATE_BIN=$(CURDIR)/$(DEV_BIN) scripts/validate-envoy
	FERROGATE_BIN=$(CURDIR)/$(DEV_BIN) scripts/validate-envoy --self-test

## test-k8s: the Helm chart linted and rendered by the real helm (every profile) and checked
## against its contract with the ferrogate binary; the Kubernetes manifests and that render
## against the schemas of their kinds; the Dockerfile, its builder replayed offline on the exact
## build context, and the image built from its runtime stage (buildah, FROM scratch + the dev
## binary) and run (podman); the filter as an OCI Wasm artifact in both layouts. Every checker
## also proves, on broken copies, that it rejects them (--self-test).
K8S_OUT := target/k8s
test-k8s: dev
	scripts/k8s-tools >/dev/null
	FERROGATE_BIN=$(CURDIR)/$(DEV_BIN) scripts/check-helm $(K8S_OUT)/helm
	FERROGATE_BIN=$(CURDIR)/$(DEV_BIN) scripts/check-helm --self-test
	FERROGATE_BIN=$(CURDIR)/$(DEV_BIN) scripts/validate-k8s
	FERROGATE_BIN=$(CURDIR)/$(DEV_BIN) scripts/validate-k8s $(K8S_OUT)/helm
	FERROGATE_BIN=$(CURDIR)/$(DEV_BIN) scripts/validate-k8s --self-test
	rm -rf $(K8S_OUT)/oci $(K8S_OUT)/oci-compat
	scripts/oci-wasm --wasm $(FILTER_WASM) --out $(K8S_OUT)/oci
	scripts/oci-wasm --wasm $(FILTER_WASM) --variant compat --out $(K8S_OUT)/oci-compat
	scripts/check-oci --self-test --wasm $(FILTER_WASM)
	scripts/image-tools
	scripts/check-dockerfile
	scripts/check-dockerfile --self-test
	FERROGATE_BIN=$(CURDIR)/$(DEV_BIN) FERROGATE_FILTER_WASM=$(CURDIR)/$(FILTER_WASM) scripts/check-image
	FERROGATE_BIN=$(CURDIR)/$(DEV_BIN) FERROGATE_FILTER_WASM=$(CURDIR)/$(FILTER_WASM) scripts/check-image --self-test

## test-monitoring: the Grafana dashboards and Prometheus alert rules of monitoring/ against
## Grafana's schemas, promtool and the metric catalog, in a live `ferrogate serve` scraped by a
## real Prometheus, and in the Helm chart (+ a self-test proving broken copies are rejected)
test-monitoring: dev
	FERROGATE_BIN=$(CURDIR)/$(DEV_BIN) FERROGATE_FILTER_WASM=$(CURDIR)/$(FILTER_WASM) scripts/check-monitoring
	FERROGATE_BIN=$(CURDIR)/$(DEV_BIN) scripts/check-monitoring --self-test

## test-traefik: the Traefik middleware's manifest and example configuration (traefik/) against
## Traefik's JSON schemas, the topology and the guest's own settings parser (+ a self-test
## proving broken copies are rejected)
test-traefik: dev
	FERROGATE_BIN=$(CURDIR)/$(DEV_BIN) scripts/check-traefik
	FERROGATE_BIN=$(CURDIR)/$(DEV_BIN) scripts/check-traefik --self-test

## test-rust: the wasm32 build of the core, clippy on every target, and the workspace's tests
## (scripts/test-tools first installs the Debian packages they run: dnsmasq)
test-rust:
	scripts/test-tools
	$(CARGO) build -p ferrogate-core --target $(WASM_TARGET)
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p ferrogate-core -p ferrogate-filter --target $(WASM_TARGET) -- -D warnings
	$(CARGO) clippy -p ferrogate-traefik --target $(TRAEFIK_TARGET) -- -D warnings
	$(CARGO) test --workspace --exclude ferrogate-testfilter --exclude ferrogate-traefik

## test-docs: the manual's own checks (links, `ferrogate` command lines, config examples)
test-docs:
	$(CARGO) test -p ferrogate-sidecar --test docs

## test-python: end-to-end tests with the official OpenAI, Anthropic and Google Gen AI Python
## SDKs (tests/python) against `ferrogate serve` (the dev build, release filter wasm) in front
## of `ferrogate sim`, and `make run` itself (Ctrl-C, a busy port)
test-python: dev
	FERROGATE_BIN=$(CURDIR)/$(DEV_BIN) FERROGATE_FILTER_WASM=$(CURDIR)/$(FILTER_WASM) FERROGATE_TRAEFIK_WASM=$(CURDIR)/$(TRAEFIK_WASM) scripts/pytest

bench: build
	scripts/bench

## fuzz: every parser fuzz target for FUZZ_SECONDS each (cargo-fuzz, nightly toolchain)
FUZZ_SECONDS ?= 60
fuzz:
	@command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
	@rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	cd fuzz && for t in $$(cargo +nightly fuzz list); do \
	  mkdir -p corpus/$$t && cargo +nightly fuzz run $$t corpus/$$t -- -max_total_time=$(FUZZ_SECONDS) || exit 1; \
	done

clean:
	$(CARGO) clean
