#!/usr/bin/env bash
# Prints the test command's closing lines from a `cargo test` log: the names of the failed tests
# (cargo's `test NAME ... FAILED` lines), then the one line CI reads,
# `Summary: N passed, N failed, N skipped`, summed over cargo's `test result:` lines (one per test
# binary). A binary that died before its result line still counts its FAILED tests: the failed
# count is never below the number of failed names. An absent or empty log gives all zeros.
#
#   scripts/summary.sh CARGO_TEST_LOG
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 CARGO_TEST_LOG" >&2; exit 2; }
LOG="$1"
[[ -r "$LOG" ]] || LOG=/dev/null

awk '
  /^test result:/ { p += $4; f += $6; i += $8; next }
  /^test .* \.\.\. FAILED$/ {
    name = $0; sub(/^test /, "", name); sub(/ \.\.\. FAILED$/, "", name)
    if (!(name in seen)) { seen[name] = 1; names[++n] = name }
  }
  END {
    if (n > f) f = n
    if (n > 0) {
      printf "\nFailed tests (%d):\n", n
      for (k = 1; k <= n; k++) printf "  %s\n", names[k]
    }
    printf "\nSummary: %d passed, %d failed, %d skipped\n", p, f, i
  }
' "$LOG"
