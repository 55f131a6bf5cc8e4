#!/usr/bin/env bash
# Every fixture of docs/local.md's table through the real `sam local invoke` (SAM CLI, Docker, the
# arm64 bootstraps `sam build` makes), each answer checked against the table; then `sam local
# start-api`'s GET /health and POST /api/chat. The invoke commands run are docs/local.md's own
# (its generated "With SAM" block), with what its "Shared setup" starts: DynamoDB Local with the
# template's tables, the stand-in OpenAI and the stand-in Secrets Manager (testkit's binaries).
# A separate check, not in scripts/test.sh (figures: docs/testing.md, "sam local").
#   scripts/sam-local.sh
#
# On a machine like CI's (no Docker engine, nothing pulled from public registries, loopback only)
# it needs root and installs what is missing (`apt-get install docker.io qemu-user-static
# debootstrap binfmt-support`), and works around three things, none of which a developer with ordinary Docker needs:
# - no daemon answers: it starts one without networking of its own (`dockerd --bridge=none
#   --iptables=false`, vfs storage), and stops it at the end;
# - `public.ecr.aws/lambda/provided:al2023-arm64` cannot be pulled: it builds an image under that
#   name (once; the daemon keeps it) from Debian 12 arm64 packages debootstrap fetches (glibc,
#   CA bundle) with the Lambda image's layout and variables, and SAM runs with
#   `--skip-pull-image` (SAM adds its runtime interface emulator on top, as it does to AWS's
#   image); arm64 binaries run under qemu-user-static (binfmt_misc, flag F);
# - with no bridge a container has only its own loopback, and the port SAM publishes is never
#   bound: scripts/sam-local-relay.py copies connections between the host's loopback and each
#   container's (SAM's published port in, env.json's ports out), and env.json's
#   host.docker.internal is 127.0.0.1 in the container (`--add-host`).
# KOE_SAM_LOCAL_ONLY=<text>: only the fixtures whose file name holds it.
# Environment: KOE_CACHE_DIR (default ~/.cache/koe: the base image's root file system is kept
# there), CARGO_TARGET_DIR (testkit's binaries), KOE_LAMBDA_TARGET_DIR (sam build's).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE="${KOE_CACHE_DIR:-$HOME/.cache/koe}"
BASE_IMAGE=public.ecr.aws/lambda/provided:al2023-arm64
WORK="$(mktemp -d)"
PIDS=()
DOCKERD_PID=
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -n "$DOCKERD_PID" ]; then
    kill "$DOCKERD_PID" 2>/dev/null || true
    wait "$DOCKERD_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
step() { echo "==> $*  [$SECONDS s]" >&2; }
die() { echo "sam-local: $*" >&2; exit 1; }
# need COMMAND PACKAGE: as root with apt-get (a fresh machine of CI's kind) the package is
# installed when the command is missing; elsewhere the script stops and names it.
need() {
  command -v "$1" >/dev/null && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    step "installing $2 (for $1)"
    { [ -n "${APT_UPDATED:-}" ] || apt-get update -qq; } >&2 && APT_UPDATED=1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >&2 ||
      die "apt-get install $2 failed"
  fi
  command -v "$1" >/dev/null || die "$1 not found: apt-get install $2"
}

# --- Docker ---------------------------------------------------------------------------------
need docker docker.io
if ! docker info >/dev/null 2>&1; then
  need dockerd docker.io
  step "starting a Docker daemon (no bridge, no iptables, vfs storage; log: $CACHE/sam-local-dockerd.log)"
  mkdir -p "$CACHE"
  dockerd --storage-driver=vfs --iptables=false --ip6tables=false --bridge=none \
    >"$CACHE/sam-local-dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || die "dockerd did not answer (see $CACHE/sam-local-dockerd.log)"
fi
# Without a bridge network, containers reach nothing and nothing reaches them: the relay.
RELAY=
docker network inspect bridge >/dev/null 2>&1 || RELAY=1

