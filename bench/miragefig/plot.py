#!/usr/bin/env python3
"""Plots bench/miragefig's results.json as the analogues of Figures 5.4 and
5.5 of "Aggregated tracing model for MirageOS unikernels" (§5.3): per
configuration one PNG with three panels (backend, frontend, api traces), the
mean local, network and remote waits of each service's spans against the
number of concurrent clients, beside the clients' mean latency.

usage: plot.py RESULTS.json OUTDIR   (writes OUTDIR/mirage-CONFIG.png per
                                      configuration: cpu, net, none)
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = ["backend", "frontend", "api"]
TITLES = {
    "cpu": "Waiting times under a CPU bottleneck (CPU quota on the backend)",
    "net": "Waiting times under a network bottleneck (bandwidth limit on the backend's link)",
    "none": "Waiting times with nothing injected (control)",
}


def series(steps, svc, key):
    xs, ys = [], []
    for s in steps:
        w = (s.get("services") or {}).get(svc)
        if not w:
            continue
        if key in ("netMs", "remoteMs") and not w.get("calls"):
            continue
        if key == "localMs" and not w.get("localHops"):
            continue
        xs.append(s["clients"])
        ys.append(w[key])
    return xs, ys


def plot(cfg, doc, path):
    steps = cfg["steps"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), sharey=True)
    clients = [s["clients"] for s in steps]
    latency = [s["meanMs"] for s in steps]
    for ax, svc, letter in zip(axes, PANELS, "abc"):
        ax.plot(clients, latency, "k--", marker=".", label="client latency (mean)")
        xs, ys = series(steps, svc, "totalMs")
        ax.plot(xs, ys, color="tab:gray", marker=".", label="its SERVER span (total)")
        for key, colour, label in (("localMs", "tab:blue", "local wait"),
                                   ("netMs", "tab:orange", "net wait"),
                                   ("remoteMs", "tab:green", "remote wait")):
            xs, ys = series(steps, svc, key)
            if xs:
                ax.plot(xs, ys, color=colour, marker="o", label=label)
        ax.set_title(f"({letter}) {svc} traces")
        ax.set_xlabel("concurrent clients")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("ms (mean per request)")
    axes[-1].legend(loc="upper left", fontsize=8)
    fig.suptitle(f"{TITLES.get(cfg['name'], cfg['name'])}: {cfg['fault']}\n"
                 f"{doc['date']}, {doc['machine']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    print(f"plot.py: wrote {path}")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    os.makedirs(sys.argv[2], exist_ok=True)
    for cfg in doc["configs"]:
        if cfg["steps"]:
            plot(cfg, doc, os.path.join(sys.argv[2], f"mirage-{cfg['name']}.png"))


if __name__ == "__main__":
    main()
