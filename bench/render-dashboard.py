"""Draws the CloudWatch dashboard's Koe/* widgets from EMF lines, as CloudWatch would aggregate them
per minute, for docs/operations.md (bench/dashboard.sh feeds it a local run's lines).

    render-dashboard.py EMF_FILE OUT_PNG

EMF_FILE holds one EMF record per line (a JSON object with `_aws.CloudWatchMetrics`; a metric's
value is a number or an array of numbers, each a sample). Records are put in the minute of their
`_aws.Timestamp`, as CloudWatch does: a dispatch run's record in the minute the run ended.
The panels carry the titles of template.yaml's dashboard widgets; the Lambda widgets (AWS/Lambda
metrics) and APNs errors by reason (none locally) are named in the notes panel instead.
"""

import collections
import datetime as dt
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

MINUTE = 60_000


class Records:
    """Every sample, by (namespace, metric, function) and minute."""

    def __init__(self):
        # (namespace, metric, function) -> minute (ms) -> [samples]
        self.samples = collections.defaultdict(lambda: collections.defaultdict(list))
        self.runs = []  # (timestamp ms, function, RunDuration ms, Selected)
        self.apns_errors = collections.Counter()
        self.lines = 0
        self.first = self.last = None

    def add(self, number, record):
        aws = record.get("_aws") if isinstance(record, dict) else None
        directives = aws.get("CloudWatchMetrics") if isinstance(aws, dict) else None
        if not isinstance(directives, list) or not directives:
            raise ValueError(f"line {number}: no _aws.CloudWatchMetrics: not an EMF record")
        ts = aws.get("Timestamp")
        if not isinstance(ts, int):
            raise ValueError(f"line {number}: _aws.Timestamp is not milliseconds")
        self.lines += 1
        self.first = ts if self.first is None else min(self.first, ts)
        self.last = ts if self.last is None else max(self.last, ts)
        minute = ts - ts % MINUTE
        for directive in directives:
            namespace = directive["Namespace"]
            for dims in directive["Dimensions"]:
                for dim in dims:
                    if dim not in record:
                        raise ValueError(f"line {number}: dimension {dim} has no value")
            function = record.get("Function", "")
            for metric in directive["Metrics"]:
                name = metric["Name"]
                if name not in record:
                    raise ValueError(f"line {number}: metric {name} has no value")
                value = record[name]
                values = value if isinstance(value, list) else [value]
                if not all(isinstance(v, (int, float)) for v in values):
                    raise ValueError(f"line {number}: {name} is not a number or numbers")
                if name == "ApnsErrors":
                    self.apns_errors[record.get("Reason", "?")] += sum(values)
                self.samples[(namespace, name, function)][minute].extend(values)
            if namespace == "Koe/Dispatch" and "RunDuration" in record:
                self.runs.append((ts, function, record["RunDuration"], record.get("Selected", 0)))

    def functions(self, namespace, metric):
        return sorted({f for (n, m, f) in self.samples if n == namespace and m == metric})

    def per_minute(self, namespace, metric, minutes, stat, function=None):
        """One value per minute (None where the minute has no sample) for one function, or all."""
        keys = [k for k in self.samples if k[0] == namespace and k[1] == metric
                and (function is None or k[2] == function)]
        out = []
        for minute in minutes:
            values = [v for k in keys for v in self.samples[k].get(minute, [])]
            out.append(stat(values) if values else None)
        return out

    def all(self, namespace, metric, function=None):
        return [v for k, by_minute in self.samples.items()
                if k[0] == namespace and k[1] == metric and (function is None or k[2] == function)
                for vs in by_minute.values() for v in vs]


def pct(q):
    return lambda values: float(np.percentile(values, q))


def total(values):
    return float(sum(values))


def zeros(values):
    return [0.0 if v is None else v for v in values]


def when(ms):
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def style(ax, title):
    ax.set_title(title, fontsize=9.5, loc="left", fontweight="bold")
    ax.grid(True, color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.tick_params(labelsize=8)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=dt.timezone.utc))
    ax.xaxis.set_major_locator(mdates.MinuteLocator())
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def ms_log_axis(ax, top):
    """A milliseconds axis, linear to 10 and logarithmic above."""
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(0, top)
    ax.set_yticks([0, 5, 10, 100, 1000])
    ax.set_yticklabels(["0", "5", "10", "100", "1,000"])
    ax.set_ylabel("ms (log above 10)", fontsize=8)


