#!/usr/bin/env python3
"""Plots bench/autoscale's results.json (the Figure 14 analogue of ViperProbe
§5.4): per policy, the replica count and the p95 latency over time under the
same load ramp, with the offered rate and both signals.

usage: plot.py RESULTS.json OUT.png
"""
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"cpu": "tab:blue", "runq": "tab:red"}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    runs = doc["runs"]
    fig, ax = plt.subplots(4, 1, figsize=(9, 9), sharex=True)
    seen = {}
    for r in runs:
        name = r["policy"]["Name"]
        seen[name] = seen.get(name, 0) + 1
        style = "-" if seen[name] == 1 else ["--", ":", "-."][(seen[name] - 2) % 3]
        label = f"{name} run {seen[name]}"
        sec = r["seconds"]
        t = [s["t"] for s in sec]
        c = COLOURS.get(name, None)
        nan = lambda v: math.nan if v is None else v  # noqa: E731
        ax[0].step(t, [s["replicas"] for s in sec], where="post", color=c, ls=style, label=label)
        ax[1].plot(t, [nan(s["p95Ms"]) for s in sec], color=c, ls=style, label=label)
        ax[2].plot(t, [100 * s["failureRate"] for s in sec], color=c, ls=style, label=label)
        ax[3].plot(t, [nan(s["cpu"]) for s in sec], color=c, ls=style, lw=1, label=f"{label}: CPU / quota")
        ax3b = ax[3].twinx() if not hasattr(main, "ax3b") else main.ax3b
        main.ax3b = ax3b
        ax3b.plot(t, [nan(s["runqMs"]) for s in sec], color=c, ls=style, lw=1, alpha=0.5)
    first = runs[0]["seconds"]
    load = ax[0].twinx()
    load.fill_between([s["t"] for s in first], [s["offered"] for s in first], color="grey", alpha=0.15, step="post")
    load.set_ylabel("offered req/s (grey)")
    ax[0].set_ylabel("replicas")
    ax[0].legend(loc="upper left", fontsize=7)
    ax[1].set_ylabel("p95 per second, ms")
    ax[1].set_yscale("log")
    ax[2].set_ylabel("failed, % per second")
    ax[3].set_ylabel("CPU / quota (lines)")
    main.ax3b.set_ylabel("run-queue latency, ms (faint)")
    main.ax3b.set_yscale("log")
    ax[3].set_xlabel("seconds into the run")
    fig.suptitle("Autoscaling on CPU utilisation vs run-queue latency (same ramp)", fontsize=10)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=80)


if __name__ == "__main__":
    main()
