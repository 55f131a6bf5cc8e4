#!/usr/bin/env python3
"""Cold start and peak memory of each Lambda binary, against a Lambda Runtime API stand-in.

Usage: bench.py [--runs N] [--zips DIR] BIN_DIR NAME... (bench/run.sh builds and calls it)

Every run starts the binary afresh with the environment the Lambda service gives it
(AWS_LAMBDA_RUNTIME_API pointing at this script's server on loopback, AWS_LAMBDA_FUNCTION_*),
serves it one fixture event from events/ on GET /2018-06-01/runtime/invocation/next, and stops
the process as soon as POST .../invocation/<id>/response arrives. Measured per run:
  init   start of the process -> its first GET .../next (what Lambda reports as Init Duration)
  cold   start of the process -> the response (init + the first invocation)
  rss    the process's peak resident set (ru_maxrss from wait4)
The same server stands in for everything a function talks to, on loopback: OpenAI
(POST /v1/chat/completions) and the AWS JSON APIs (DynamoDB, EventBridge: POST / with
X-Amz-Target), so each function does its real first-request work (SDK client set-up, signing,
a request) without the network. Functions run round-robin, one run of each per round, after one
discarded warm-up run each (page cache). Medians are printed, with the ratio to the first NAME
given with --baseline (the minimal lambda_http function).
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "/2018-06-01/runtime"

# Which fixture each binary is served (the dispatcher's HTTP event: its schedule event starts a
# run that lasts its 70 s window by design, which is not start-up time).
FIXTURE = {"hello": "health"}

PLANNER_ANSWER = json.dumps(
    {"decision": {"type": "answer", "reply": "はい、どうぞ。", "emotion": "happy"}},
    ensure_ascii=False,
)


class Invocation:
    """One run's state, shared with the server threads."""

    def __init__(self, event: bytes):
        self.event = event
        self.request_id = str(uuid.uuid4())
        self.served = False
        self.first_next = None
        self.answered = None
        self.response = None
        self.error = None
        self.done = threading.Event()


CURRENT: Invocation | None = None


