#!/usr/bin/env python3
"""The whole stack's monthly bill at 1,000, 100,000 and 1,000,000 users (docs/scale.md,
"What a month costs", between its `monthly-cost` markers).

Usage:
  monthly-cost.py ['<the JSON line bench-idle-cost printed>']   # print the table
  monthly-cost.py --check [line]   # exit 1 when docs/scale.md's block differs from it
  monthly-cost.py --write [line]   # rewrite the block
Without a line, bench/idle-cost.last.json (the last measured line; bench/idle-cost.sh writes it).

A user a day: one wake-up call, 20 chat and 10 agent requests (the mix of docs/scale.md's
"Capacity settings by users"), spread evenly over the day; a month is 730 hours. What the bench
measures (the dispatcher idle and per call, the store's units per create) comes from its line;
memory sizes, secrets, alarms and the access-log format from template.yaml; the dispatcher's
window and re-selection and the lease and shard sizes from the code; the token ceilings from
the capacity table. Every other input is a named constant below with its source.
"""

import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs/scale.md"
BEGIN, END = "<!-- monthly-cost: begin -->", "<!-- monthly-cost: end -->"

# ap-northeast-1 (the region the docs price in) on-demand list prices, USD: DynamoDB, Lambda,
# EventBridge as docs/scale.md "Prices" lists them, CloudWatch as docs/operations.md "What it
# costs" does; the HTTP API, secrets, log storage and data out from AWS's price pages as known to
# whoever wrote this (2026-11, not re-read): check them all before quoting a figure to anyone.
LAMBDA_GB_S = 0.0000133334  # arm64
LAMBDA_REQUEST = 0.20 / 1e6
WRU = 0.715 / 1e6
RRU = 0.1425 / 1e6
STORAGE_GB_MONTH = 0.285 + 0.228  # DynamoDB storage and point-in-time recovery
HTTP_API_REQUEST = (1.29 / 1e6, 300e6, 1.18 / 1e6)  # first 300 million a month, then
METRIC_MONTH = 0.30
ALARM_METRIC_MONTH = 0.10
DASHBOARD_MONTH = 3.00  # past an account's first 3
SECRET_MONTH = 0.40
LOG_INGEST_GB = 0.76
LOG_STORE_GB_MONTH = 0.033
DATA_OUT_GB = 0.114  # to the internet, first 10 TB; the first 100 GB a month free
DATA_OUT_FREE_GB = 100
EVENT = 1.00 / 1e6  # EventBridge custom event
SCHEDULER_INVOCATION, SCHEDULER_FREE = 1.00 / 1e6, 14e6

# A woken run stays until the gap's end: ~40 s on average (LONGEST_WAKE 76 s, half of it).
WAKE_RUN_S = 40

HOURS = 730
MINUTES = HOURS * 60
DAYS = HOURS / 24
USERS = (1_000, 100_000, 1_000_000)