# --- arm64 under emulation --------------------------------------------------------------------
if [ "$(uname -m)" != aarch64 ]; then
  BINFMT=/proc/sys/fs/binfmt_misc
  [ -e "$BINFMT/register" ] || mount -t binfmt_misc binfmt_misc "$BINFMT"
  if ! grep -qs '^flags: .*F' "$BINFMT/qemu-aarch64"; then
    need update-binfmts binfmt-support
    [ -e /usr/libexec/qemu-binfmt/aarch64-binfmt-P ] || need qemu-aarch64-static qemu-user-static
    [ -e /usr/libexec/qemu-binfmt/aarch64-binfmt-P ] || die "apt-get install qemu-user-static"
    # A package installed just now may not be in binfmt-support's database yet (its trigger
    # does not run without an init system): imported first; else systemd's line, flags OPF.
    update-binfmts --import qemu-aarch64 >/dev/null 2>&1 || true
    update-binfmts --enable qemu-aarch64 2>/dev/null ||
      cat /usr/lib/binfmt.d/qemu-aarch64.conf >"$BINFMT/register" ||
      die "could not register qemu-aarch64 with binfmt_misc"
  fi
  grep -qs '^flags: .*F' "$BINFMT/qemu-aarch64" || die "qemu-aarch64 is not registered with flag F"
fi

