#!/usr/bin/env bash
# Shows that the simulation catches the endpoint-state and lease bugs: applies each mutant patch to the
# services (one at a time, reverted after), runs seeds until the first failure and prints it.
# Usage: bash sim/mutants/run.sh [seeds]   (needs a clean shared/ tree)
set -euo pipefail
cd "$(dirname "$0")/../.."
seeds=${1:-2000}
for patch in sim/mutants/*.patch; do
  git apply "$patch"
  trap 'git apply -R "$patch"' EXIT
  echo "== $(basename "$patch" .patch)"
  cargo build -q -p webhooks-sim
  "${CARGO_TARGET_DIR:-target}/debug/webhooks-sim" --seeds "$seeds" --first-failure || true
  git apply -R "$patch"
  trap - EXIT
done
