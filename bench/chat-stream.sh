#!/usr/bin/env bash
# Streamed chat: how much sooner the first sentence reaches a voice client than the full JSON
# answer, and what a proxy adds per event. Not a test (CI does not run it): it prints a table.
#
#   bench/chat-stream.sh                        # 5 runs of each path
#   BENCH_RUNS=20 bench/chat-stream.sh
#   BENCH_SKIP_LITELLM=1 bench/chat-stream.sh   # without LiteLLM
#   BENCH_NO_BUILD=1 bench/chat-stream.sh       # the release binaries already built
#
# One stand-in OpenAI server (testkit's, `standin-openai` with STANDIN_REPLY) writes the same
# 3-sentence reply at the same pace to every request: first token after STANDIN_FIRST_TOKEN_MS
# (300), then STANDIN_TOKENS_PER_SECOND (30) tokens a second; streamed when asked, else whole
# once written. In front of it, one request at a time:
#   - the stand-in alone, streamed (OpenAI's own protocol: what any proxy starts from);
#   - koe-local, POST /api/chat with Accept: text/event-stream (first `sentence` event, `done`);
#   - koe-local, POST /api/chat as JSON (the whole answer);
#   - LiteLLM's proxy (pinned, venv in ~/.cache/koe/venv-litellm), /chat/completions streamed.
# "first sentence" is when the client has the first complete sentence: koe's first `sentence`
# event; for the OpenAI-protocol streams, the client cuts the text itself at the same marks
# (the chunk that completes it, plus the next one that shows what follows the mark).
# "added per event" is the median, over the stream's text events, of the event's arrival time
# minus the same event's arrival time straight from the stand-in (same pace, same reply), so it
# is what the proxy in between costs each event. Both are medians over the runs.
set -euo pipefail
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh"

RUNS="${BENCH_RUNS:-5}"
FIRST_TOKEN_MS="${STANDIN_FIRST_TOKEN_MS:-300}"
TOKENS_PER_SECOND="${STANDIN_TOKENS_PER_SECOND:-30}"
REPLY="Good morning! The weather in Tokyo is sunny today. Would you like me to set an alarm for your call?"
# 1.82.6: pinned, and before the releases that were published by an attacker (1.82.7, 1.82.8).
LITELLM_VERSION="1.82.6"
LITELLM_VENV="$CACHE/venv-litellm"

LITELLM=""
if [[ -n "${BENCH_SKIP_LITELLM:-}" ]]; then
  log "BENCH_SKIP_LITELLM: LiteLLM is left out"
elif "$LITELLM_VENV/bin/python" -c "import litellm, importlib.metadata as m; assert m.version('litellm') == '$LITELLM_VERSION'" 2>/dev/null; then
  LITELLM=1
else
  log "installing litellm[proxy]==$LITELLM_VERSION into $LITELLM_VENV"
  if python3 -m venv "$LITELLM_VENV" >&2 &&
    "$LITELLM_VENV/bin/pip" install -q --disable-pip-version-check "litellm[proxy]==$LITELLM_VERSION" >&2; then
    LITELLM=1
  else
    echo "LiteLLM could not be installed (pip install litellm[proxy]==$LITELLM_VERSION failed): its rows are left out" >&2
  fi
fi
build_release -p koe-local
build_release -p koe-testkit --bin standin-openai

MACHINE="$(machine_line)"
log "$MACHINE"

# The stand-in, paced.
STANDIN_PORT="$(free_port)"
start_bg standin env STANDIN_REPLY="$REPLY" STANDIN_FIRST_TOKEN_MS="$FIRST_TOKEN_MS" \
  STANDIN_TOKENS_PER_SECOND="$TOKENS_PER_SECOND" ${LOAD_PIN[@]+"${LOAD_PIN[@]}"} \
  "$BIN/standin-openai" "127.0.0.1:$STANDIN_PORT"
for ((i = 0; i < 100; i++)); do
  grep -q serving "$WORK/standin.log" 2>/dev/null && break
  sleep 0.1
done
STANDIN_URL="http://127.0.0.1:$STANDIN_PORT/v1"

KOE_PORT="$(free_port)"
start_bg koe-local env OPENAI_BASE_URL="$STANDIN_URL" OPENAI_API_KEY=sk-bench \
  CHAT_ADDR="127.0.0.1:$KOE_PORT" AGENT_ADDR="127.0.0.1:$(free_port)" LOCAL_DISPATCHER=false \
  ${SUT_PIN[@]+"${SUT_PIN[@]}"} "$BIN/koe-local"
