#!/usr/bin/env bash
# The one test command: everything CI checks, on a fresh machine of this kind.
#   fmt, clippy (-D warnings), template lint, OpenAPI validation, then every test of the
#   workspace (unit, HTTP-level against stand-in servers on loopback).
# Installs what it needs into ~/.cache/koe (a Python venv for the linters); compiled
# dependencies are cached in $CARGO_TARGET_DIR (default ~/.cache/koe/target) across clones.
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

step "openapi-spec-validator openapi.yaml"
"$VENV/bin/openapi-spec-validator" openapi.yaml

step "cargo test"
cargo test --workspace --locked
