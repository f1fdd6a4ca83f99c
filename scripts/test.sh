#!/usr/bin/env bash
# make test: runs every test against the AWS emulator. Starts moto on a free port unless
# AWS_ENDPOINT_URL is already set (LocalStack, a running moto, or real AWS), and stops it after.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"
mkdir -p .local
if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
  ensure_moto
  port=$(free_port)
  start_moto "$port" .local/moto-test.log
  trap 'kill $MOTO_PID 2>/dev/null || true' EXIT
  export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
  echo "emulator: moto $MOTO_VERSION on $AWS_ENDPOINT_URL"
fi
cargo test --workspace --all-targets "$@"
