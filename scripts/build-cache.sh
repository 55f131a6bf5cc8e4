# Sourced by the scripts that build into a target directory shared by every clone (~/.cache/koe):
# `claim_build_cache` before the first cargo command; `locked` around installs into the cache.
#
# Why: the workspace's crates get the same artifact names in every clone, and cargo's fingerprints
# keep the source paths of the clone that built them last. A build in one clone right after a
# build in another can then take the other clone's crates as up to date and test its code, not
# this one's. So when the cache last built another checkout, this checkout's crates are cleaned
# first (the dependencies, the slow part, stay); a build then records this checkout.
#
# Two runs at once (two clones, or the same one twice) would clean and overwrite each other's
# crates, test binaries included, mid-run. So a run holds the target directory (a lock on
# <dir>/.koe-lock, released when the script that claimed it exits): a second run, finding it
# held, takes the next free one of <dir>-2, <dir>-3, <dir>-4 (the first time, a cold build) and
# says so. Scripts started by a run that claimed the directory (KOE_BUILD_CACHE_CLAIMED lists
# them) use it as is.
# shellcheck shell=bash

# claim_build_cache [VAR]   VAR names the variable holding the target directory (default:
# CARGO_TARGET_DIR; scripts/test.sh also claims KOE_LAMBDA_TARGET_DIR); it is exported, set to
# the directory taken.
claim_build_cache() {
  local var="${1:-CARGO_TARGET_DIR}" base dir="" fd="" suffix here mark last
  base="${!var}"
  case ":${KOE_BUILD_CACHE_CLAIMED:-}:" in
    *":$base:"*) export "${var?}"; return 0 ;;
  esac
  for suffix in "" -2 -3 -4; do
    mkdir -p "$base$suffix"
    exec {fd}>>"$base$suffix/.koe-lock"
    if flock -n "$fd"; then
      dir="$base$suffix"
      break
    fi
    exec {fd}>&-
  done
  if [ -z "$dir" ]; then
    dir="$base"
    exec {fd}>>"$dir/.koe-lock"
    printf '==> %s and its spares are held by other runs: waiting for %s\n' "$base" "$dir" >&2
    flock "$fd"
  fi
  [ "$dir" = "$base" ] ||
    printf '==> %s is held by another run: building in %s\n' "$base" "$dir" >&2
  printf -v "$var" '%s' "$dir"
  export "${var?}"
  export KOE_BUILD_CACHE_CLAIMED="${KOE_BUILD_CACHE_CLAIMED:+$KOE_BUILD_CACHE_CLAIMED:}$dir"

  here="$(pwd -P)"
  mark="$dir/.koe-checkout"
  last="$(cat "$mark" 2>/dev/null || true)"
  if [ -n "$last" ] && [ "$last" != "$here" ]; then
    printf '==> %s last built %s: cleaning this workspace'"'"'s crates there first\n' "$dir" "$last" >&2
    CARGO_TARGET_DIR="$dir" cargo clean --quiet \
      -p koe-shared -p koe-testkit -p koe-functions -p koe-local -p koe-bench >&2
  fi
  printf '%s\n' "$here" >"$mark"
}

# locked PATH COMMAND...   runs COMMAND (a function or a program) holding PATH.lock, so that two
# runs installing the same venv (or anything else into the shared cache) take turns; COMMAND
# should first check whether the work is already done.
locked() {
  local path="$1"
  shift
  mkdir -p "$(dirname "$path")"
  (
    flock 9
    "$@"
  ) 9>>"$path.lock"
}

# pip_venv VENV COMMAND VERSION PACKAGE [GREP_FLAGS]   installs PACKAGE==VERSION into VENV
# (holding VENV.lock) unless `VENV/bin/COMMAND --version` already prints VERSION (matched by
# `grep GREP_FLAGS`, default -q; -qx when the command prints the version alone).
pip_venv() {
  local venv="$1" command="$2" version="$3" package="$4" flags="${5:--q}"
  _pip_venv_install() {
    if ! "$venv/bin/$command" --version 2>/dev/null | grep "$flags" "$version"; then
      echo "installing $package $version into $venv" >&2
      python3 -m venv "$venv"
      "$venv/bin/pip" install --quiet --disable-pip-version-check "$package==$version"
    fi
  }
  locked "$venv" _pip_venv_install
}
