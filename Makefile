# lograft: `make run` starts a three-node cluster with a short demo; `make test` runs lint, types and tests.
# The interpreter the virtualenv is made from. Debian's python3.11 is built with profile-guided
# optimisation and ran this project's tests 1.6x and its per-record producer 1.4x faster than
# a plain source build (pyenv's default, first on PATH on some machines); so it is preferred
# when it is there with its venv module. PYTHON=... overrides.
PYTHON ?= $(shell /usr/bin/python3.11 -c 'import ensurepip, venv' >/dev/null 2>&1 \
	&& echo /usr/bin/python3.11 || echo python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
DATA ?= data/cluster

.PHONY: spark-demo sim lock install run test lint format typecheck unit integration docker-test image chaos chaos-tools kafka-tools proto proto-check api-baseline bench bench-trace bench-compare clean docs

$(STAMP): pyproject.toml constraints.txt proto/lograft/protocol/_speedups.c replica/_fsync_worker.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==25.3
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,spark]'
	touch $(STAMP)

install: $(STAMP)

## Start a three-node cluster on 127.0.0.1:9092-9094 (data in ./data/cluster) and run a short demo.
run: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m cluster.demo --data-dir $(DATA)

## After make run: a Spark Structured Streaming pipeline (spark/examples/windowed_counts.py)
## counts page views per minute from one topic into another, exactly once, and prints them.
spark-demo: $(STAMP)
	$(BIN)/python -m spark.examples.windowed_counts --seed --checkpoint data/spark-demo/checkpoint

## Everything CI checks; the log ends with the 25 slowest tests (the suite is kept under 45 min).
test: $(STAMP) chaos-tools kafka-tools lint typecheck proto-check rust-client
	$(BIN)/pytest -q --durations=25 tests

## The Rust client (clients/rust): a debug build (its binary serves tests/integration/test_rust_client.py;
## cold, about 40 s on 2 cores; release takes twice that) and its unit tests, crates from crates.io.
.PHONY: rust-client
rust-client:
	cargo build --locked --manifest-path clients/rust/Cargo.toml
	cargo test --locked --manifest-path clients/rust/Cargo.toml

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

integration: $(STAMP)
	$(BIN)/pytest -q tests/integration

## The docker-compose cluster's tests (they build the image first).
docker-test: $(STAMP)
	$(BIN)/pytest -q tests/docker

## Build the lograft:latest image: FROM python:3.11-slim-bookworm if a registry answers, else
## FROM a local Debian base (mmdebstrap + docker import). Then: docker-compose up -d
image: $(STAMP)
	PYTHON=$(BIN)/python docker/build-image.sh

## Regenerate proto/lograft/protocol/wire from proto/*.proto.
proto: $(STAMP)
	$(BIN)/python proto/generate.py

## The stubs match the .proto files, and lograft.v1 has no breaking change against its last
## release (proto/api/lograft.v1.binpb; the rules: docs/reference/grpc-api.md).
proto-check: $(STAMP)
	$(BIN)/pytest -q tests/unit/test_proto_drift.py tests/unit/test_api_compat.py

## On release: freeze today's lograft.v1 as the baseline the breaking-change check compares with.
api-baseline: $(STAMP)
	$(BIN)/python proto/api_compat.py baseline

## Long deterministic simulation of the Raft core: make sim SCHEDULES=200000 SEED_BASE=3000
SCHEDULES ?= 100000
SEED_BASE ?= 0
sim: $(STAMP)
	LOGRAFT_SIM_SCHEDULES=$(SCHEDULES) LOGRAFT_SIM_SEED_BASE=$(SEED_BASE) $(BIN)/pytest -q -o timeout=0 tests/sim/test_raft_simulation.py -k simulated_schedules

## The long chaos set (about 90 minutes): every scenario with acks=all on three local nodes, the
## compose scenarios on docker-compose.yml, the workloads that trade safety away; rewrites the
## results table of docs/guarantees.md. (make test runs the short set, tests/integration/test_chaos_runner.py.)
chaos: $(STAMP) chaos-tools image
	$(BIN)/python -m chaos suite --set long --update-docs docs/guarantees.md

## The Debian packages the chaos faults use (iproute2, nftables, fuse3, faketime), when missing and root.
chaos-tools:
	chaos/install-tools.sh

## Kafka's own tools the Kafka-protocol tests run (Debian's kcat), installed when missing;
## LOGRAFT_REQUIRE_KCAT=1 (.ci/run) makes a machine without it fail here.
kafka-tools:
	INSTALL_LABEL="kafka tools" INSTALL_PACKAGES=kcat INSTALL_REQUIRE_VAR=LOGRAFT_REQUIRE_KCAT \
		chaos/install-tools.sh

## Benchmarks print JSON to stdout and write bench/results/*.json; the matrix (acks x sizes x
## send/send_bulk x compression, end to end at 10/50/90 % of the peak, consume, scaling) also
## writes bench/results/matrix.html. MATRIX_ARGS="--quick" runs a one-run smoke version.
MATRIX_ARGS ?=
bench: $(STAMP)
	$(BIN)/python bench/single_node.py
	$(BIN)/python bench/rpc_transport.py
	$(BIN)/python bench/wake_cost.py
	$(BIN)/python bench/client_paths.py
	$(BIN)/python bench/ack_latency.py
	$(BIN)/python bench/matrix.py $(MATRIX_ARGS)

## One acks=all record's path, step by step, from the system calls of every process (perf
## trace, installed when missing; needs root): bench/results/path_trace.json.
bench-trace: $(STAMP)
	bench/install-tool.sh perf linux-perf
	$(BIN)/python bench/path_trace.py

# nats-py (pyproject's bench extra), added to the venv that make install built.
$(BENCH_STAMP): $(STAMP) pyproject.toml constraints.txt
	$(BIN)/pip install --quiet -c constraints.txt -e '.[bench]'
	touch $(BENCH_STAMP)

## lograft against a three-node NATS JetStream cluster (Debian's nats-server, installed when
## missing): the same workloads, alternating; prints the ratio per workload as JSON and writes
## bench/results/compare_nats.json. Options through COMPARE_ARGS="--runs 5 --messages 200000".
COMPARE_ARGS ?=
bench-compare: $(BENCH_STAMP)
	bench/install-tool.sh nats-server nats-server
	$(BIN)/python bench/compare_nats.py $(COMPARE_ARGS)

## Re-pin every installed package after changing pyproject.toml.
lock: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,spark,bench]'
	{ echo '# Exact versions of every package in .venv (direct and transitive). Regenerate: make lock'; \
	  $(BIN)/pip freeze --exclude-editable; } > constraints.txt

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

## Regenerate docs/reference from the code's config definitions and docstrings.
docs: $(STAMP)
	$(BIN)/python docs/generate.py