# The app's mix (issue 50; docs/scale.md "Capacity settings by users"): per user a day.
CHAT_A_DAY, AGENT_A_DAY, CALLS_A_DAY = 20, 10, 1
# Assumed: a device registers once a day (the app refreshing its VoIP token at launch).
DEVICE_PUTS_A_DAY = 1
# Seconds a model call keeps its function waiting (issue 50: chat ~1.5 s, agent ~3 s).
CHAT_WAIT_S, AGENT_WAIT_S = 1.5, 3.0
# Billed time of a store-only request (PUT /devices, POST /calls), assumed: two or three
# DynamoDB round trips of a few ms each, and a cold start now and then.
STORE_REQUEST_S = 0.020
# Agent requests are rounds 1 and 2 alike: each adds 1 WRU to its daily-limit or plan counter
# (docs/dynamodb.md "Requests").
AGENT_COUNTER_WRU = 1
# A model call's spend-counter writes (docs/spend-guard.md): a guard leases a block of
# CALLS_PER_LEASE calls' tokens for LEASE_SECS (lease.rs) at every ceiling, so where model calls
# come at least that often a call costs a share of a lease, 0.12 WRU (bench/spend-guard.sh at
# 2,000 calls/s); rarer, each lease serves about one call and is returned: 2 WRU a call.
UNLEASED_WRU, LEASED_WRU = 2.0, 0.12
# A selected entry of the index: ~180 bytes (docs/dynamodb.md "Units"); eventual reads.
ENTRY_BYTES, READ_UNIT_BYTES = 180, 4096
# Assumed stored bytes: a device ~0.5 KB kept; a reservation ~0.8 KB kept 7 days past its day.
DEVICE_BYTES, CALL_BYTES, CALL_DAYS_KEPT = 500, 800, 8
# Custom metrics with data in an hour at traffic: 24 (bench/metric-hours.sh at 100,000 calls and
# 500,000 requests a day, docs/operations.md "What it costs"; 74 with every fault): of the
# catalogue's 34 names (shared/src/platform/metrics/catalogue.rs), those an hour's traffic
# writes, once per function that writes them (the `Function` dimension).
METRICS_AT_TRAFFIC = 24
# Bytes out to the internet a request: the answer to the app (~1 KB of JSON and headers) and,
# for a model call, the prompt sent to the provider (~3 KB: a conversation of a few turns).
ANSWER_OUT_BYTES, PROMPT_OUT_BYTES, PUSH_OUT_BYTES = 1_000, 3_000, 600
# Log lines a request writes, as CloudWatch counts them (each event + 26 bytes). Lambda's text
# platform lines; the app's one JSON request line and one EMF line (Latency; model calls add
# ModelTokens and SpendUsed to it), sized from lines of their shape below.
PLATFORM_LINES = [
    "START RequestId: 8f5e2a4c-6a0e-4c1b-9d3e-2f7a1b0c9d8e Version: $LATEST",
    "END RequestId: 8f5e2a4c-6a0e-4c1b-9d3e-2f7a1b0c9d8e",
    "REPORT RequestId: 8f5e2a4c-6a0e-4c1b-9d3e-2f7a1b0c9d8e\tDuration: 1503.21 ms\t"
    "Billed Duration: 1504 ms\tMemory Size: 128 MB\tMax Memory Used: 31 MB\t",
]
APP_LINE = ('{"timestamp":"2026-11-29T05:00:00.000000Z","level":"INFO","fields":{"message":'
            '"request done","route":"POST /api/chat","status":200,"ms":1503,"device":"a1b2c3d4"},'
            '"target":"koe::app","span":{"requestId":"8f5e2a4c-6a0e-4c1b-9d3e-2f7a1b0c9d8e"}}')
EMF_LINE = ('{"_aws":{"Timestamp":1795928400000,"CloudWatchMetrics":[{"Namespace":"Koe/Api",'
            '"Dimensions":[["Function"]],"Metrics":[{"Name":"Latency","Unit":"Milliseconds"},'
            '{"Name":"ModelTokens","Unit":"Count"},{"Name":"SpendUsed","Unit":"Percent"}]}]},'
            '"Function":"koe-chat","Latency":1503,"ModelTokens":57,"SpendUsed":12.5}')
LOG_EVENT_OVERHEAD = 26
LOG_STORED_SHARE = 0.15  # stored compressed (assumed ratio)
# The access log's `$context` values, typical lengths (a request id is 16, an epoch 13).
ACCESS_VALUES = {"requestId": 16, "routeKey": 14, "status": 3, "responseLatency": 4,
                 "integrationLatency": 4, "integrationStatus": 3, "integrationErrorMessage": 0,
                 "error.message": 0, "requestTimeEpoch": 13}


def template() -> str:
    return (ROOT / "template.yaml").read_text()


