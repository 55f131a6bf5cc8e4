"""Draws the dispatch lateness distributions of bench/dispatch-precision.sh into one PNG.

usage: plot-lateness.py OUT.png lateness-<store>-<calls>.csv...

Left: histogram of lateness (ms after scheduledAt) per case; right: the share of pushes later
than x (log scale), so the tail (p99, max) is readable next to the bulk.
"""

import csv
import os
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        return sorted(float(row["lateness_ms"]) for row in csv.DictReader(f))


def label(path):
    m = re.match(r"lateness-(\w+)-(\d+)\.csv", Path(path).name)
    store, calls = (m.group(1), int(m.group(2))) if m else (Path(path).stem, 0)
    store = {
        "dynamodb": "DynamoDB Local",
        "second": "limits model, all in one second",
        "spike": "limits model, 07:00 spike",
        "newtable": "limits model, one second, a new table",
        "warm40k": "limits model, one second, warm 40,000 WRU/s",
        "spike40k": "limits model, 07:00 spike, warm 40,000 WRU/s",
    }.get(store, "memory store")
    due = "due" if store.startswith("limits") else "due in one minute"
    return f"{calls:,} {due}, {store}", (store, calls)


def main():
    out, paths = sys.argv[1], sys.argv[2:]
    cases = sorted(((label(p), load(p)) for p in paths), key=lambda c: (c[0][1][0] != "memory store", c[0][1][1]))
    fig, (hist, tail) = plt.subplots(1, 2, figsize=(13, 5.2))
    top = max((max(v) for _, v in cases if v), default=1.0)
    bins = [i * top / 60 for i in range(61)]
    for (name, _), values in cases:
        if not values:
            continue
        p50 = values[len(values) // 2]
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
        text = f"{name}\n(p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {values[-1]:.1f} ms)"
        hist.hist(values, bins=bins, histtype="step", linewidth=1.6, label=text)
        share = [1 - i / len(values) for i in range(len(values))]
        tail.step(values, share, where="post", linewidth=1.6, label=name)
    hist.set_title("Lateness of each push (push sent − scheduledAt)")
    hist.set_xlabel("lateness (ms)")
    hist.set_ylabel("pushes")
    hist.set_yscale("log")
    hist.legend(fontsize=8)
    hist.grid(alpha=0.3)
    tail.set_title("Share of pushes later than x")
    tail.set_xlabel("lateness (ms)")
    tail.set_ylabel("share of pushes")
    tail.set_yscale("log")
    tail.axhline(0.01, color="grey", linestyle=":", linewidth=1)
    tail.text(0, 0.0105, " p99", color="grey", fontsize=8, va="bottom")
    goal = float(os.environ.get("GOAL_MS", "100"))
    tail.axvline(goal, color="red", linestyle="--", linewidth=1)
    tail.text(goal, 1.0, f" goal: p99 < {goal:g} ms", color="red", fontsize=8, va="top")
    tail.legend(fontsize=8)
    tail.grid(alpha=0.3, which="both")
    fig.suptitle(os.environ.get("TITLE", "koe dispatcher: reservations due in one minute, stand-in APNs at 20 ms a push"))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
