#!/usr/bin/env bash
# The custom metrics the stack publishes in an hour, counted from the code's own records, and what
# they, the alarms and the dashboard cost a month (docs/operations.md, "What it costs", quotes the
# figures). bench/bins/src/bin/bench-metric-hours.rs does the work: an idle hour, a busy one
# (100,000 calls and 500,000 requests a day) and a faulty one, minute by minute through the code
# that writes the records, counting the distinct (namespace, name, dimension values) of their EMF
# lines; the alarms and dashboards are read from template.yaml. A debug build: it counts, it does
# not time, and a debug build checks every record against the catalogue. Not a test, and not run
# by CI. Takes seconds once built.
#
#   bench/metric-hours.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${KOE_CACHE_DIR:-$HOME/.cache/koe}/target}"
# shellcheck source=scripts/build-cache.sh
source scripts/build-cache.sh
claim_build_cache
cargo run --quiet --locked -p koe-bench --bin bench-metric-hours
