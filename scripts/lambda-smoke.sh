#!/usr/bin/env bash
# make lambda-smoke: the deployment checks of issue 5, all offline.
#   1. cfn-lint on infra/template.yaml (no findings), and `sam validate --lint` when the SAM CLI
#      is installed (LAMBDA_SMOKE_SAM=1 installs it; see below).
#   2. cargo lambda build --release --x86-64 of the four functions (cargo-lambda and zig from
#      PyPI, prebuilt), then each bootstrap's size and the newest GLIBC_ symbol version it
#      needs, which must be at most 2.34 (Amazon Linux 2023, provided.al2023).
#   3. smoke/lambda_smoke.py: the template against the code (table, variables, each alarm's and
#      dashboard chart's metric is one the code emits or AWS publishes), then each built
#      bootstrap under a local Lambda Runtime API, sent its real trigger event, against moto (or
#      AWS_ENDPOINT_URL if set); deliver's EMF line must carry the Stack dimension.
# Tools go into .venv-lambda; moto into .venv as for make test.
#
# LAMBDA_SMOKE_PHASE splits the run in two, so that CI can run the first beside `make test`:
#   checks: install the tools (and moto), cfn-lint, `sam validate --lint`: no Rust build, little CPU;
#   build:  cargo lambda build, the binaries' checks and the smoke test (installs what is missing);
#   all:    both, one after the other (the default).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"
mkdir -p .local

TOOLS="$ROOT/.venv-lambda"
CARGO_LAMBDA_VERSION="1.9.2"
ZIGLANG_VERSION="0.17.1"
CFN_LINT_VERSION="1.58.0"
SAM_CLI_VERSION="1.170.0"
FUNCTIONS=(ingest deliver sweeper admin)
GLIBC_MAX="2.34"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
start=$(date +%s)
PHASE="${LAMBDA_SMOKE_PHASE:-all}"
case "$PHASE" in
  checks | build | all) ;;
  *) echo "LAMBDA_SMOKE_PHASE must be checks, build or all, not '$PHASE'" >&2; exit 2 ;;
esac

step() { echo "== lambda: $* ($(($(date +%s) - start)) s)"; }

if [ ! -x "$TOOLS/bin/cargo-lambda" ] || [ ! -x "$TOOLS/bin/cfn-lint" ]; then
  step "installing cargo-lambda $CARGO_LAMBDA_VERSION, ziglang $ZIGLANG_VERSION, cfn-lint $CFN_LINT_VERSION into $TOOLS"
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q --disable-pip-version-check \
    "cargo-lambda==$CARGO_LAMBDA_VERSION" "ziglang==$ZIGLANG_VERSION" "cfn-lint==$CFN_LINT_VERSION"
fi
# cargo-lambda finds zig as `python3 -m ziglang` of the venv first on PATH.
export PATH="$TOOLS/bin:$PATH"

if [ "$PHASE" != build ]; then
  step "cfn-lint infra/template.yaml"
  cfn-lint --version
  cfn-lint -- infra/template.yaml
  echo "cfn-lint: no findings"

  # The SAM CLI is a large install (about a minute); CI runs it, `make lambda-smoke` by hand
  # only with LAMBDA_SMOKE_SAM=1. `sam validate --lint` runs cfn-lint through the SAM CLI and
  # reads samconfig.toml, so it also proves `template_file` there points at the template.
  if [ "${LAMBDA_SMOKE_SAM:-${CI:-}}" = "1" ] || [ "${LAMBDA_SMOKE_SAM:-${CI:-}}" = "true" ]; then
    SAM_VENV="$ROOT/.venv-sam"
    if [ ! -x "$SAM_VENV/bin/sam" ]; then
      step "installing aws-sam-cli $SAM_CLI_VERSION into $SAM_VENV"
      python3 -m venv "$SAM_VENV"
      "$SAM_VENV/bin/pip" install -q --disable-pip-version-check "aws-sam-cli==$SAM_CLI_VERSION"
    fi
    step "sam validate --lint (template from samconfig.toml)"
    SAM_CLI_TELEMETRY=0 "$SAM_VENV/bin/sam" --version
    SAM_CLI_TELEMETRY=0 "$SAM_VENV/bin/sam" validate --lint
  fi
fi
if [ "$PHASE" = checks ]; then
  ensure_moto
  step "checks done"
  exit 0
fi

step "cargo lambda build --release --x86-64 (${FUNCTIONS[*]})"
cargo lambda --version
packages=()
for f in "${FUNCTIONS[@]}"; do packages+=(-p "$f"); done
cargo lambda build --release --x86-64 "${packages[@]}"

step "binaries"
worst="0"
for f in "${FUNCTIONS[@]}"; do
  bin="$TARGET_DIR/lambda/$f/bootstrap"
  if [ ! -x "$bin" ]; then echo "missing $bin" >&2; exit 1; fi
  size=$(stat -c %s "$bin")
  glibc=$(objdump -T "$bin" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
  arch=$(objdump -f "$bin" | sed -n 's/.*architecture: \([^,]*\).*/\1/p')
  printf '  %-8s %9d bytes (%5.1f MiB)  %s  needs GLIBC_%s\n' "$f" "$size" \
    "$(awk -v s="$size" 'BEGIN { print s / 1048576 }')" "$arch" "$glibc"
  worst=$(printf '%s\n%s\n' "$worst" "$glibc" | sort -V | tail -1)
done
if [ "$(printf '%s\n%s\n' "$worst" "$GLIBC_MAX" | sort -V | tail -1)" != "$GLIBC_MAX" ]; then
  echo "a binary needs GLIBC_$worst, newer than Amazon Linux 2023's $GLIBC_MAX" >&2
  exit 1
fi
echo "newest GLIBC_ symbol needed: $worst (Amazon Linux 2023 has $GLIBC_MAX)"

step "smoke test of the bootstraps under a local Lambda Runtime API"
# The smoke's Python (boto3) lives in moto's venv: installed even when AWS_ENDPOINT_URL points
# elsewhere (then only the emulator is not started).
ensure_moto
if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
  port=$(free_port)
  start_moto "$port" .local/moto-lambda-smoke.log
  trap 'kill $MOTO_PID 2>/dev/null || true' EXIT
  export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
  echo "emulator: moto $MOTO_VERSION on $AWS_ENDPOINT_URL"
fi
"$VENV/bin/python" smoke/lambda_smoke.py --root "$ROOT" --bin-dir "$TARGET_DIR/lambda" --logdir .local
step "done"
