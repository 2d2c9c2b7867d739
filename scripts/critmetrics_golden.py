"""Writes the golden files the Go tests of internal/kshape and internal/kstest
compare against: tslearn's KShape (from given initial centroids, so that the
result is deterministic) and scikit-learn's silhouette on its distances, and
scipy.stats.ks_2samp / kstwo.sf. Run by scripts/critmetrics-golden.sh, which
pins the versions in a venv of its own."""

import json
import sys

import numpy as np
import scipy
import scipy.stats
import sklearn
import sklearn.metrics
import tslearn
from tslearn.clustering import KShape
from tslearn.metrics import cdist_normalized_cc
from tslearn.preprocessing import TimeSeriesScalerMeanVariance


def znorm(x):
    return TimeSeriesScalerMeanVariance(mu=0.0, std=1.0).fit_transform(x)[:, :, 0]


def shapes(rng, m):
    t = np.linspace(0, 4 * np.pi, m)
    return {
        "sine": np.sin(t),
        "square": np.sign(np.sin(t)),
        "ramp": np.linspace(-1, 1, m),
        "spike": np.exp(-((np.arange(m) - m / 3) ** 2) / (2 * (m / 20) ** 2)),
        "step": (np.arange(m) > m / 2).astype(float),
    }


def family(rng, base, n, m, noise, maxshift):
    out = []
    for _ in range(n):
        s = int(rng.integers(-maxshift, maxshift + 1))
        y = np.roll(base, s) * rng.uniform(0.5, 3) + rng.uniform(-5, 5)
        out.append(y + rng.normal(0, noise, m))
    return out


def viperprobe_like(rng, m):
    """Per-metric series of one container over a load ramp with a burst:
    CPU-side metrics follow the load, network-side metrics the request rate
    with a lag, disk and TLB metrics their own rhythm (see the Go test)."""
    t = np.arange(m)
    load = np.clip(np.minimum(t, m - t) / (m / 3), 0, 1) + 0.6 * (np.abs(t - 0.6 * m) < m / 12)
    rate = np.roll(load, 2)
    flush = (t % 17 == 0).astype(float)
    disk = np.sin(2 * np.pi * t / (m / 3)) ** 2
    series = {
        "oncpu": 2e-4 * load + rng.normal(0, 1e-5, m),
        "runq": 1e-5 * np.exp(2.5 * load) + rng.normal(0, 2e-6, m),
        "offcpu": 1e-3 / (0.3 + load) + rng.normal(0, 5e-5, m),
        "tcp_send_bytes": 4e5 * rate + rng.normal(0, 1e4, m),
        "tcp_recv_bytes": 3e5 * rate + rng.normal(0, 1e4, m),
        "page_faults_user": 50 * rate ** 2 + rng.normal(0, 2, m),
        "tlb_flushes": 30 * flush + rng.normal(0, 1, m),
        "disk_io_latency": 5e-3 * disk + rng.normal(0, 2e-4, m),
        "disk_io_bytes": 6e4 * disk + rng.normal(0, 2e3, m),
    }
    return list(series.keys()), np.array(list(series.values()))


def kshape_case(name, X, k, init_idx, note=""):
    Xz = znorm(X)
    init = Xz[init_idx][:, :, None].copy()
    ks = KShape(n_clusters=k, init=init, random_state=0, max_iter=100, tol=1e-6)
    ks.fit(Xz[:, :, None])
    norms = np.linalg.norm(Xz, axis=1)
    cnorms = np.linalg.norm(ks.cluster_centers_[:, :, 0], axis=1)
    dists = 1.0 - cdist_normalized_cc(Xz[:, :, None], ks.cluster_centers_, norms, cnorms, False)
    pair = 1.0 - cdist_normalized_cc(Xz[:, :, None], Xz[:, :, None], norms, norms, False)
    np.fill_diagonal(pair, 0.0)
    sil = None
    if 2 <= len(set(ks.labels_.tolist())) < len(X):
        # SBD of near-identical series can be −1e-16; scikit-learn refuses negatives.
        sil = float(sklearn.metrics.silhouette_score(np.clip(pair, 0, None), ks.labels_, metric="precomputed"))
    return {
        "name": name,
        "note": note,
        "series": Xz.tolist(),
        "k": k,
        "init": [int(i) for i in init_idx],
        "labels": ks.labels_.tolist(),
        "centroids": ks.cluster_centers_[:, :, 0].tolist(),
        # tslearn gives up a given init that empties a cluster: inertia inf.
        "inertia": float(ks.inertia_) if np.isfinite(ks.inertia_) else None,
        "emptyCluster": bool(not np.isfinite(ks.inertia_)),
        "iterations": int(ks.n_iter_),
        "dist": dists.tolist(),
        "pairwise": pair.tolist(),
        "silhouette": sil,
    }


