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
# The browser tests (tests/tests/it/browser.rs) drive Debian's headless Chromium through
# chromedriver. Installed here when missing and apt-get can (root, as in CI); otherwise the
# tests fail and say how to install them. Nothing downloads a browser at run time.
if [ ! -x "${CHROMEDRIVER:-/usr/bin/chromedriver}" ] || [ ! -x "${CHROMIUM:-/usr/bin/chromium}" ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "installing chromium and chromium-driver (apt-get) for the browser tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "warning: chromium/chromedriver missing: the browser tests will fail; install them with" >&2
    echo "  sudo apt-get install -y chromium chromium-driver" >&2
  fi
fi
# The receiver snippets of docs/receivers.md run in the tests (pipeline.rs) with each
# language's Standard Webhooks library, installed here once into .local/receivers.
if [ ! -x .local/receivers/venv/bin/python ] || ! .local/receivers/venv/bin/python -c 'import standardwebhooks' 2>/dev/null; then
  echo "installing standardwebhooks (PyPI) into .local/receivers/venv for the receiver tests"
  python3 -m venv .local/receivers/venv
  .local/receivers/venv/bin/pip install -q 'standardwebhooks==1.3.0'
fi
if [ ! -d .local/receivers/node_modules/standardwebhooks ]; then
  echo "installing standardwebhooks (npm) into .local/receivers for the receiver tests"
  npm install --prefix .local/receivers --silent --no-audit --no-fund --no-save 'standardwebhooks@1.3.0'
fi
cargo test --workspace --all-targets "$@"
echo "screenshots of the portal and the dashboard: ${CARGO_TARGET_DIR:-target}/screenshots/"
