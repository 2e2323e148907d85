# ferrogate — build, run and test from a fresh clone.
#
#   make run    build everything, start `ferrogate sim` (:8000) and `ferrogate serve` (:8080)
#   make test   everything the tests need, then all tests (what CI runs)
#   make bench  gateway vs direct latency/throughput (scripts/bench)

SHELL := /bin/bash
CARGO ?= cargo
WASM_TARGET := wasm32-unknown-unknown
WASM_DIR := target/$(WASM_TARGET)/release
FILTER_WASM := $(WASM_DIR)/ferrogate_filter.wasm
TESTFILTER_WASM := $(WASM_DIR)/ferrogate_testfilter.wasm
TOOLCHAIN := $(shell sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
BIN := target/native/ferrogate

.PHONY: all toolchain wasm build run test test-rust test-python test-envoy bench fuzz clean

all: build

## toolchain: the pinned toolchain and its wasm32 target (rustup is idempotent)
toolchain:
	@rustup toolchain list | grep -q "^$(TOOLCHAIN)" || rustup toolchain install $(TOOLCHAIN) --profile minimal
	@rustup target list --installed --toolchain $(TOOLCHAIN) | grep -qx $(WASM_TARGET) || rustup target add $(WASM_TARGET) --toolchain $(TOOLCHAIN)
	@rustup component list --installed --toolchain $(TOOLCHAIN) | grep -q '^clippy' || rustup component add clippy --toolchain $(TOOLCHAIN)

## wasm: the filter and the host's test filters, size/speed-tuned release builds
wasm: toolchain
	$(CARGO) build --release --target $(WASM_TARGET) -p ferrogate-filter -p ferrogate-testfilter
	@ls -l $(FILTER_WASM) $(TESTFILTER_WASM) | awk '{print $$5, $$9}'

## build: wasm + the native `ferrogate` binary (optimised, no LTO)
build: wasm
	$(CARGO) build --profile native -p ferrogate-sidecar
	cp $(FILTER_WASM) target/native/ferrogate_filter.wasm

## run: sim on 127.0.0.1:8000, gateway on 127.0.0.1:8080 (Ctrl-C stops both)
run: build
	@echo "sim on 127.0.0.1:8000, gateway on 127.0.0.1:8080 — try the README's curl"
	@trap 'kill 0' INT TERM EXIT; \
	$(BIN) sim --listen 127.0.0.1:8000 --model sim-small & \
	sleep 0.3; \
	$(BIN) serve --config examples/quickstart.yaml --listen 127.0.0.1:8080; \
	wait

## test: everything (CI runs this)
test: wasm test-rust test-python test-envoy

## test-envoy: the shipped Envoy/Istio configs against Envoy's API schema (+ a self-test
## proving broken configs are rejected)
test-envoy:
	scripts/validate-envoy
	scripts/validate-envoy --self-test

test-rust:
	$(CARGO) build -p ferrogate-core --target $(WASM_TARGET)
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p ferrogate-core -p ferrogate-filter --target $(WASM_TARGET) -- -D warnings
	$(CARGO) test --workspace --exclude ferrogate-filter --exclude ferrogate-testfilter

## test-python: end-to-end tests with the official OpenAI, Anthropic and Google Gen AI Python
## SDKs (tests/python) against `ferrogate serve` (debug build, release filter wasm) in front of
## `ferrogate sim`
test-python: wasm
	$(CARGO) build -p ferrogate-sidecar
	FERROGATE_BIN=$(CURDIR)/target/debug/ferrogate FERROGATE_FILTER_WASM=$(CURDIR)/$(FILTER_WASM) scripts/pytest

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
