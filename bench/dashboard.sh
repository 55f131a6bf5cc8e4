#!/usr/bin/env bash
# The picture of the CloudWatch dashboard in docs/operations.md (docs/img/dashboard.png), drawn
# from a LOCAL run's metrics: starts koe-local (debug build, in-memory store, logging push sender,
# the lean stand-in OpenAI server for /api/chat and /agent), sends it about 4 minutes of traffic,
# waits for the dispatch runs covering the calls to end, keeps the EMF lines koe-local wrote to
# stdout and draws them with bench/render-dashboard.py. Not a test, and not run by CI.
#
#   bench/dashboard.sh                              # about 5 minutes once the build is warm
#   DASHBOARD_PNG=/tmp/d.png bench/dashboard.sh     # draw somewhere else
#
# Takes about 5 minutes (4.7 and 5.5 measured): the debug build (seconds when warm; ~1.5 min more
# after a change to the workspace's crates), 4 minutes of traffic, then up to ~1.5 minutes for
# the last dispatch runs to end (a run's EMF line is written when its ~70 s window ends) and one
# more run.
#
# The traffic: 260 devices registered; 200 calls spread over 30 s to 3 min ahead (each created
# 20 s before its second) and 50 due in one crowded second; 10 reservations made and cancelled;
# GET /calls polls; /api/chat twice a second and agent round 1 every 2 s (stand-in answering
# after 400 ms); /health, /api/info; a few 4xx (bad bodies, no key, unknown device) and a 5xx
# every 30 s (GET /api/error). The chat API's daily token ceiling is lowered to 32,000 tokens so
# the spend-guard panel crosses its 80 % line within the 4 minutes (deployed: 5 million); the
# agent's stays at 5 million, because koe-local dimensions every model call's metrics by
# Function=koe-local (chat and agent together), so the panel's maximum is the chat API's.
# Locally the store is in memory and pushes are logged, never refused: store retries, throttles,
# failures and APNs errors stay at 0.
set -euo pipefail
CACHE="${KOE_CACHE_DIR:-$HOME/.cache/koe}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}"
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh" # cd to the repo; log, die, free_port, wait_http, cleanup

PNG="${DASHBOARD_PNG:-docs/img/dashboard.png}"
EMF="$CACHE/dashboard-emf.jsonl"
STARTED_AT=$SECONDS

ensure_matplotlib

# Debug builds, niced (the machine is shared); seconds when the target dir is warm.
claim_build_cache
log "cargo build -p koe-local, bench-standin-openai (debug, into $CARGO_TARGET_DIR)"
nice -n 10 cargo build -q -p koe-local >&2
nice -n 10 cargo build -q -p koe-bench --bin bench-standin-openai >&2

STANDIN_PORT="$(free_port)"
start_bg standin "$CARGO_TARGET_DIR/debug/bench-standin-openai" \
  --addr "127.0.0.1:$STANDIN_PORT" --delay-ms 400
for ((i = 0; i < 100; i++)); do
  grep -q serving "$WORK/standin.log" 2>/dev/null && break
  sleep 0.1
done
grep -q serving "$WORK/standin.log" || die "stand-in did not start: $(cat "$WORK/standin.log")"

CHAT_PORT="$(free_port)"
AGENT_PORT="$(free_port)"
log "koe-local on 127.0.0.1:$CHAT_PORT (chat) and 127.0.0.1:$AGENT_PORT (agent)"
# cargo run execs koe-local, so $KOE_PID is koe-local's own pid (SIGINT stops it gracefully).
env AGENT_API_KEYS=local-dev-key CHAT_ADDR="127.0.0.1:$CHAT_PORT" AGENT_ADDR="127.0.0.1:$AGENT_PORT" \
  OPENAI_BASE_URL="http://127.0.0.1:$STANDIN_PORT/v1" OPENAI_API_KEY=sk-local-dashboard \
  CHAT_DAILY_TOKEN_CEILING=32000 AGENT_DAILY_LIMIT=1000 \
  cargo run -q -p koe-local >"$WORK/koe-local.out" 2>"$WORK/koe-local.err" &
KOE_PID=$!
STARTED_PIDS+=("$KOE_PID")
wait_http "http://127.0.0.1:$CHAT_PORT/health" 60