def resources(text: str) -> dict[str, str]:
    """Each resource's block of template.yaml, by logical id."""
    body = text.split("\nResources:\n", 1)[1].split("\nOutputs:\n", 1)[0]
    parts = re.split(r"^  ([A-Za-z0-9]+):\n", body, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def memory_gb(text: str, block: str) -> float:
    size = re.search(r"^      MemorySize: (\S+)", block, re.M)
    if size is None:
        size = re.search(r"^Globals:.*?^    MemorySize: (\d+)", text, re.M | re.S)
    return int(size.group(1)) / 1024


def dispatch_constant(name: str) -> float:
    src = (ROOT / "shared/src/platform/config/dispatch.rs").read_text()
    return float(re.search(rf"const {name}: Duration = Duration::from_secs\((\d+)\)", src)[1])


def constant(path: str, name: str) -> int:
    """An integer `pub const` of the code (`1_000` spelled as Rust allows)."""
    src = (ROOT / path).read_text()
    return int(re.search(rf"pub const {name}: \w+ = ([\d_]+);", src)[1].replace("_", ""))


# Model calls a second from which leases fill (one guard's block within its lease's time).
LEASES_FILL_PER_S = (constant("shared/src/model/spend_guard/lease.rs", "CALLS_PER_LEASE")
                     / constant("shared/src/model/spend_guard/lease.rs", "LEASE_SECS"))
CALLS_PER_SHARD = constant("shared/src/domain/due.rs", "CALLS_PER_SHARD")


def ceilings_millions() -> list[float]:
    """The token ceilings of the capacity table's columns for USERS."""
    row = next(l for l in DOC.read_text().splitlines() if "DailyTokenCeiling`, millions" in l)
    cells = [c.strip().replace(",", "") for c in row.strip("|").split("|")]
    return [float(c) for c in cells[2:5]]


def expected_stay_s(per_minute: float, window: float) -> float:
    """E[seconds until the latest of k calls uniform in the window], k ~ Poisson (its terms in
    logarithms: a busy minute's e^-k underflows)."""
    lam = per_minute * window / 60
    if lam == 0:
        return 0.0
    around = range(max(1, int(lam - 12 * math.sqrt(lam) - 20)), int(lam + 12 * math.sqrt(lam) + 20))
    return sum(math.exp(-lam + k * math.log(lam) - math.lgamma(k + 1)) * window * k / (k + 1)
               for k in around)


def dispatch_path(m: dict, per_day: float, window: float, every: float) -> dict:
    """This design's dispatch path a month: Lambda, DynamoDB (units), metrics aside."""
    calls = per_day * DAYS
    per_minute = per_day / 1440
    stay = expected_stay_s(per_minute, window)
    busy_minutes = MINUTES * (1 - math.exp(-per_minute * window / 60))
    # A run re-selects every `every` s while it stays, from now to its window's end (run.rs:
    # `buckets(now, run.end)`): two minutes' count and every shard (0.5 RRU each, eventual), and
    # about a minute's entries. The bench books 10-20 s ahead and ends early, so it sees little.
    shards = math.floor(per_minute / CALLS_PER_SHARD) + 1
    reselect = 2 * (0.5 + shards * 0.5) + per_minute * ENTRY_BYTES / READ_UNIT_BYTES * 0.5
    reselect_rru = MINUTES * (stay / every) * reselect  # `stay`: over every minute, idle ones 0
    # The window passes the minute by window - 60 s: a call in that share is selected by two
    # runs, each reading its device (1 RRU) and claiming (the loser's refused claim 1 WRU).
    twice = (window - 60) / 60
    wru = (MINUTES * m["idleWru"] + busy_minutes  # the watch
           + calls * (m["createWru"] + m["dispatchWru"] + twice))
    rru = (MINUTES * m["idleRru"] + reselect_rru
           + calls * (m["createRru"] + 1 + m["dispatchRru"] + twice))
    gb = m["env"]["memoryGb"]
    return {
        "lambda": MINUTES * (gb * (m["idleMsP50"] / 1000 + stay) * LAMBDA_GB_S + LAMBDA_REQUEST),
        "wru": wru, "rru": rru,
        "per_call": (twice, reselect_rru / calls if calls else 0.0),
        "stay": stay,
    }


def scheduler_path(per_day: float, gb: float) -> float:
    """EventBridge Scheduler instead: a one-time schedule per call, one 100 ms invocation each
    at the dispatcher's memory (assumed), 2 writes + 1 read to create, 1 read + 1 write to send."""
    calls = per_day * DAYS
    return (calls * (gb * 0.1 * LAMBDA_GB_S + LAMBDA_REQUEST + 3 * WRU + 3 * RRU)
            + max(0.0, calls - SCHEDULER_FREE) * SCHEDULER_INVOCATION)


def access_line(text: str) -> int:
    fmt = re.search(r"Format: >-\n\s+(\{.*\})", text)[1]
    return len(re.sub(r"\$context\.([A-Za-z.]+)", lambda g: "x" * ACCESS_VALUES[g[1]], fmt))


def bill(m: dict) -> tuple[list[tuple[str, list[float]]], list[float], dict]:
    text = template()
    res = resources(text)
    chat_gb = memory_gb(text, res["ChatFunction"])
    agent_gb = memory_gb(text, res["AgentFunction"])
    store_gb = memory_gb(text, res["CreateCallFunction"])
    dispatch_gb = memory_gb(text, res["DispatchFunction"])
    window = dispatch_constant("DEFAULT_DISPATCH_WINDOW")
    every = dispatch_constant("DEFAULT_DISPATCH_RESELECT_EVERY")
    secrets = sum("AWS::SecretsManager::Secret" in b for b in res.values())
    alarm_metrics = sum(max(1, b.count("MetricName:")) for b in res.values()
                        if "Type: AWS::CloudWatch::Alarm" in b)
    dashboards = sum("Type: AWS::CloudWatch::Dashboard" in b for b in res.values())
    platform = sum(len(l) + LOG_EVENT_OVERHEAD for l in PLATFORM_LINES)
    app = len(APP_LINE) + LOG_EVENT_OVERHEAD
    emf = len(EMF_LINE) + LOG_EVENT_OVERHEAD
    access = access_line(text) + LOG_EVENT_OVERHEAD
    lines = {k: [] for k in ("API Gateway", "Lambda waiting on the model", "Lambda, the rest",
                             "DynamoDB, spend counters", "DynamoDB, the rest", "CloudWatch Logs",
                             "data out", "custom metrics", "alarms, dashboard, secrets")}
    sched, dispatch_now, per_call = [], [], []
    for users, ceiling in zip(USERS, ceilings_millions()):
        model_calls = users * (CHAT_A_DAY + AGENT_A_DAY) * DAYS
        store_requests = users * (DEVICE_PUTS_A_DAY + CALLS_A_DAY) * DAYS
        requests = model_calls + store_requests
        d = dispatch_path(m, users * CALLS_A_DAY, window, every)
        tiers = HTTP_API_REQUEST
        lines["API Gateway"].append(min(requests, tiers[1]) * tiers[0]
                                    + max(0.0, requests - tiers[1]) * tiers[2])
        wait_gb_s = users * DAYS * (CHAT_A_DAY * CHAT_WAIT_S * chat_gb
                                    + AGENT_A_DAY * AGENT_WAIT_S * agent_gb)
        lines["Lambda waiting on the model"].append(wait_gb_s * LAMBDA_GB_S
                                                      + model_calls * LAMBDA_REQUEST)
        lines["Lambda, the rest"].append(store_requests * (store_gb * STORE_REQUEST_S * LAMBDA_GB_S
                                                           + LAMBDA_REQUEST) + d["lambda"])
        leases_fill = model_calls / DAYS / 86_400 >= LEASES_FILL_PER_S
        spend = LEASED_WRU if leases_fill else UNLEASED_WRU
        lines["DynamoDB, spend counters"].append(model_calls * spend * WRU)
        calls_a_month = users * CALLS_A_DAY * DAYS
        kept_calls = users * CALLS_A_DAY * CALL_DAYS_KEPT
        stored_gb = (users * DEVICE_BYTES + kept_calls * CALL_BYTES) / 1e9
        lines["DynamoDB, the rest"].append(
            (d["wru"] + users * AGENT_A_DAY * DAYS * AGENT_COUNTER_WRU
             + users * DEVICE_PUTS_A_DAY * DAYS) * WRU
            + (d["rru"] + users * DEVICE_PUTS_A_DAY * DAYS) * RRU
            + stored_gb * STORAGE_GB_MONTH)
        log_gb = (requests * (platform + app + emf + access)
                  + calls_a_month * (app + emf) + MINUTES * (platform + emf)) / 1e9
        log_price = LOG_INGEST_GB + LOG_STORED_SHARE * LOG_STORE_GB_MONTH
        lines["CloudWatch Logs"].append(log_gb * log_price)
        out_gb = (requests * ANSWER_OUT_BYTES + model_calls * PROMPT_OUT_BYTES
                  + calls_a_month * PUSH_OUT_BYTES) / 1e9
        lines["data out"].append(max(0.0, out_gb - DATA_OUT_FREE_GB) * DATA_OUT_GB)
        lines["custom metrics"].append(METRICS_AT_TRAFFIC * METRIC_MONTH)
        lines["alarms, dashboard, secrets"].append(alarm_metrics * ALARM_METRIC_MONTH
                                                   + dashboards * DASHBOARD_MONTH
                                                   + secrets * SECRET_MONTH)
        dispatch_now.append(d["lambda"] + d["wru"] * WRU + d["rru"] * RRU)
        sched.append(scheduler_path(users * CALLS_A_DAY, dispatch_gb))
        per_call.append(d["per_call"])
    facts = {"chat_mb": chat_gb * 1024, "agent_mb": agent_gb * 1024, "window": window,
             "every": every, "per_call": per_call, "secrets": secrets,
             "alarm_metrics": alarm_metrics, "dashboards": dashboards,
             "request_log_bytes": platform + app + emf + access, "platform_bytes": platform,
             "wake": m["env"]["memoryGb"] * WAKE_RUN_S * LAMBDA_GB_S + LAMBDA_REQUEST + EVENT
             + 0.5 * RRU,
             "dispatch": dispatch_now, "sched": sched}
    return list(lines.items()), [sum(v[i] for _, v in lines.items()) for i in range(3)], facts


# What would cut each line: shown for those among the three largest at some size.
CUTS = {
    "API Gateway": "chat via function URL (no fee)",
    "Lambda waiting on the model": "shorter replies",
    "Lambda, the rest": "Scheduler",
    "DynamoDB, spend counters": "longer leases",
    "DynamoDB, the rest": "the Scheduler design",
    "CloudWatch Logs": "system logs at WARN (-{platform}%)",
    "data out": "a trimmed history in the prompt",
    "custom metrics": "fewer metrics",
    "alarms, dashboard, secrets": "no dashboard, one secret",
}


def money(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:,.2f}"


def block(m: dict) -> str:
    lines, totals, f = bill(m)
    top = [{n for n, _ in sorted(lines, key=lambda l: -l[1][i])[:3]} for i in range(3)]
    platform = round(100 * f["platform_bytes"] / f["request_log_bytes"])
    out = ["| USD a month (**top 3**) | 1,000 users | 100,000 | 1,000,000 | cut by |",
           "| --- | ---: | ---: | ---: | --- |"]
    for name, v in lines:
        cells = [f"**{money(x)}**" if name in top[i] else money(x) for i, x in enumerate(v)]
        cut = CUTS[name].format(platform=platform) if any(name in t for t in top) else ""
        out.append(f"| {name} | {' | '.join(cells)} | {cut}".rstrip() + " |")
    out.append("| total | " + " | ".join(money(x) for x in totals) + " |")
    out.append("| dispatch; on EventBridge Scheduler | "
               + " | ".join(f"{money(a)}; {money(b)}" for a, b in zip(f["dispatch"], f["sched"]))
               + " |")
    twice, reselect = f["per_call"][-1]
    out += ["",
            f"The {f['window']:.0f} s window selects a call in "
            f"{1 / twice:.0f} twice (+{twice:.2f} WRU and RRU); re-selection every "
            f"{f['every']:.0f} s: {reselect:.2f} RRU a call at 1,000,000; "
            f"{f['request_log_bytes']:,} log bytes a request; a wake "
            f"${f['wake'] * 1000:.2f} per 1,000."]
    return "\n".join(out)


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    line = args[0] if args else (ROOT / "bench/idle-cost.last.json").read_text()
    table = block(json.loads(line))
    print(table)
    doc = DOC.read_text()
    if BEGIN not in doc or END not in doc:
        print(f"{DOC}: no {BEGIN} ... {END} block", file=sys.stderr)
        return 1
    head, rest = doc.split(BEGIN, 1)
    current, tail = rest.split(END, 1)
    if "--write" in sys.argv:
        DOC.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")
    elif "--check" in sys.argv and current.strip() != table:
        print(f"\n{DOC.relative_to(ROOT)}'s monthly-cost block differs from the computed table:"
              " run bench/monthly-cost.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
