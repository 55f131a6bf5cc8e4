#!/usr/bin/env bash
# An inflated minute count (issue 29): runs shared/tests/it/dispatch_inflated_count.rs on
# DynamoDB Local with the minute's count inflated by each of BENCH_INFLATE (default
# "10000 1000000": 313 shards, and past the ceiling, its 5,000) and prints the test's figures:
# how long the first selection of the inflated minute took, the most selection requests in
# flight, and how late the calls due meanwhile (that minute's and the next's) left. Quoted in
# docs/scale.md, "An inflated count". Not a test, and not run by CI; a debug test build in
# CARGO_TARGET_DIR as set.
#
#   bench/inflated-count.sh
#   BENCH_INFLATE=100000 bench/inflated-count.sh
set -euo pipefail
cd "$(dirname "$0")/.."

read -ra SIZES <<<"${BENCH_INFLATE:-10000 1000000}"
TEST=dispatch_inflated_count::an_inflated_minute_is_queried_a_bounded_number_at_once_and_delays_no_call
printf 'machine: %s cores, %s, load average %s\n' "$(nproc)" \
  "$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)" "$(cut -d' ' -f1-3 /proc/loadavg)"
cargo test -q -p koe-shared --test it --no-run
for n in "${SIZES[@]}"; do
  printf '==> count inflated by %s\n' "$n"
  KOE_BENCH_INFLATE_BY="$n" cargo test -q -p koe-shared --test it -- --exact "$TEST" \
    --nocapture 2>&1 | grep -E '^inflated minute|panicked|^test result' || true
done