def legend(ax, *others, **kw):
    """One legend for an axes and its twins (so their entries cannot overlap)."""
    handles, labels = ax.get_legend_handles_labels()
    for other in others:
        h, l = other.get_legend_handles_labels()
        handles, labels = handles + h, labels + l
    ax.legend(handles, labels, fontsize=7.5, frameon=False, **kw)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: render-dashboard.py EMF_FILE OUT_PNG")
    src, out = sys.argv[1:]
    recs = Records()
    with open(src, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    recs.add(number, json.loads(line))
                except (ValueError, KeyError, TypeError) as e:
                    sys.exit(f"{src}: {e}")
    if not recs.lines:
        sys.exit(f"{src}: no EMF lines")

    first_minute = recs.first - recs.first % MINUTE
    minutes = list(range(first_minute, recs.last + 1, MINUTE))
    xs = [when(m) for m in minutes]
    centres = [when(m + MINUTE // 2) for m in minutes]  # bars sit in their minute
    bar_w = 0.8 / 1440
    xlim = (when(first_minute), when(minutes[-1] + MINUTE))

    fig, axes = plt.subplots(3, 3, figsize=(14, 10), dpi=100)
    day = when(recs.first).strftime("%Y-%m-%d")
    fig.suptitle(f"Koe dashboard (rendered from a local run's EMF lines, {day})", fontsize=14,
                 fontweight="bold", x=0.01, ha="left")
    D, A = "Koe/Dispatch", "Koe/Api"

    # 1. Push lateness.
    ax = axes[0][0]
    style(ax, "Push lateness per minute (ms after the reserved second)")
    for label, stat, colour in (("p50", pct(50), "#1f77b4"), ("p99", pct(99), "#ff7f0e"),
                                ("max", max, "#d62728")):
        ys = recs.per_minute(D, "PushLateness", minutes, stat)
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=4, label=label, color=colour)
    ax.axhline(1000, color="#2ca02c", linestyle="--", linewidth=1.2, label="promise: 1 s")
    ms_log_axis(ax, 3000)
    legend(ax, loc="upper left", ncol=4)

    # 2. Calls by outcome (stacked bars).
    ax = axes[0][1]
    style(ax, "Calls by outcome per minute")
    bottom = np.zeros(len(minutes))
    for name, label, colour in (("Sent", "sent", "#2ca02c"), ("Failed", "failed", "#d62728"),
                                ("PushUnknown", "push unknown", "#9467bd"),
                                ("Missed", "missed", "#ff7f0e"),
                                ("Lost", "lost", "#8c564b"), ("Released", "released", "#e377c2"),
                                ("Abandoned", "abandoned", "#7f7f7f")):
        ys = np.array(zeros(recs.per_minute(D, name, minutes, total)))
        ax.bar(centres, ys, bottom=bottom, width=bar_w, color=colour,
               label=f"{label} ({int(ys.sum())})")
        bottom += ys
    ax.set_ylabel("calls", fontsize=8)
    legend(ax, loc="upper left", ncol=2)
    ax.set_ylim(0, max(bottom.max() * 1.6, 1))

    # 3. Store.
    ax = axes[1][0]
    style(ax, "Dispatch and DynamoDB: retries, throttles, lost replies")
    for name, label in (("StoreRetries", "store requests made again"),
                        ("StoreThrottles", "throttled by DynamoDB"),
                        ("Resolved", "resolved (answered when made again)"),
                        ("Unresolved", "unresolved at deadline"), ("StoreErrors", "store errors")):
        ys = zeros(recs.per_minute(D, name, minutes, total))
        ax.plot(xs, ys, marker="o", ms=3, label=f"{label} ({int(sum(ys))})")
    ax.set_ylim(-0.5, max(5, ax.get_ylim()[1] * 1.5))
    ax.set_ylabel("requests", fontsize=8)
    legend(ax, loc="upper left")

    # 4. Dispatch runs: one bar per run at its end, the calls it selected above it.
    ax = axes[0][2]
    style(ax, "Dispatch runs")
    for ts, _function, duration, selected in sorted(recs.runs):
        ax.bar(when(ts), duration / 1000, width=10 / 86400, color="#1f77b4")
        ax.annotate(f"{selected}", (when(ts), duration / 1000), textcoords="offset points",
                    xytext=(0, 3), ha="center", fontsize=7.5)
    ax.set_ylabel("run duration (s), at the run's end", fontsize=8)
    ax.set_ylim(0, 100)
    ax.text(0.01, 0.97, f"{len(recs.runs)} runs; above each bar: calls it selected",
            transform=ax.transAxes, fontsize=7.5, va="top")

    # 5. API requests and errors.
    ax = axes[1][1]
    style(ax, "API requests and errors per minute")
    functions = recs.functions(A, "Latency")
    count = {f: len(recs.all(A, "Latency", f)) for f in functions}
    top = sorted(functions, key=lambda f: -count[f])[:5]
    bottom = np.zeros(len(minutes))
    groups = [(f, [f]) for f in top] + ([("other", [f for f in functions if f not in top])]
                                        if len(functions) > len(top) else [])
    for label, members in groups:
        ys = np.array([sum(len(recs.samples[(A, "Latency", f)].get(m, [])) for f in members)
                       for m in minutes], dtype=float)
        ax.bar(centres, ys, bottom=bottom, width=bar_w, label=f"{label}: {int(ys.sum())}",
               alpha=0.85)
        bottom += ys
    ax.set_ylabel("requests", fontsize=8)
    ax.set_ylim(0, max(bottom.max() * 1.9, 1))
    right = ax.twinx()
    for name, label, colour in (("ClientErrors", "4xx", "#ff7f0e"), ("ServerErrors", "5xx", "#d62728")):
        ys = zeros(recs.per_minute(A, name, minutes, total))
        right.plot(centres, ys, color=colour, marker="s", ms=4, linewidth=1.5,
                   label=f"{label}: {int(sum(ys))} (right axis)")
    right.set_ylim(0, max(right.get_ylim()[1] * 1.9, 5))
    right.tick_params(labelsize=8)
    right.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    right.set_ylabel("4xx, 5xx per minute", fontsize=8)
    legend(ax, right, loc="upper left", ncol=2)

    # 6. API latency p99 per function.
    ax = axes[1][2]
    style(ax, "API latency p99 (ms)")
    for f in sorted(functions, key=lambda f: -count[f])[:7]:
        ys = recs.per_minute(A, "Latency", minutes, pct(99), f)
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=3, label=f)
    ms_log_axis(ax, 5000)
    legend(ax, loc="upper left", ncol=4)

    # 7. Model tokens and provider errors.
    ax = axes[2][0]
    style(ax, "Model tokens and provider errors per minute")
    model_functions = recs.functions(A, "ModelTokens") or ["chat"]
    offset = bar_w / max(len(model_functions), 1)
    for i, f in enumerate(model_functions):
        ys = zeros(recs.per_minute(A, "ModelTokens", minutes, total, f))
        ax.bar([when(m + 10_000 + i * 40_000 / len(model_functions)) for m in minutes], ys,
               width=offset, align="edge", label=f"{f} tokens ({int(sum(ys)):,})")
    ax.set_ylabel("tokens", fontsize=8)
    ax.set_ylim(0, max(ax.get_ylim()[1] * 1.4, 1))
    errs = zeros(recs.per_minute(A, "ProviderErrors", minutes, total))
    right = ax.twinx()
    right.plot(centres, errs, color="#d62728", marker="s", ms=4,
               label=f"provider errors ({int(sum(errs))}, right axis)")
    right.set_ylim(0, max(max(errs) * 2, 5))
    right.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    right.tick_params(labelsize=8)
    legend(ax, right, loc="upper left")

    # 8. Spend guard.
    ax = axes[2][1]
    style(ax, "Spend guard: the day's count against the ceiling (%)")
    for f in recs.functions(A, "SpendUsed"):
        ys = recs.per_minute(A, "SpendUsed", minutes, max, f)
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
        ax.plot(*zip(*pts), marker="o", ms=4, label=f"{f}: max % per minute")
    ax.axhline(80, color="#d62728", linestyle="--", linewidth=1.2, label="alarm: 80%")
    ax.set_ylim(0, 100)
    ax.set_ylabel("% of the daily token ceiling", fontsize=8)
    legend(ax, loc="upper left")

    # 9. Notes: the figures, and what a local run cannot show.
    ax = axes[2][2]
    ax.axis("off")
    lateness = recs.all(D, "PushLateness")
    sent = int(sum(recs.all(D, "Sent")))
    requests = sum(count.values())
    lines = [
        f"Local run, {when(recs.first):%H:%M:%S} to {when(recs.last):%H:%M:%S} UTC:",
        f"{recs.lines:,} EMF lines",
        f"{sent} pushes sent"
        + (f"; lateness p50 {np.percentile(lateness, 50):.0f} ms, p99 "
           f"{np.percentile(lateness, 99):.0f} ms, max {max(lateness):.0f} ms" if lateness else ""),
        f"{requests:,} API requests, {int(sum(recs.all(A, 'ClientErrors')))} 4xx, "
        f"{int(sum(recs.all(A, 'ServerErrors')))} 5xx",
        f"APNs errors: {sum(recs.apns_errors.values()) or 'none'}",
        "",
        "Locally: in-memory store, logging push",
        "sender, stand-in OpenAI (bench/dashboard.sh",
        "lowers the chat API's token ceiling).",
        "Koe/Api counts stand in for the API",
        "Gateway ones; one function per route.",
        "Model calls (tokens, spend) are",
        "Function=koe-local: chat and agent together.",
        "Not drawn: APNs errors by reason, and",
        "the Lambda Errors / Throttles /",
        "ConcurrentExecutions widgets",
        "(AWS/Lambda metrics, not EMF).",
    ]
    ax.text(0.02, 0.98, "\n".join(lines), va="top", ha="left", fontsize=9, family="DejaVu Sans",
            transform=ax.transAxes, linespacing=1.45)

    for row in axes:
        for a in row:
            if a.axison:
                a.set_xlim(*xlim)
    fig.tight_layout(rect=(0, 0, 1, 0.975))
    fig.savefig(out, dpi=100)
    print(f"{out}: {recs.lines} EMF lines, {len(minutes)} minutes, {sent} pushes, "
          f"lateness p99 {np.percentile(lateness, 99):.0f} ms" if lateness else out)


if __name__ == "__main__":
    main()
