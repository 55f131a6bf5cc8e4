#!/usr/bin/env bash
# `sam build` of every function of template.yaml, as a deploy starts (scripts/sam.sh build), on
# the tree as it is, into a temporary build directory; then each built bootstrap is checked to
# be the one scripts/lambda-build.sh just compiled (the same bytes as the bootstrap in its zip).
# Both build into the same target directory (KOE_LAMBDA_TARGET_DIR, default
# ~/.cache/koe/target-lambda) with the same package, profile and target (each function's
# CodeUri is functions/, so cargo selects koe-functions as `-p koe-functions` does): run after
# scripts/lambda-build.sh, sam build's cargo lambda runs find everything compiled.
#   scripts/lambda-build.sh && scripts/sam-build-check.sh
set -euo pipefail

cd "$(dirname "$0")/.."
CACHE="${KOE_CACHE_DIR:-$HOME/.cache/koe}"
TARGET="${KOE_LAMBDA_TARGET_DIR:-$CACHE/target-lambda}"
BUILD="$(mktemp -d)"
trap 'rm -rf "$BUILD"' EXIT

started=$SECONDS
KOE_LAMBDA_TARGET_DIR="$TARGET" scripts/sam.sh build --build-dir "$BUILD/build" \
  --cache-dir "$BUILD/cache" >&2
echo "sam build: $((SECONDS - started)) s" >&2

# Each function's logical id and binary, from template.yaml.
mapfile -t FUNCTIONS < <(awk '
  /^  [A-Za-z0-9]+:$/ { id = $1; sub(":", "", id) }
  /^        Binary: / { print id " " $2 }' template.yaml)
[ "${#FUNCTIONS[@]}" -gt 0 ] || { echo "no function found in template.yaml" >&2; exit 1; }
bad=0
for entry in "${FUNCTIONS[@]}"; do
  read -r id binary <<<"$entry"
  built="$BUILD/build/$id/bootstrap"
  zip="$TARGET/lambda/$binary/bootstrap.zip"
  if [ ! -f "$built" ] || [ ! -f "$zip" ]; then
    echo "$id: no bootstrap from sam build ($built) or no zip from lambda-build.sh ($zip)" >&2
    bad=1
    continue
  fi
  ours=$(python3 -c 'import hashlib, sys, zipfile
print(hashlib.sha256(zipfile.ZipFile(sys.argv[1]).read("bootstrap")).hexdigest())' "$zip")
  sams=$(sha256sum "$built" | cut -d' ' -f1)
  if [ "$ours" != "$sams" ]; then
    echo "$id: sam build's bootstrap is not the one just compiled ($binary)" >&2
    bad=1
  fi
done
[ "$bad" -eq 0 ] || exit 1
echo "sam build: ${#FUNCTIONS[@]} functions, each bootstrap the one just compiled" >&2
