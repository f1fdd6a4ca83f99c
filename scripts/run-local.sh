#!/usr/bin/env bash
# make run: the emulator (unless AWS_ENDPOINT_URL is set) and the local runtime in the
# foreground. Ctrl-C stops both.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"
mkdir -p .local
if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
  ensure_moto
  # MOTO_PORT when set; else 4599, or any free port when something else holds 4599.
  port="${MOTO_PORT:-4599}"
  if [ -z "${MOTO_PORT:-}" ] && ! port_is_free "$port"; then
    port=$(free_port)
    echo "port 4599 is taken: moto goes on port $port (MOTO_PORT to choose one)" >&2
  fi
  start_moto "$port" .local/moto.log
  trap 'kill $MOTO_PID 2>/dev/null || true' EXIT
  export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
  echo "emulator: moto $MOTO_VERSION on $AWS_ENDPOINT_URL (log in .local/moto.log)"
fi
export WEBHOOKS_LOG_FORMAT="${WEBHOOKS_LOG_FORMAT:-text}"
# Not quiet: a first build compiles about 400 crates (3.5 minutes measured on 2 idle
# cores); cargo's progress bar shows where it is. The admin CLI is built here too, so its first
# `cargo run -p webhooks-admin` does not compile for minutes.
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
if [ ! -x "$TARGET_DIR/debug/webhooks-local" ]; then
  echo "building the local runtime and the admin CLI (first build: about 3.5 minutes on 2 idle cores)" >&2
fi
cargo build -p webhooks-local -p webhooks-admin
"$TARGET_DIR/debug/webhooks-local"
