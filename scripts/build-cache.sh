# Sourced by the scripts that build into a target directory shared by every clone (~/.cache/koe):
# `claim_build_cache` before the first cargo command.
#
# Why: the workspace's crates get the same artifact names in every clone, and cargo's fingerprints
# keep the source paths of the clone that built them last. A build in one clone right after a
# build in another can then take the other clone's crates as up to date and test its code, not
# this one's. So when the cache last built another checkout, this checkout's crates are cleaned
# first (the dependencies, the slow part, stay); a build then records this checkout.
# shellcheck shell=bash

# claim_build_cache [TARGET_DIR]   (default: $CARGO_TARGET_DIR)
claim_build_cache() {
  local dir="${1:-$CARGO_TARGET_DIR}" here mark last
  here="$(pwd -P)"
  mark="$dir/.koe-checkout"
  mkdir -p "$dir"
  last="$(cat "$mark" 2>/dev/null || true)"
  if [ -n "$last" ] && [ "$last" != "$here" ]; then
    printf '==> %s last built %s: cleaning this workspace'"'"'s crates there first\n' "$dir" "$last" >&2
    CARGO_TARGET_DIR="$dir" cargo clean --quiet \
      -p koe-shared -p koe-testkit -p koe-functions -p koe-local >&2
  fi
  printf '%s\n' "$here" >"$mark"
}
