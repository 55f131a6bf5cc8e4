#!/usr/bin/env bash
# The spend guard at the chat API's rate: koe-local on DynamoDB Local behind the limits proxy
# (partition limits scaled 1:20 unless KOE_LIMITS_SCALE says otherwise, so 100 calls a second
# stand for 2,000), the stand-in OpenAI answering at once; the day's count starts short of the
# ceiling so the run goes through it. Prints the usage table's writes a second and per model
# call, throttles and the busiest partition (docs/spend-guard.md, "At scale"). Not a test.
#
#   bench/spend-guard.sh                   # 100 calls a second for 60 s
#   bench/spend-guard.sh 50 30
set -euo pipefail
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh"

build_release -p koe-bench --bin bench-spend-guard
log "$(machine_line)"
"$BIN/bench-spend-guard" "${1:-100}" "${2:-60}"