def main(out_kshape, out_ks):
    rng = np.random.default_rng(20261128)
    cases = []
    m = 64
    sh = shapes(rng, m)
    X = family(rng, sh["sine"], 6, m, 0.2, 6) + family(rng, sh["spike"], 6, m, 0.05, 8) + family(rng, sh["ramp"], 6, m, 0.1, 3)
    X = np.array(X)
    cases.append(kshape_case("three-shapes", X, 3, [0, 6, 12], "sines, spikes and ramps shifted and scaled"))
    cases.append(kshape_case("three-shapes-bad-start", X, 3, [0, 1, 2], "all three first centroids from one family"))
    cases.append(kshape_case("three-shapes-k2", X, 2, [3, 14]))
    cases.append(kshape_case("three-shapes-k4", X, 4, [0, 6, 12, 7]))
    m2 = 37  # odd length: the FFT pads 73 lags to 128
    sh2 = shapes(rng, m2)
    X2 = np.array(family(rng, sh2["step"], 5, m2, 0.1, 4) + family(rng, sh2["square"], 5, m2, 0.3, 2))
    cases.append(kshape_case("steps-squares-odd-length", X2, 2, [2, 7]))
    names, V = viperprobe_like(rng, 96)
    cases.append(kshape_case("viperprobe-like", V, 3, [0, 3, 6], "metric order: " + ",".join(names)))
    cases.append(kshape_case("viperprobe-like-k4", V, 4, [1, 4, 6, 8], "metric order: " + ",".join(names)))
    X3 = np.array([np.sin(np.linspace(0, 6, 20) + p) + 0.01 * i for i, p in enumerate(rng.uniform(0, 1, 8))] + [np.zeros(20)])
    cases.append(kshape_case("with-constant", X3, 2, [0, 8], "the last series is constant: all zeros after z-normalisation"))

    sbd = []
    for m in (1, 2, 5, 16, 17, 100):
        for _ in range(3):
            x = rng.normal(size=m)
            y = np.roll(x, int(rng.integers(0, m))) + rng.normal(0, 0.3, m)
            x, y = znorm(np.array([x]))[0], znorm(np.array([y]))[0]
            cc = np.correlate(x, y, mode="full")
            denom = np.linalg.norm(x) * np.linalg.norm(y)
            ncc = cc / denom if denom >= 1e-9 else np.zeros_like(cc)
            w = int(np.argmax(ncc))
            sbd.append({"x": x.tolist(), "y": y.tolist(), "sbd": float(1 - ncc[w]), "shift": w - (m - 1)})

    with open(out_kshape, "w") as f:
        json.dump({"generator": "scripts/critmetrics_golden.py", "tslearn": tslearn.__version__,
                   "numpy": np.__version__, "sklearn": sklearn.__version__,
                   "kshape": cases, "sbd": sbd}, f, indent=None, separators=(",", ":"))
        f.write("\n")

    ks = []
    def add(kind, a, b, **extra):
        r = scipy.stats.ks_2samp(a, b, alternative="two-sided", method="auto")
        row = {"kind": kind, "d": float(r.statistic), "p": float(r.pvalue)}
        row.update(extra)
        ks.append(row)
    # Exact: samples as values (ties included), equal and unequal sizes.
    for n1, n2 in [(1, 1), (3, 5), (10, 10), (7, 13), (50, 50), (40, 120), (200, 173), (1000, 999), (2500, 2500), (9000, 10000)]:
        for shift in (0.0, 0.15):
            a = np.round(rng.normal(0, 1, n1), 2)
            b = np.round(rng.normal(shift, 1, n2), 2)
            add("samples", a, b, x=a.tolist(), y=b.tolist())
    # Histograms: values are bin indices repeated by the counts; large ones
    # go to the asymptotic mode (max(n1, n2) > 10000).
    for n1, n2, bins in [(300, 500, 12), (8000, 9000, 20), (20000, 15, 20), (12000, 30000, 25), (100000, 90000, 30),
                         (2000000, 1500000, 30), (3000000, 40, 16), (15000, 15000, 10)]:
        for skew in (0.0, 0.02, 0.3):
            p1 = rng.dirichlet(np.ones(bins) * 5)
            p2 = np.abs(p1 + rng.normal(0, skew / bins, bins)) if skew else p1
            p2 = p2 / p2.sum()
            c1 = rng.multinomial(n1, p1)
            c2 = rng.multinomial(n2, p2)
            vals = np.arange(bins, dtype=float)
            add("binned", np.repeat(vals, c1), np.repeat(vals, c2), c1=c1.tolist(), c2=c2.tolist())
    # The one-sample Kolmogorov distribution over every branch of kstwo.sf.
    sf = []
    for n in (1, 2, 5, 20, 100, 140, 141, 500, 5000, 50000, 100001, 400000, 2000000):
        for x in (0.0005, 0.001, 0.003, 0.01, 0.02, 0.05, 0.08, 0.1, 0.2, 0.3, 0.45, 0.5, 0.6, 0.9, 0.99, 1 / n, 0.75 / n, 1 - 1 / n):
            if 0 < x < 1:
                sf.append({"n": n, "x": x, "sf": float(scipy.stats.kstwo.sf(x, n))})
    smirnov = []
    for n in (2, 3, 10, 50, 141, 1000, 20000, 999999, 1500000):
        for x in (0.001, 0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0 / n, 2.0 / n):
            if 0 < x < 1:
                smirnov.append({"n": n, "x": x, "sf": float(scipy.special.smirnov(n, x))})
    with open(out_ks, "w") as f:
        json.dump({"generator": "scripts/critmetrics_golden.py", "scipy": scipy.__version__,
                   "ks_2samp": ks, "kstwo_sf": sf, "smirnov": smirnov}, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
