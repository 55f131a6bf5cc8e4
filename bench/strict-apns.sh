#!/usr/bin/env bash
# A crowded second on the strict APNs stand-in (issue 48): 10,000 calls due in one second through
# the dispatcher (split into parts as deployed) and the production APNs client, on the in-memory
# store; 2 % of the calls to dead tokens spread through the second (each 410 drops its
# connection's stream limit to 1 until a success), one graceful GOAWAY mid-second. Prints each
# call's pushes received by the stand-in beside the outcome the dispatcher recorded (a table:
# outcome × times received), and the live-token calls' lateness.
# bench/bins/src/bin/bench-strict-apns.rs does the run; docs/benchmarks.md ("The strict APNs
# stand-in") says where each behaviour comes from. Not a test, and not run by CI.
#
#   bench/strict-apns.sh                               # 10,000 calls
#   BENCH_CALLS=1000 bench/strict-apns.sh --go-away-at 300 --latency-ms 20   # the binary's flags
#   BENCH_PER_CALL=calls.tsv bench/strict-apns.sh      # also every call's line: received beside
#                                                      # recorded, each attempt's answer and times
set -euo pipefail
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh"

build_release -p koe-bench --bin bench-strict-apns
MACHINE="$(machine_line)"
log "$MACHINE"
"$BIN/bench-strict-apns" --calls "${BENCH_CALLS:-10000}" --per-call "$WORK/per-call.tsv" "$@" \
  2>"$WORK/strict.err" || die "bench-strict-apns failed: $(tail -n 5 "$WORK/strict.err")"
echo "$MACHINE"
if [[ -n "${BENCH_PER_CALL:-}" ]]; then
  cp "$WORK/per-call.tsv" "$BENCH_PER_CALL"
  log "each call's line: $BENCH_PER_CALL"
fi
