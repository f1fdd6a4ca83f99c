# The two commands of the README: `make run` and `make test`.
.PHONY: run test lint ci clean lambda-smoke

run:
	bash scripts/run-local.sh

test:
	bash scripts/test.sh

# cfn-lint/sam validate, cargo lambda build, glibc check, bootstraps under a local Runtime API
lambda-smoke:
	bash scripts/lambda-smoke.sh

# Benchmarks (not run by CI): its own moto, release builds, writes bench/report.md and charts
.PHONY: bench
bench:
	bash bench/run.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

ci: lint test

clean:
	cargo clean
	rm -rf .venv .local

# The fault harness at size (issue #35; `make test` runs it with 40 events at 5%): 300 events
# to 4 endpoints, 10% of the app's DynamoDB and SQS tries struck, 3% of record and counter writes failing
# every retry; strict (WEBHOOKS_FAULT_STRICT=1): a re-send after a 2xx or stats that disagree fail it.
# About 9 minutes on a busy 2-core machine.
.PHONY: faults
faults:
	WEBHOOKS_FAULT_EVENTS=300 WEBHOOKS_FAULT_RATE=0.1 WEBHOOKS_FAULT_STRICT=1 bash scripts/test.sh -- under_aws_faults --nocapture

# Deterministic simulation (docs/development.md, "Simulation"): `make sim SEEDS=N` runs seeds 0..N,
# `make sim SEED=1234` replays one seed with its trace.
.PHONY: sim
SEEDS ?= 20000
sim:
	cargo run -q -p webhooks-sim -- $(if $(SEED),--seed $(SEED),--seeds $(SEEDS))