wait_http "http://127.0.0.1:$KOE_PORT/health" 30
TARGETS=("standin=http://127.0.0.1:$STANDIN_PORT/v1/chat/completions"
  "koe-stream=http://127.0.0.1:$KOE_PORT/api/chat"
  "koe-json=http://127.0.0.1:$KOE_PORT/api/chat")

if [[ -n "$LITELLM" ]]; then
  start_litellm
  TARGETS+=("litellm=http://127.0.0.1:$LITELLM_PORT/chat/completions")
fi

echo "$MACHINE"
echo "stand-in: first token after ${FIRST_TOKEN_MS} ms, ${TOKENS_PER_SECOND} tokens/s; ${RUNS} runs each (after one warm-up); one request at a time"
python3 - "$RUNS" "$LITELLM_VERSION" "${TARGETS[@]}" <<'EOF'
import http.client, json, re, statistics, sys, time, urllib.parse

runs, litellm_version, targets = int(sys.argv[1]), sys.argv[2], dict(t.split("=", 1) for t in sys.argv[3:])
messages = [{"role": "user", "content": "Good morning, what is the weather?"}]

def open_request(url, body, accept):
    """POSTs `body`; the connection, its answer (a 200, asserted) and when it was sent."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    started = time.perf_counter()
    conn.request("POST", u.path, body=json.dumps(body),
                 headers={"content-type": "application/json", "accept": accept})
    response = conn.getresponse()
    assert response.status == 200, response.status
    return conn, response, started

def sse(response, started):
    """(name, data, seconds since the request) per event, as each arrives."""
    name, data = "message", []
    while True:
        line = response.fp.readline()
        if not line:
            return
        line = line.decode().rstrip("\r\n")
        if line == "":
            if data:
                yield name, "\n".join(data), time.perf_counter() - started
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))

# A sentence is complete once what follows its mark is known (koe's rule, domain/sentences.rs).
CLOSERS = re.escape("」』）)\"'”’】]")
END = re.compile(rf"[。！？\n][{CLOSERS}]*[^{CLOSERS}]|[.!?…]+[{CLOSERS}]*\s")

def openai_stream(url):
    body = {"model": "gpt-4o-mini", "messages": messages, "max_tokens": 200, "stream": True}
    conn, response, started = open_request(url, body, "text/event-stream")
    text, deltas, first = "", [], None
    for _, data, at in sse(response, started):
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        piece = (chunk.get("choices") or [{}])[0].get("delta", {}).get("content") or ""
        if piece:
            text += piece
            deltas.append(at)
            if first is None and END.search(text):
                first = at
    done = time.perf_counter() - started
    conn.close()
    return first, done, deltas

def koe_stream(url):
    body = {"messages": messages, "maxTokens": 200}
    conn, response, started = open_request(url, body, "text/event-stream")
    first, done, deltas = None, None, []
    for name, data, at in sse(response, started):
        if name == "delta":
            deltas.append(at)
        elif name == "sentence" and first is None:
            first = at
        elif name in ("done", "error"):
            assert name == "done", data
            done = at
            break
    conn.close()
    return first, done, deltas

def koe_json(url):
    body = {"messages": messages, "maxTokens": 200}
    conn, response, started = open_request(url, body, "application/json")
    json.loads(response.read())
    done = time.perf_counter() - started
    conn.close()
    return None, done, []

measure = {"standin": openai_stream, "koe-stream": koe_stream, "koe-json": koe_json, "litellm": openai_stream}
labels = {"standin": "stand-in alone (OpenAI stream)", "koe-stream": "koe-local, text/event-stream",
          "koe-json": "koe-local, JSON answer", "litellm": f"LiteLLM {litellm_version} proxy, stream"}
results = {}
for key, url in targets.items():
    measure[key](url)  # warm-up (connections, the proxy's first-request work)
    results[key] = [measure[key](url) for _ in range(runs)]

def median_ms(values):
    values = [v for v in values if v is not None]
    return f"{statistics.median(values) * 1000:8.1f}" if values else "       -"

base = results["standin"]
print(f"{'path':34} {'first sentence ms':>18} {'full answer ms':>15} {'added per event ms':>19}")
for key, rows in results.items():
    added = "                  -"
    if rows[0][2] and key != "standin":
        per_run = []
        for (_, _, deltas), (_, _, direct) in zip(rows, base):
            n = min(len(deltas), len(direct))
            per_run.append(statistics.median(d - s for d, s in zip(deltas[:n], direct[:n])))
        added = f"{statistics.median(per_run) * 1000:19.2f}"
    first = [r[0] for r in rows] if key != "koe-json" else [r[1] for r in rows]
    print(f"{labels[key]:34} {median_ms(first):>18} {median_ms([r[1] for r in rows]):>15} {added}")
print("(JSON answer: its first sentence comes with the whole answer.)")
EOF
