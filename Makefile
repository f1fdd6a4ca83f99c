# The two commands of the README: `make run` and `make test`.
.PHONY: run test lint ci clean

run:
	bash scripts/run-local.sh

test:
	bash scripts/test.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

ci: lint test

clean:
	cargo clean
	rm -rf .venv .local
