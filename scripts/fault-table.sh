#!/usr/bin/env bash
# Prints the fault table: the rows the fault-injection tests (shared/tests/it/faults_*.rs, through
# koe_testkit::faults::record) wrote into the `cargo test` output, as one aligned table
# (fault | expected | observed), grouped by the area before the fault's first colon (rows of one
# area keep the order the tests wrote them in). Fails if there is no row at all.
#
#   scripts/fault-table.sh CARGO_TEST_LOG
set -euo pipefail

[[ $# -eq 1 && -r "$1" ]] || { echo "usage: $0 CARGO_TEST_LOG" >&2; exit 2; }

awk '{ i = index($0, "FAULT-TABLE\t"); if (i) print substr($0, i) }' "$1" | LC_ALL=C sort -s -t: -k1,1 | awk -F '\t' '
  {
    n = split($0, f, "\t")
    if (n < 4) next
    rows++
    for (c = 1; c <= 3; c++) {
      cell[rows, c] = f[c + 1]
      if (length(f[c + 1]) > width[c]) width[c] = length(f[c + 1])
    }
  }
  END {
    if (rows == 0) { print "fault-table: no rows in the test output" > "/dev/stderr"; exit 1 }
    split("fault|expected|observed", head, "|")
    for (c = 1; c <= 3; c++) if (length(head[c]) > width[c]) width[c] = length(head[c])
    fmt = "%-" width[1] "s | %-" width[2] "s | %s\n"
    printf "\nFault table (%d faults injected by shared/tests/it/faults_*.rs)\n\n", rows
    printf fmt, head[1], head[2], head[3]
    rule = ""
    for (c = 1; c <= 3; c++) {
      line = sprintf("%" width[c] "s", ""); gsub(/ /, "-", line)
      rule = rule (c > 1 ? "-+-" : "") line
    }
    print rule
    for (r = 1; r <= rows; r++) printf fmt, cell[r, 1], cell[r, 2], cell[r, 3]
  }
'