def ddb_answer(target: str, body: dict) -> dict:
    """Plausible DynamoDB answers: a registered device, no reservation, a first use today."""
    table = body.get("TableName", "")
    if target.endswith(".GetItem") and "devices" in table:
        return {
            "Item": {
                "deviceId": {"S": "6F9619FF-8B86-D011-B42D-00C04FC964FF"},
                "voipToken": {"S": "ab" * 32},
                "environment": {"S": "production"},
                "updatedAt": {"S": "2026-01-01T00:00:00.000Z"},
            }
        }
    if target.endswith(".UpdateItem") and "usage" in table:
        return {"Attributes": {"useCount": {"N": "1"}}}
    return {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without this, Nagle's algorithm and the client's
    # delayed ACK hold the body of a second answer on one connection for 40 ms.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def reply(self, status: int, body: bytes, headers: dict | None = None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            # A streamed function response (chat-stream): read to its last chunk.
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self):
        inv = CURRENT
        if self.path == PREFIX + "/invocation/next" and inv is not None:
            if inv.served:
                # The function asks for its next event: it is stopped before one comes.
                inv.done.wait(30)
                try:
                    self.reply(500, b"{}")
                except OSError:
                    pass
                return
            inv.served = True
            inv.first_next = time.perf_counter()
            deadline = int(time.time() * 1000) + 30_000
            self.reply(
                200,
                inv.event,
                {
                    "Content-Type": "application/json",
                    "Lambda-Runtime-Aws-Request-Id": inv.request_id,
                    "Lambda-Runtime-Deadline-Ms": str(deadline),
                    "Lambda-Runtime-Invoked-Function-Arn": "arn:aws:lambda:ap-northeast-1:123456789012:function:bench",
                    "Lambda-Runtime-Trace-Id": "Root=1-00000000-000000000000000000000000",
                },
            )
            return
        self.reply(404, b"{}")

    def do_POST(self):
        inv = CURRENT
        body = self.body()
        if inv is not None and self.path.startswith(PREFIX):
            if self.path.endswith("/response"):
                inv.answered = time.perf_counter()
                inv.response = body
            else:  # .../error, /init/error
                inv.error = body.decode(errors="replace")[:300]
            self.reply(202, b"{}", {"Content-Type": "application/json"})
            inv.done.set()
            return
        if self.path.endswith("/chat/completions") and json.loads(body or b"{}").get("stream"):
            chunks = [
                {"choices": [{"index": 0, "delta": {"role": "assistant", "content": PLANNER_ANSWER}}]},
                {"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 17, "total_tokens": 57}},
            ]
            events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            self.reply(200, events.encode(), {"Content-Type": "text/event-stream"})
            return
        if self.path.endswith("/chat/completions"):
            completion = {
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": PLANNER_ANSWER},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 40, "completion_tokens": 17, "total_tokens": 57},
            }
            self.reply(200, json.dumps(completion).encode(), {"Content-Type": "application/json"})
            return
        target = self.headers.get("X-Amz-Target", "")
        if target.startswith("DynamoDB_"):
            answer = ddb_answer(target, json.loads(body or b"{}"))
            self.reply(
                200, json.dumps(answer).encode(), {"Content-Type": "application/x-amz-json-1.0"}
            )
            return
        if target == "secretsmanager.GetSecretValue" and SECRETS["by_arn"] is not None:
            arn = json.loads(body or b"{}").get("SecretId", "")
            answer = {"ARN": arn, "Name": arn, "SecretString": SECRETS["by_arn"].get(arn, "not-set")}
            self.reply(
                200, json.dumps(answer).encode(), {"Content-Type": "application/x-amz-json-1.1"}
            )
            return
        if target == "AWSEvents.PutEvents":
            answer = {"FailedEntryCount": 0, "Entries": [{"EventId": str(uuid.uuid4())}]}
            self.reply(
                200, json.dumps(answer).encode(), {"Content-Type": "application/x-amz-json-1.1"}
            )
            return
        self.reply(404, b"{}")


# --secrets: the functions get their secrets as a deployed stack gives them, by ARN
# (<VAR>_SECRET_ARN), and read them at init from the stand-in Secrets Manager below.
SECRET_VARS = ["OPENAI_API_KEY", "AGENT_API_KEYS", "APNS_KEY_P8", "AGENT_STEP_KEY", "DEVICE_HASH_SALT"]
SECRETS: dict = {"by_arn": None}


def by_arn(env: dict) -> dict:
    """The environment with each secret moved into the stand-in, named by ARN."""
    for var in SECRET_VARS:
        if var in env:
            arn = f"arn:aws:secretsmanager:ap-northeast-1:123456789012:secret:bench/{var.lower()}"
            SECRETS["by_arn"][arn] = env.pop(var)
            env[f"{var}_SECRET_ARN"] = arn
    return env


AGENT_API = {"agent", "put-device", "create-call", "get-call", "cancel-call", "confirm-call"}
OPENAI = {"chat", "chat-stream", "agent"}
STORE = AGENT_API | {"dispatch", "chat", "chat-stream"}
EXTRA_ENV: dict = {}


def environment(port: int, name: str) -> dict:
    """What template.yaml gives the function (with loopback stand-ins for the outside)."""
    base = f"127.0.0.1:{port}"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "AWS_LAMBDA_RUNTIME_API": base,
        "AWS_LAMBDA_FUNCTION_NAME": f"koe-bench-{name}",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "128",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/koe-bench-{name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": "2026/01/01/[$LATEST]0123456789abcdef",
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_REGION": "ap-northeast-1",
        "AWS_DEFAULT_REGION": "ap-northeast-1",
        "AWS_ACCESS_KEY_ID": "ASIABENCHBENCHBENCH0",
        "AWS_SECRET_ACCESS_KEY": "bench/bench/bench/bench/bench/bench/bench0",
        "AWS_SESSION_TOKEN": "bench",
        "AWS_ENDPOINT_URL": f"http://{base}",
    }
    if name == "hello":
        return env | EXTRA_ENV
    env |= {
        "RUST_LOG": "info",
        "EVENT_BUS_NAME": "koe-bench-notifications",
        "DISPATCH_GRACE_SECS": "120",
        "DISPATCH_CLAIM_TIMEOUT_SECS": "30",
    }
    if name in OPENAI:
        env |= {
            "OPENAI_API_KEY": "sk-bench",
            "OPENAI_BASE_URL": f"http://{base}/v1",
            "PROVIDER_TIMEOUT_MS": "25000",
        }
    if name in STORE:
        env |= {
            "STORE": "dynamodb",
            "DEVICE_HASH_SALT": "bench",
            "DEVICES_TABLE": "koe-bench-devices",
            "CALLS_TABLE": "koe-bench-scheduled-calls",
            "AGENT_USAGE_TABLE": "koe-bench-agent-usage",
        }
    if name in AGENT_API:
        env["AGENT_API_KEYS"] = "example-agent-key"
    if name == "agent":
        env["AGENT_STEP_KEY"] = "bench-step-key-0123456789abcdefghij"
    if name == "dispatch":
        env |= {
            "APNS_KEY_P8": (ROOT / "testkit/keys/apns-test.p8").read_text(),
            "APNS_KEY_ID": "ABCDE12345",
            "APNS_TEAM_ID": "TEAM123456",
            "APNS_BUNDLE_ID": "com.example.koe",
            "DISPATCH_OIDC_JWKS_URL": f"http://{base}/jwks",
            "DISPATCH_OIDC_ISSUER": "https://accounts.example.com",
            "DISPATCH_OIDC_AUDIENCE": "koe-dispatch",
            "DISPATCH_OIDC_SERVICE_ACCOUNT": "scheduler@example.com",
        }
    if SECRETS["by_arn"] is not None:
        env = by_arn(env)
    return env | EXTRA_ENV


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a stopped function's connections break; that is expected


def peak_rss_kb(pid: int) -> int:
    """VmHWM: the process's peak resident set since exec (ru_maxrss would include the forked
    Python image)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def run_once(binary: Path, name: str, event: bytes) -> tuple[float, float, int, str | None, bytes]:
    """One cold start, on a server of its own (a stopped process's late requests cannot reach
    the next run)."""
    global CURRENT
    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = environment(server.server_address[1], name)
    inv = Invocation(event)
    CURRENT = inv
    started = time.perf_counter()
    proc = subprocess.Popen(
        [str(binary)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    finished = inv.done.wait(30)
    rss_kb = peak_rss_kb(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    inv.done.set()
    CURRENT = None
    server.shutdown()
    server.server_close()
    if not finished:
        return 0, 0, rss_kb, "no answer within 30 s", b""
    if inv.error is not None or inv.answered is None:
        return 0, 0, rss_kb, inv.error or "no response", b""
    init_ms = (inv.first_next - started) * 1000
    cold_ms = (inv.answered - started) * 1000
    return init_ms, cold_ms, rss_kb, None, inv.response or b""


def status_of(response: bytes) -> str:
    try:
        return str(json.loads(response).get("statusCode", "?"))
    except ValueError:
        return "?"


def fresh(event: bytes) -> bytes:
    """The fixture with its reservation time moved to an hour from now (the fixtures' fixed
    date would be refused as too far ahead, before the store is reached)."""
    doc = json.loads(event)
    body = doc.get("body")
    if isinstance(body, str) and '"scheduledAt"' in body:
        request = json.loads(body)
        soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
        request["scheduledAt"] = soon
        doc["body"] = json.dumps(request, ensure_ascii=False)
        doc.get("headers", {}).pop("content-length", None)
    return json.dumps(doc, ensure_ascii=False).encode()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--baseline", default="hello")
    ap.add_argument("--zips", help="directory with <name>/bootstrap.zip (cargo lambda output)")
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for every function")
    ap.add_argument("--secrets", action="store_true", help="secrets by ARN, read at init (as deployed)")
    ap.add_argument("bin_dir")
    ap.add_argument("names", nargs="+")
    args = ap.parse_args()
    EXTRA_ENV.update(kv.split("=", 1) for kv in args.env)
    if args.secrets:
        SECRETS["by_arn"] = {}

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()

    results = {n: {"init": [], "cold": [], "rss": [], "status": set(), "errors": []} for n in args.names}
    setup = {}
    for name in args.names:
        binary = Path(args.bin_dir) / name
        if not binary.exists():
            print(f"missing binary {binary}", file=sys.stderr)
            return 2
        fixture = ROOT / "events" / f"{FIXTURE.get(name, name)}.json"
        setup[name] = (binary, name, fresh(fixture.read_bytes()))
        run_once(*setup[name])  # warm-up, discarded

    for _ in range(args.runs):
        for name in args.names:
            init_ms, cold_ms, rss_kb, error, response = run_once(*setup[name])
            r = results[name]
            if error:
                r["errors"].append(error)
                continue
            r["init"].append(init_ms)
            r["cold"].append(cold_ms)
            r["rss"].append(rss_kb)
            r["status"].add(status_of(response))

    def zip_mb(name: str) -> str:
        if not args.zips:
            return "-"
        z = Path(args.zips) / name / "bootstrap.zip"
        return f"{z.stat().st_size / 1e6:.2f}" if z.exists() else "-"

    def size_mb(name: str) -> str:
        return f"{(Path(args.bin_dir) / name).stat().st_size / 1e6:.2f}"

    base = results.get(args.baseline)
    base_cold = statistics.median(base["cold"]) if base and base["cold"] else None
    print(
        f"\n{'function':<12} {'status':>6} {'init ms':>8} {'cold ms':>8} {'x hello':>8} "
        f"{'p90 ms':>7} {'peak RSS MB':>11} {'host bin MB':>11} {'arm64 zip MB':>12}"
    )
    failed = False
    for name in args.names:
        r = results[name]
        if not r["cold"]:
            print(f"{name:<12} FAILED: {r['errors'][:1]}")
            failed = True
            continue
        cold = statistics.median(r["cold"])
        p90 = statistics.quantiles(r["cold"], n=10)[-1] if len(r["cold"]) > 1 else cold
        ratio = f"{cold / base_cold:.2f}" if base_cold else "-"
        print(
            f"{name:<12} {'/'.join(sorted(r['status'])):>6} {statistics.median(r['init']):>8.2f} "
            f"{cold:>8.2f} {ratio:>8} {p90:>7.2f} {max(r['rss']) / 1024:>11.1f} "
            f"{size_mb(name):>11} {zip_mb(name):>12}"
        )
        if r["errors"]:
            print(f"{'':<12} {len(r['errors'])} failed runs, e.g. {r['errors'][0]}")
            failed = True
    print(
        f"\n{args.runs} runs each; medians; 'peak RSS' is the largest of the runs. "
        f"Goals: cold <= 1.5 x {args.baseline}, peak RSS < 16 MB, arm64 zip < 3 MB."
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
