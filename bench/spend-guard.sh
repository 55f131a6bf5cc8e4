#!/usr/bin/env bash
# The spend guard at the chat API's rate: koe-local on DynamoDB Local behind the limits proxy
# (partition limits scaled 1:20 unless KOE_LIMITS_SCALE says otherwise, so 100 calls a second
# stand for 2,000), the stand-in OpenAI answering at once; the day's count starts short of the
# ceiling so the run goes through it. Prints the usage table's writes a second and per model
# call, throttles and the busiest partition, the calls refused for a throttled counter and the
# tokens served against the ceiling (docs/spend-guard.md, "At scale"). Not a test.
#
#   bench/spend-guard.sh                   # 100 calls/s 60 s at 400M; then 93 calls/s 20 s at
#                                          # 60,000 and at the default 5M scaled 1:20 (250,000)
#   bench/spend-guard.sh 50 30 [CEILING]   # one run
set -euo pipefail
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh"

build_release -p koe-bench --bin bench-spend-guard
log "$(machine_line)"
# koe-local's metrics (EMF lines) left out.
run() { "$BIN/bench-spend-guard" "$@" | grep -v '"_aws"'; }
if [ $# -gt 0 ]; then
  run "$@"
  exit
fi
run 100 60 400000000
for ceiling in 60000 250000; do
  log "small ceiling: $ceiling"
  run 93 20 "$ceiling"
done
