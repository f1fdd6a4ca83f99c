#!/usr/bin/env bash
# make bench: starts its own moto on a free port, builds the release binaries (the four
# Lambda functions and the bench), runs every measurement, writes bench/report.md and the PNG
# charts beside it, and stops moto. Not part of CI. About 10 minutes on a 2-core machine, plus
# the release builds.
# Extra arguments are ignored; BENCH_QUICK=1 runs smaller sizes (to try it out).
# BENCH_ONLY=part[,part...] runs only those parts: requests (sections 1-2, request counts and
# dollars; about a minute), throughput (3-4, throughput and latency), sweeper (5), lambda
# (6-7, cold start, size and deliver's memory: the only part that needs the functions'
# release builds, so the others build just the bench), noisy (8, the noisy neighbour: 9 fast
# endpoints and one answering after 9 s; the template's 20 pollers over an in-memory store and
# queue, 2 pollers on moto; about 4 minutes), ratelimit (9, static and adaptive rate limits
# against a receiver taking 5 a second), oauth (10, an OAuth endpoint with a cached token vs
# a plain one: token requests, AWS requests, dollars, time per attempt; under a minute),
# validation (11, schema validation at ingest: CPU per event, catalog requests; seconds),
# api_keys (12, a producer's API key at ingest: requests and CPU per event; seconds). A
# partial run writes bench/out/report.md and its charts there, leaving bench/report.md alone.
# E.g. BENCH_ONLY=requests bench/run.sh
set -euo pipefail
source "$(dirname "$0")/../scripts/env.sh"
cd "$ROOT"
mkdir -p .local bench/out
ensure_moto
# The functions build on their own, as `cargo lambda build` builds them for deployment, so
# the bench's own dependency features do not end up in the binaries whose size is reported.
case ",${BENCH_ONLY:-lambda}," in
  *,lambda,*) cargo build --release -p ingest -p deliver -p sweeper -p admin ;;
esac
cargo build --release -p webhooks-bench
report=bench/report.md
if [ -n "${BENCH_ONLY:-}" ]; then report=bench/out/report.md; fi
if [ ! -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]; then
  echo "note: no DejaVu font (Debian: fonts-dejavu-core); the charts will have no text" >&2
fi
port=$(free_port)
start_moto "$port" .local/moto-bench.log
trap 'kill $MOTO_PID 2>/dev/null || true' EXIT
export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
export MOTO_VERSION
echo "emulator: moto $MOTO_VERSION on $AWS_ENDPOINT_URL"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
"${CARGO_TARGET_DIR:-$ROOT/target}/release/webhooks-bench"
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
printf '\n## Machine load\n\nLoad average (1, 5, 15 min) when the run started: %s; when it ended: %s (on 2 cores; anything above about 1 means other work shared the CPU with the emulator and the bench, which lowers the throughput and raises the latency figures).\n' \
  "$load_start" "$load_end" >> "$report"
