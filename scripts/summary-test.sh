#!/usr/bin/env bash
# Checks scripts/summary.sh on the fake cargo logs in scripts/summary-fixtures/: a passing run, a
# failing one (one binary with a result line, one that died before its own), and no log at all.
set -euo pipefail
cd "$(dirname "$0")/.."

FAILS=0
check() {
  local name="$1" log="$2" want="$3" got
  got="$(scripts/summary.sh "$log")"
  if [[ "$got" == "$want" ]]; then
    echo "ok: $name"
  else
    printf 'FAILED: %s\n--- want\n%s\n--- got\n%s\n' "$name" "$want" "$got" >&2
    FAILS=$((FAILS + 1))
  fi
}

check "all passed" scripts/summary-fixtures/pass.log '
Summary: 4 passed, 0 failed, 1 skipped'

check "failed names, then the line" scripts/summary-fixtures/fail.log '
Failed tests (2):
  api_calls::cancel_after_claim_is_409
  src/lib.rs - layers (line 12)

Summary: 2 passed, 2 failed, 0 skipped'

check "no log yet" /nonexistent/cargo-test.log '
Summary: 0 passed, 0 failed, 0 skipped'

[[ "$FAILS" -eq 0 ]] || { echo "scripts/summary-test.sh: $FAILS check(s) failed" >&2; exit 1; }