# --- The base image SAM builds its emulator image on ----------------------------------------------
PULL=()
if [ -n "$RELAY" ] || ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  PULL=(--skip-pull-image)
fi
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  ROOTFS="$CACHE/sam-base-bookworm-arm64.tar"
  if [ ! -s "$ROOTFS" ]; then
    need debootstrap debootstrap
    step "debootstrap: Debian 12 arm64 (glibc, ca-certificates) for $BASE_IMAGE (once)"
    tree="$WORK/rootfs"
    debootstrap --arch=arm64 --variant=minbase --include=ca-certificates bookworm "$tree" \
      http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1 \
      || { tail -20 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }
    rm -rf "$tree"/var/cache/apt/archives/*.deb "$tree"/var/lib/apt/lists/* \
      "$tree"/usr/share/{doc,man,info,locale}/*
    tar -C "$tree" -cf "$ROOTFS.tmp" . && mv "$ROOTFS.tmp" "$ROOTFS"
    rm -rf "$tree"
  fi
  step "building $BASE_IMAGE from $ROOTFS"
  mkdir "$WORK/base"
  cp "$ROOTFS" "$WORK/base/rootfs.tar"
  # The Lambda base image's layout and variables (as `docker inspect` shows AWS's).
  cat >"$WORK/base/Dockerfile" <<'EOF'
FROM scratch
ADD rootfs.tar /
ENV LANG=en_US.UTF-8 TZ=:/etc/localtime \
    PATH=/var/lang/bin:/usr/local/bin:/usr/bin/:/bin:/opt/bin \
    LD_LIBRARY_PATH=/var/lang/lib:/lib64:/usr/lib64:/var/runtime:/var/runtime/lib:/var/task:/var/task/lib:/opt/lib \
    LAMBDA_TASK_ROOT=/var/task LAMBDA_RUNTIME_DIR=/var/runtime
RUN mkdir -p /var/task /var/runtime /var/lang/bin /opt /etc/pki/tls/certs \
 && ln -sf /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt
WORKDIR /var/task
ENTRYPOINT ["/lambda-entrypoint.sh"]
EOF
  DOCKER_BUILDKIT=0 docker build -q --platform linux/arm64 -t "$BASE_IMAGE" "$WORK/base" >/dev/null
  rm -rf "$WORK/base"
fi

# --- sam build --------------------------------------------------------------------------------------
step "sam build"
scripts/sam.sh build >"$WORK/sam-build.log" 2>&1 || { tail -30 "$WORK/sam-build.log" >&2; die "sam build failed"; }

# --- What events/env.json points at (docs/local.md, "Shared setup") -------------------------------
step "DynamoDB Local, the tables, the stand-in OpenAI and Secrets Manager"
cargo build -q -p koe-testkit --bin dynamodb-local --bin create-local-tables \
  --bin standin-openai --bin secrets-manager-local --bin fixture
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug"
# env.json's ports, in the order of its DynamoDB, OpenAI and Secrets Manager URLs.
port_of() { jq -r ".Parameters.$1" events/env.json | sed -E 's#^.*:([0-9]+)(/.*)?$#\1#'; }
DDB_PORT=$(port_of AWS_ENDPOINT_URL_DYNAMODB)
OPENAI_PORT=$(port_of OPENAI_BASE_URL)
SM_PORT=$(port_of AWS_ENDPOINT_URL_SECRETS_MANAGER)
# Starts a process whose first stdout line is its URL (not in a subshell: dynamodb-local ends
# with its parent); URL is that line.
start_url() {
  local out="$WORK/$1.out"
  "${@:2}" >"$out" 2>"$WORK/$1.log" &
  PIDS+=($!)
  for _ in $(seq 120); do
    [ -s "$out" ] && { URL=$(head -1 "$out"); return; }
    kill -0 "${PIDS[-1]}" 2>/dev/null || break
    sleep 0.5
  done
  cat "$WORK/$1.log" >&2
  die "$1 printed no URL"
}
if [ -n "$RELAY" ]; then
  # Free loopback ports on the host; the relay gives each container env.json's.
  start_url dynamodb-local "$BIN/dynamodb-local" && ddb=$URL
  start_url standin-openai "$BIN/standin-openai" 127.0.0.1:0 && openai=$URL
  start_url secrets-manager-local "$BIN/secrets-manager-local" 127.0.0.1:0 && secrets=$URL
  hostport() { sed -E 's#^http://[^:]+:([0-9]+).*$#\1#' <<<"$1"; }
  python3 scripts/sam-local-relay.py "$DDB_PORT=$(hostport "$ddb")" \
    "$OPENAI_PORT=$(hostport "$openai")" "$SM_PORT=$(hostport "$secrets")" 2>"$WORK/relay.log" &
  PIDS+=($!)
  ADD_HOST=(--add-host host.docker.internal:127.0.0.1)
else
  # On env.json's ports, every interface (containers come from the Docker bridge).
  scripts/dynamodb-local.sh fetch >&2
  emulator="$CACHE/dynamodb-local/emulator"
  java -Djava.library.path="$emulator/DynamoDBLocal_lib" -jar "$emulator/DynamoDBLocal.jar" \
    -inMemory -port "$DDB_PORT" >"$WORK/dynamodb-local.log" 2>&1 &
  PIDS+=($!)
  ddb="http://127.0.0.1:$DDB_PORT"
  for _ in $(seq 60); do curl -s -o /dev/null "$ddb" && break; sleep 0.5; done
  start_url standin-openai "$BIN/standin-openai" "0.0.0.0:$OPENAI_PORT"
  start_url secrets-manager-local "$BIN/secrets-manager-local"
  ADD_HOST=(--add-host host.docker.internal:host-gateway)
fi
export AWS_REGION=ap-northeast-1 AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local
AWS_ENDPOINT_URL_DYNAMODB=$ddb KOE_TABLE_PREFIX=koe-local "$BIN/create-local-tables" >/dev/null

# --- docs/local.md's invokes, each answer against its table -----------------------------------------
# The table's rows: fixture, function, answer.
mapfile -t ROWS < <(sed -n '/<!-- generated by docs-tables: fixtures -->/,/<!-- end generated -->/p' \
  docs/local.md | grep '^| `events/')
# The commands, continuation lines joined.
mapfile -t COMMANDS < <(sed -n '/<!-- generated by docs-tables: sam-invoke -->/,/<!-- end generated -->/p' \
  docs/local.md | sed '/^```/d;/^<!--/d' | sed -e ':a' -e '/\\$/N; s/\\\n//; ta')
[ "${#ROWS[@]}" -gt 0 ] && [ "${#ROWS[@]}" -eq "${#COMMANDS[@]}" ] \
  || die "docs/local.md: ${#ROWS[@]} fixture rows, ${#COMMANDS[@]} sam local invoke commands"
export ROOT
ADD_HOST_S="${ADD_HOST[*]}" PULL_S="${PULL[*]}"
export ADD_HOST_S PULL_S
# Whether the answer in file $2 is what the table's answer $1 says: "<status>[, `<text the body
# holds>`]" (a streamed answer: its prelude's status, its events' text), "200, the answer"
# (`"type":"answer"`), or "run: `{"cause":...,...}`" (the run's summary; ", all 0 unless ...":
# nothing claimed, sent, failed, missed or lost). It prints the answer, shortened.
answers_as() {
  python3 - "$1" "$2" <<'PY'
import json, re, sys
answer, raw = sys.argv[1], open(sys.argv[2], "rb").read().decode("utf-8", "replace")
quoted = re.search(r"`([^`]*)`", answer)
needle = '"type":"answer"' if answer == "200, the answer" else (quoted.group(1) if quoted else "")
status = re.match(r"(\d{3})\b", answer)
try:
    if status:
        if "\0" * 8 in raw:  # Lambda's streamed form: the prelude, eight NULs, the body
            prelude, body = raw.split("\0" * 8, 1)
            head = json.loads(prelude)
        else:
            head = json.loads(raw.strip().splitlines()[-1])
            body = head.get("body") or ""
        ok = head.get("statusCode") == int(status.group(1)) and needle in body
        shown = f"{head.get('statusCode')} {body}"
    else:
        summary = json.loads(raw.strip().splitlines()[-1])
        want = json.loads(needle.replace(",...}", "}"))
        ok = all(summary.get(k) == v for k, v in want.items())
        if "all 0" in answer:
            ok = ok and all(summary.get(k) == 0 for k in ("claimed", "sent", "failed", "missed", "lost"))
        shown = json.dumps(summary, separators=(",", ":"), ensure_ascii=False)
except (ValueError, AttributeError, IndexError) as e:  # not the JSON an answer is
    ok, shown = False, f"{raw[-200:]!r} ({e})"
print(" ".join(shown.split())[:200])
sys.exit(0 if ok else 1)
PY
}
bad=0
for i in "${!ROWS[@]}"; do
  IFS='|' read -r _ fixture function answer _ <<<"${ROWS[$i]}"
  fixture=$(xargs <<<"${fixture//\`/}") function=$(xargs <<<"$function")
  answer="${answer# }" answer="${answer% }"
  command="${COMMANDS[$i]}"
  [[ -z "${KOE_SAM_LOCAL_ONLY:-}" || "$fixture" == *"$KOE_SAM_LOCAL_ONLY"* ]] || continue
  grep -q "sam local invoke $function " <<<"$command" \
    || die "row $((i + 1)) ($fixture, $function): the command is $command"
  started=$SECONDS
  # The command as docs/local.md has it, its `sam` with this machine's flags.
  if ! (bash -o pipefail -c "sam() { \"\$ROOT/scripts/sam.sh\" \"\$@\" \$ADD_HOST_S \$PULL_S; }; $command" \
    >"$WORK/answer-$i" 2>"$WORK/invoke-$i.log"); then
    tail -20 "$WORK/invoke-$i.log" >&2
    echo "FAIL $fixture ($function): the command failed: $command" >&2
    bad=1
    continue
  fi
  if shown=$(answers_as "$answer" "$WORK/answer-$i"); then
    echo "ok   $fixture ($function) in $((SECONDS - started)) s: $shown" >&2
  else
    tail -20 "$WORK/invoke-$i.log" >&2
    echo "FAIL $fixture ($function): docs/local.md says $answer; it answered $shown" >&2
    bad=1
  fi
done

# --- sam local start-api ----------------------------------------------------------------------------
step "sam local start-api"
API_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
scripts/sam.sh local start-api --host 127.0.0.1 --port "$API_PORT" --env-vars events/env.json \
  "${ADD_HOST[@]}" "${PULL[@]}" >"$WORK/start-api.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 120); do
  curl -s -o /dev/null "http://127.0.0.1:$API_PORT/" 2>/dev/null && break
  sleep 0.5
done
api_check() { # name, want status, needle, curl args...
  local started=$SECONDS status body
  body=$(curl -s -w '\n%{http_code}' "${@:4}") || true
  status=$(tail -1 <<<"$body") body=$(sed '$d' <<<"$body")
  if [ "$status" = "$2" ] && [[ "$body" == *"$3"* ]]; then
    echo "ok   start-api $1 in $((SECONDS - started)) s: $status ${body:0:160}" >&2
  else
    echo "FAIL start-api $1: want $2 with $3, got $status $body" >&2
    tail -30 "$WORK/start-api.log" >&2
    bad=1
  fi
}
api_check "GET /health" 200 '"status":"ok"' "http://127.0.0.1:$API_PORT/health"
# What the table says the chat fixture answers.
chat_holds=$(printf '%s\n' "${ROWS[@]}" | grep '^| `events/chat.json`' | sed -nE 's/^[^`]*`[^`]*`[^`]*`([^`]*)`.*$/\1/p')
api_check "POST /api/chat" 200 "$chat_holds" -X POST -H 'content-type: application/json' \
  --data "$(jq -r .body events/chat.json)" "http://127.0.0.1:$API_PORT/api/chat"

[ "$bad" -eq 0 ] || die "an answer differs from docs/local.md (above)"
step "every fixture answered as docs/local.md says; start-api answered"
