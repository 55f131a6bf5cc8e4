#!/usr/bin/env python3
"""The monthly cost of the dispatch path at 0, 1,000, 100,000 and 1,000,000 calls a day.

Usage: monthly-cost.py '<the JSON line bench-idle-cost printed>' (bench/idle-cost.sh passes it)

Three designs side by side, each per month of 730 hours (43,800 minutes), calls spread evenly
over the day (a Poisson number per minute; a crowd at 07:00 only makes the new design cheaper):
  fixed window  the design before runs ended early: one 256 MB run of 70 s every minute,
                re-selecting every 5 s, all 18 dispatch metrics published every minute;
  ends early    this design: a run stays until the latest call of its minute (measured idle run
                otherwise), measured units per call, metrics only when non-zero;
  Scheduler     an EventBridge Scheduler one-time schedule per call (minute precision): one
                invocation per call (100 ms at 256 MB assumed), 2 writes + 1 read to create,
                1 read + 1 write to send, nothing at rest.
Calls made less than ~75 s ahead wake a run in this design; they are priced apart (per 1,000)
because their share depends on the app. Fixed costs (secrets, alarms, dashboard) are the same
for the first two designs and listed apart.
"""

import json
import math
import sys

# ap-northeast-1 on-demand prices: DynamoDB as docs/scale.md lists them (with their date); the
# others from AWS's public price pages as last read by the team (not re-read for this table:
# check them before quoting a figure to anyone).
LAMBDA_GB_S = 0.0000133334  # arm64
LAMBDA_REQUEST = 0.20 / 1e6
WRU = 0.715 / 1e6
RRU = 0.1425 / 1e6
METRIC_MONTH = 0.30
EVENT = 1.00 / 1e6  # EventBridge custom event (PutEvents entry)
SCHEDULER_INVOCATION = 1.00 / 1e6  # after 14 million free a month
SCHEDULER_FREE = 14e6

MINUTES = 730 * 60
MEMORY_GB = 0.25
DAYS = 730 / 24


def expected_stay_s(per_minute: float) -> float:
    """E[seconds until the latest of k calls uniform in a minute], k ~ Poisson(per_minute)."""
    if per_minute == 0:
        return 0.0
    total, p = 0.0, math.exp(-per_minute)
    for k in range(1, 2000):
        p *= per_minute / k
        total += p * 60 * k / (k + 1)
        if p < 1e-12 and k > per_minute:
            break
    return total


def main() -> int:
    m = json.loads(sys.argv[1])
    idle_s = m["idleMsP50"] / 1000
    rows = []
    for per_day in (0, 1_000, 100_000, 1_000_000):
        calls = per_day * DAYS
        per_minute = per_day / 1440
        busy_share = 1 - math.exp(-per_minute)
        # Fixed window: 70 s a minute; ~35 RRU of counts a minute; 7 W / 2.5 R a call
        # (docs/dynamodb.md); 18 dispatch metrics every hour.
        fixed = {
            "lambda": MINUTES * (MEMORY_GB * 70 * LAMBDA_GB_S + LAMBDA_REQUEST),
            "dynamodb": MINUTES * 35 * RRU + calls * (7 * WRU + 2.5 * RRU),
            "metrics": 18 * METRIC_MONTH,
        }
        # Ends early: idle minutes measured; a minute with calls stays until its latest one,
        # re-selecting (2 minutes' count and shard 0, 0.5 RRU each, every 5 s) and writing its
        # watch (1 WRU). Calls spread evenly are mostly alone in their minute: a minute's only
        # call is measured to cost what any other does to create (loneCreateWru).
        stay = expected_stay_s(per_minute)
        staying_minutes = MINUTES * busy_share
        ends = {
            "lambda": MINUTES * (MEMORY_GB * (idle_s + stay) * LAMBDA_GB_S + LAMBDA_REQUEST),
            "dynamodb": MINUTES * (m["idleRru"] * RRU + m["idleWru"] * WRU)
            + staying_minutes * ((stay / 5) * 2 * RRU + WRU)
            + calls * ((m["createWru"] + m["dispatchWru"]) * WRU
                       + (m["createRru"] + m["dispatchRru"]) * RRU),
            # RunDuration always; with calls every hour, the coordinator's 5 (Selected,
            # Claimed, Sent, RunDuration, PushLateness).
            "metrics": METRIC_MONTH * (1 if per_day == 0 else 5 if per_day >= 1_000 else 3),
        }
        sched = {
            "lambda": calls * (MEMORY_GB * 0.1 * LAMBDA_GB_S + LAMBDA_REQUEST),
            "dynamodb": calls * (3 * WRU + 2 * RRU),
            "metrics": 0.0 if per_day == 0 else 3 * METRIC_MONTH,
            "scheduler": max(0.0, calls - SCHEDULER_FREE) * SCHEDULER_INVOCATION,
        }
        rows.append((per_day, fixed, ends, sched))

    def total(d):
        return sum(d.values())

    print()
    print("Monthly cost of the dispatch path (USD, ap-northeast-1, arm64; fixed costs apart)")
    print()
    print("| calls a day | fixed window: Lambda + DynamoDB + metrics = total "
          "| ends early: Lambda + DynamoDB + metrics = total "
          "| EventBridge Scheduler (minute precision): total |")
    print("| ---: | ---: | ---: | ---: |")
    for per_day, fixed, ends, sched in rows:
        fmt = lambda d: " + ".join(f"{d[k]:.2f}" for k in ("lambda", "dynamodb", "metrics"))
        print(f"| {per_day:,} | {fmt(fixed)} = **{total(fixed):.2f}** "
              f"| {fmt(ends)} = **{total(ends):.2f}** | {total(sched):.2f} |")
    per_million = (m["createWru"] + m["dispatchWru"]) * WRU * 1e6 + (
        m["createRru"] + m["dispatchRru"]) * RRU * 1e6
    print()
    print(f"DynamoDB per million calls (measured units, this design): ${per_million:.2f}")
    wake = MEMORY_GB * 40 * LAMBDA_GB_S + LAMBDA_REQUEST + EVENT + 0.5 * RRU
    print(f"a call made 10-75 s ahead that no staying run watches: one woken run of ~40 s, "
          f"${wake * 1000:.2f} per 1,000")
    print(f"idle: {idle_s * 1000:.1f} ms a minute, {MINUTES * MEMORY_GB * idle_s:.0f} GB-s a month")
    return 0


if __name__ == "__main__":
    sys.exit(main())