log "traffic for about 4 minutes, then waiting for the dispatch runs covering the calls"
python3 - "http://127.0.0.1:$CHAT_PORT" "http://127.0.0.1:$AGENT_PORT" "$WORK/koe-local.out" <<'PY' >&2 \
  || die "traffic or wait failed; koe-local's stderr: $(tail -n 5 "$WORK/koe-local.err")"
import collections, json, random, secrets, sys, threading, time, urllib.error, urllib.request, uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

CHAT, AGENT, OUT = sys.argv[1:4]
KEY = {"X-Api-Key": "local-dev-key"}
JST = timezone(timedelta(hours=9))
DURATION = 240                      # seconds of traffic
random.seed(7)
results = collections.Counter()     # (what, status) -> requests
lock = threading.Lock()

def request(what, method, url, body=None, headers=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method, headers={
        "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read()
    except OSError as e:
        status, text = f"error {type(e).__name__}", b""
    with lock:
        results[(what, status)] += 1
    return status, text

def at(ts):  # RFC 3339 with the JST offset, whole seconds
    return datetime.fromtimestamp(ts, JST).isoformat(timespec="seconds")

t0 = time.time()
first = int(t0) + 30                # first call due 30 s from now, on a whole second
spread = [first + round(i * 160 / 200) for i in range(200)]     # 30 s .. 190 s ahead
crowded_second = int(t0) + 100      # 50 calls due in this one second
devices = [str(uuid.uuid4()).upper() for _ in range(260)]
call_devices, cancel_devices = devices[:250], devices[250:]
created = []                        # devices whose reservation was made (201)

def create_call(device, due):
    status, _ = request("create-call", "POST", f"{AGENT}/calls",
                        {"deviceId": device, "scheduledAt": at(due), "callerName": "こえ"}, KEY)
    if status == 201:
        with lock:
            created.append(device)

def reserve_and_cancel(device):
    create_call(device, time.time() + 3600)
    time.sleep(5)
    request("cancel-call", "DELETE", f"{AGENT}/calls?deviceId={device}", None, KEY)

def bad_request(i):
    kind = i % 7
    if kind == 0:   # scheduledAt only 5 s ahead: 400
        request("4xx", "POST", f"{AGENT}/calls", {"deviceId": devices[0], "scheduledAt": at(time.time() + 5)}, KEY)
    elif kind == 1:  # a token that is not hex: 400
        request("4xx", "PUT", f"{AGENT}/devices", {"deviceId": devices[1], "voipToken": "not-a-token"}, KEY)
    elif kind == 2:  # no API key: 401
        request("4xx", "POST", f"{AGENT}/calls", {"deviceId": devices[2], "scheduledAt": at(time.time() + 60)})
    elif kind == 3:  # a device with no reservation: 404
        request("4xx", "GET", f"{AGENT}/calls?deviceId={uuid.uuid4()}", None, KEY)
    elif kind == 4:  # an unregistered device: 409
        request("4xx", "POST", f"{AGENT}/calls", {"deviceId": str(uuid.uuid4()), "scheduledAt": at(time.time() + 60)}, KEY)
    elif kind == 5:  # a model that is not offered: 400
        request("4xx", "POST", f"{CHAT}/api/chat", {"messages": [{"role": "user", "content": "hi"}], "model": "gpt-0"})
    else:            # an empty message: 400
        request("4xx", "POST", f"{AGENT}/agent", {"message": "", "capabilities": ["calendar"], "deviceId": devices[3]}, KEY)

CHAT_BODY = {"messages": [{"role": "user", "content": "今日はどんな一日だった？少し話そう。"}], "maxTokens": 100}
def chat():
    request("chat", "POST", f"{CHAT}/api/chat", CHAT_BODY)

def agent(i):
    request("agent", "POST", f"{AGENT}/agent", {"message": "明日の予定を教えて", "capabilities": ["calendar"],
            "deviceId": devices[i % 40], "timezone": "Asia/Tokyo"}, KEY)

def get_call():
    with lock:
        device = random.choice(created) if created else devices[0]
    request("get-call", "GET", f"{AGENT}/calls?deviceId={device}", None, KEY)

events = []  # (seconds after t0, function, args)
for i, d in enumerate(devices):
    events.append((i * 0.03, request, ("put-device", "PUT", f"{AGENT}/devices",
                   {"deviceId": d, "voipToken": secrets.token_hex(32), "environment": "sandbox"}, KEY)))
for d, due in zip(call_devices[:200], spread):
    events.append((due - 20 - t0, create_call, (d, due)))
for i, d in enumerate(call_devices[200:]):          # made 30 to 40 s before the crowded second
    events.append((60 + i * 0.2, create_call, (d, crowded_second)))
for i, d in enumerate(cancel_devices):
    events.append((40 + i * 12, reserve_and_cancel, (d,)))
for i in range(int(DURATION / 8)):
    events.append((12 + i * 8, bad_request, (i,)))
for i in range(DURATION // 30):
    events.append((15 + i * 30, request, ("5xx", "GET", f"{CHAT}/api/error")))
for i in range(2 * (DURATION - 2)):
    events.append((2 + i / 2, chat, ()))
for i in range((DURATION - 3) // 2):
    events.append((3 + i * 2, agent, (i,)))
for i in range(10, DURATION):
    events.append((i + 0.5, get_call, ()))
for i in range(0, DURATION, 2):
    events.append((i + 0.7, request, ("health", "GET", f"{CHAT}/health")))
for i in range(0, DURATION, 5):
    events.append((i + 0.9, request, ("info", "GET", f"{CHAT}/api/info")))
events.sort(key=lambda e: e[0])

with ThreadPoolExecutor(max_workers=32) as pool:
    futures = []
    for offset, fn, args in events:
        delay = t0 + offset - time.time()
        if delay > 0:
            time.sleep(delay)
        futures.append(pool.submit(fn, *args))
    for f in futures:
        f.result()
print(f"traffic: {len(events)} scheduled actions in {time.time() - t0:.0f} s", flush=True)
for (what, status), n in sorted(results.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
    print(f"  {what:12} {status}: {n}")
expected = len([d for d in created if d in set(call_devices)])
print(f"calls reserved: {expected} (due {at(first)} .. {at(spread[-1])}, 50 due at {at(crowded_second)})", flush=True)

# Until the runs covering every reserved call have ended (their Sent + Failed + Missed add up to
# the calls reserved), then one more run.
def dispatch_runs():
    runs = []
    with open(OUT, encoding="utf-8") as f:
        for line in f:
            if '"_aws"' not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            spaces = [m["Namespace"] for m in record["_aws"]["CloudWatchMetrics"]]
            if "Koe/Dispatch" in spaces and "RunDuration" in record:
                runs.append(record)
    return runs

deadline = time.time() + 300
handled_at = None
while True:
    runs = dispatch_runs()
    handled = sum(r.get("Sent", 0) + r.get("Failed", 0) + r.get("Missed", 0) for r in runs)
    if handled_at is None and handled >= expected:
        handled_at = len(runs)
        print(f"all {expected} calls handled after {handled_at} dispatch runs; waiting for one more run", flush=True)
    if handled_at is not None and len(runs) > handled_at:
        print(f"dispatch runs ended: {len(runs)}; pushes sent {sum(r.get('Sent', 0) for r in runs)}", flush=True)
        break
    if time.time() > deadline:
        sys.exit(f"timed out: {len(runs)} dispatch runs ended, {handled} of {expected} calls handled")
    time.sleep(5)
PY

log "stopping koe-local (a second SIGINT stops the run under way at once)"
kill -INT "$KOE_PID"
sleep 1
kill -INT "$KOE_PID" 2>/dev/null || true
wait "$KOE_PID" 2>/dev/null || true

# The EMF lines: stdout's JSON objects with an `_aws` key (the others are log lines).
python3 - "$WORK/koe-local.out" "$EMF" <<'PY'
import json, sys
with open(sys.argv[1], encoding="utf-8") as src, open(sys.argv[2], "w", encoding="utf-8") as dst:
    for line in src:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "_aws" in record:
            dst.write(line)
PY
[[ -s "$EMF" ]] || die "koe-local wrote no EMF lines to stdout"
log "$(wc -l <"$EMF") EMF lines (of $(wc -l <"$WORK/koe-local.out") on stdout) in $EMF"
mkdir -p "$(dirname "$PNG")"
"$VENV/bin/python" bench/render-dashboard.py "$EMF" "$PNG"
log "done in $((SECONDS - STARTED_AT)) s: $PNG"
