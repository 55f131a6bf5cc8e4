#!/usr/bin/env bash
# APNs pool: N pushes all due at one instant (07:00:00 JST, say) against the stand-in APNs with
# production's limits (testkit/src/push/limited/mod.rs: 1,000 streams per connection, 120 ± 30 ms per
# push, 150 ms handshake on a connection's first unwarmed use), through one open connection, the
# push pool prepared ahead of the instant, and the pool cold (bench/bins/src/bin/bench-apns-pool.rs).
# Prints a table of lateness after the due instant: when each push left (had a stream) and when it
# was answered. Not a test; see docs/benchmarks.md ("APNs connection pool") for what the stand-in leaves out.
#
#   bench/apns-pool.sh                  # 1,000 and 10,000 pushes, a few seconds
#   bench/apns-pool.sh 100000           # any list of counts
#
# Runs on the real (tokio) clock, not pinned: the stand-in and the pool share the process.
set -euo pipefail
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh"

if [[ $# -gt 0 ]]; then
  PUSHES=("$@")
else
  read -ra PUSHES <<<"${BENCH_PUSHES:-1000 10000}"
fi
build_release -p koe-bench --bin bench-apns-pool

MACHINE="$(machine_line)"
log "$MACHINE"
: >"$WORK/results.txt"
for n in "${PUSHES[@]}"; do
  log "$n pushes due at one instant"
  "$BIN/bench-apns-pool" --pushes "$n" >"$WORK/pool-$n.log" 2>"$WORK/pool-$n.err" \
    || die "bench-apns-pool failed: $(tail -n 5 "$WORK/pool-$n.err")"
  grep '^RESULT ' "$WORK/pool-$n.log" | sed 's/^RESULT //' | tee -a "$WORK/results.txt" >&2
done

echo "$MACHINE"
echo "stand-in APNs: 1,000 streams/connection, 120 ± 30 ms, 150 ms handshake; pool: 8 connections × 900 streams"
echo
results_table '| pushes | case | left p50 / p99 / max | answered p50 / p99 / max | answered within 1 s | connections | max in flight per connection | waited for a stream: at APNs / in the pool | cold handshakes |' \
  '| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |' <<'PY'
return (f'| {int(r["pushes"]):,} | {r["case"]} '
      f'| {r["left_p50_ms"]} / {r["left_p99_ms"]} / {r["left_max_ms"]} ms '
      f'| {r["answered_p50_ms"]} / {r["answered_p99_ms"]} / {r["answered_max_ms"]} ms '
      f'| {int(r["answered_within_1s"]):,} | {r["connections"]} | {r["max_in_flight_per_connection"]} '
      f'| {int(r["queued_apns"]):,} / {int(r["queued_pool"]):,} | {r["cold_connects"]} |')
PY
