#!/usr/bin/env bash
# Builds every Lambda function as `sam build` does (cargo lambda build --release --arm64, cross
# compiled with zig; never `--compiler cargo`, which cannot link arm64 here), zips each one, prints
# each zip's size and fails if one is not under the limit (3 MB, docs/benchmarks.md).
#   scripts/lambda-build.sh            all functions
#   scripts/lambda-build.sh chat info  some
# cargo-lambda and zig come from PyPI into a venv under ~/.cache/koe; compiled dependencies stay
# in ~/.cache/koe/target-lambda (KOE_LAMBDA_TARGET_DIR), outside the clone, so later runs and
# fresh clones only rebuild what changed. A directory of its own (arm64 release shares nothing
# with the debug builds) so that scripts/test.sh can run it beside `cargo test`, which would
# otherwise wait on the target directory's lock. Zips: <that dir>/lambda/<function>/bootstrap.zip.
set -euo pipefail

cd "$(dirname "$0")/.."
CACHE="${KOE_CACHE_DIR:-$HOME/.cache/koe}"
export CARGO_TARGET_DIR="${KOE_LAMBDA_TARGET_DIR:-$CACHE/target-lambda}"
# shellcheck source=scripts/build-cache.sh
source scripts/build-cache.sh
claim_build_cache
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
LIMIT_BYTES="${KOE_ZIP_LIMIT_BYTES:-3000000}"
CARGO_LAMBDA_VERSION=1.9.2
ZIG_VERSION=0.17.0

VENV="$CACHE/venv-lambda"
install_tools() {
  if ! "$VENV/bin/cargo-lambda" lambda --version 2>/dev/null | grep -q " $CARGO_LAMBDA_VERSION " ||
    ! "$VENV/bin/python" -c "import ziglang" 2>/dev/null ||
    [ "$("$VENV/bin/python" -m ziglang version 2>/dev/null)" != "$ZIG_VERSION" ]; then
    echo "installing cargo-lambda $CARGO_LAMBDA_VERSION and zig $ZIG_VERSION into $VENV" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check \
      "cargo-lambda==$CARGO_LAMBDA_VERSION" "ziglang==$ZIG_VERSION"
  fi
}
# (another run may be installing them too: one at a time, see scripts/build-cache.sh)
locked "$VENV" install_tools
# cargo-lambda finds zig through the venv's python.
export PATH="$VENV/bin:$PATH"
locked "$CACHE/rustup" rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1 || true
# scripts/sam.sh only wants the tools (sam build runs cargo lambda itself).
[ -z "${KOE_LAMBDA_INSTALL_ONLY:-}" ] || exit 0

if [ "$#" -gt 0 ]; then
  FUNCTIONS=("$@")
else
  mapfile -t FUNCTIONS < <(ls functions/src/bin | sed 's/\.rs$//')
fi
BIN_ARGS=()
for f in "${FUNCTIONS[@]}"; do BIN_ARGS+=(--bin "$f"); done

started=$SECONDS
cargo lambda build --release --arm64 --locked --output-format zip -p koe-functions "${BIN_ARGS[@]}"
echo "cargo lambda build: $((SECONDS - started)) s" >&2

printf '\n%-12s %10s %10s\n' function "zip MB" "limit MB"
over=0
for f in "${FUNCTIONS[@]}"; do
  zip="$CARGO_TARGET_DIR/lambda/$f/bootstrap.zip"
  size=$(stat -c %s "$zip")
  mark=""
  if [ "$size" -ge "$LIMIT_BYTES" ]; then
    mark="  OVER THE LIMIT"
    over=1
  fi
  awk -v f="$f" -v s="$size" -v l="$LIMIT_BYTES" -v m="$mark" \
    'BEGIN { printf "%-12s %10.2f %10.2f%s\n", f, s / 1e6, l / 1e6, m }'
done
if [ "$over" -ne 0 ]; then
  echo "a function's zip is not under $((LIMIT_BYTES / 1000000)) MB (see docs/benchmarks.md)" >&2
  exit 1
fi
