#!/usr/bin/env bash
# make test: runs every test against an AWS emulator, started on a free loopback port and
# stopped after (also when a test fails).
#   EMULATOR=localstack (default): LocalStack in host mode, installed on first use into
#     .local/localstack (scripts/localstack.sh). Its DynamoDB is AWS's DynamoDB Local, so
#     conditional writes are atomic and the concurrency tests run without Serialized.
#   EMULATOR=moto: moto's server, installed into .venv; quicker to install and start.
# A preset AWS_ENDPOINT_URL (a running LocalStack or moto, or real AWS) is used as it is and
# nothing is started; say which it is with WEBHOOKS_TEST_EMULATOR (see tests/src/lib.rs).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"
mkdir -p .local
if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
  port=$(free_port)
  case "${EMULATOR:-localstack}" in
    localstack)
      source scripts/localstack.sh
      ensure_localstack
      trap stop_localstack EXIT
      start_localstack "$port" .local/localstack-test.log
      export WEBHOOKS_TEST_EMULATOR=localstack
      echo "emulator: LocalStack $LOCALSTACK_VERSION on http://127.0.0.1:$port"
      ;;
    moto)
      ensure_moto
      start_moto "$port" .local/moto-test.log
      trap 'kill $MOTO_PID 2>/dev/null || true' EXIT
      export WEBHOOKS_TEST_EMULATOR=moto
      echo "emulator: moto $MOTO_VERSION on http://127.0.0.1:$port"
      ;;
    *)
      echo "EMULATOR must be localstack or moto, not '$EMULATOR'" >&2
      exit 2
      ;;
  esac
  export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
fi
cargo test --workspace --all-targets "$@"
