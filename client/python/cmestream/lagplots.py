"""Plots of lag scans and Chapman-Kolmogorov tests (matplotlib, PNG), in the style of
deeptime.plots: implied timescales against lag with error bands, and the K x K CK panels.

    import cmestream, cmestream.lagplots as lp
    with cmestream.Client("127.0.0.1:50051") as c:
        lp.plot_implied_timescales(c.timescales("fw"), "its.png")
        lp.plot_ck_test(c.cktest("fw"), "ck.png")

matplotlib is imported lazily (Agg backend), so the client works without it.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .results import CkResult, CkTestResult, LagScan, TimescalesResult


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_implied_timescales(result: TimescalesResult, path: str, sigmas: float = 2.0,
                            title: Optional[str] = None) -> str:
    """Implied timescales (units of dt) against lag (units of dt), one line per slow mode with
    a +-`sigmas` standard-error band; dashed: the count chain. Also draws the line t = lag
    below which a timescale cannot be resolved. Writes a PNG to `path` and returns it."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.2))
    scans = [(result.primary, "-", result.estimator)]
    if result.koopman is not None and result.estimator == "koopman":
        scans.append((result.counts, "--", "count chain"))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lag_max = 1.0
    for scan, style, name in scans:
        lags = scan.lags * result.dt
        lag_max = max(lag_max, float(lags.max()) if lags.size else 1.0)
        for i in range(scan.timescales.shape[1]):
            t, se = scan.timescales[:, i], scan.stderr[:, i]
            ok = np.isfinite(t)
            color = colors[i % len(colors)]
            ax.plot(lags[ok], t[ok], style, marker="o", color=color, label=f"{name} mode {i + 1}")
            band = ok & np.isfinite(se)
            if style == "-" and band.any():
                ax.fill_between(lags[band], (t - sigmas * se)[band], (t + sigmas * se)[band],
                                color=color, alpha=0.2)
    grid = np.linspace(0, lag_max, 50)
    ax.fill_between(grid, 0, grid, color="0.85", label="t < lag (unresolved)")
    ax.set_xlabel("lag time")
    ax.set_ylabel("implied timescale")
    ax.set_yscale("log")
    ax.set_title(title or f"implied timescales ({result.estimator}, +-{sigmas:g} s.e.)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_ck_test(result: CkTestResult, path: str, sigmas: float = 2.0,
                 title: Optional[str] = None) -> str:
    """K x K panels: set-to-set probability from set i to set j against k * lag; predicted
    T(lag)^k (line) vs estimated T(k lag) (points with +-`sigmas` s.e. bars); dotted: the
    count chain's prediction. Writes a PNG to `path` and returns it."""
    plt = _pyplot()
    ck: CkResult = result.primary
    k = ck.clusters
    fig, axes = plt.subplots(k, k, figsize=(2.2 * k + 1, 2.0 * k + 0.6), sharex=True, sharey=True,
                             squeeze=False)
    x = np.concatenate([[0], ck.steps]) * ck.lag  # k = 0: the identity
    for i in range(k):
        for j in range(k):
            ax = axes[i][j]
            start = 1.0 if i == j else 0.0
            pred = np.concatenate([[start], ck.predicted[:, i, j]])
            ax.plot(x, pred, "-", color="C0", label="predicted")
            ax.errorbar(ck.steps * ck.lag, ck.estimated[:, i, j], yerr=sigmas * ck.stderr[:, i, j],
                        fmt="o", color="C1", ms=3, label="estimated")
            if result.koopman is not None and result.estimator == "koopman":
                cc = result.counts
                ax.plot(np.concatenate([[0], cc.steps]) * cc.lag,
                        np.concatenate([[start], cc.predicted[:, i, j]]), ":", color="C2",
                        label="count chain")
            ax.set_ylim(-0.05, 1.05)
            ax.set_title(f"{i} -> {j}", fontsize=8)
    for j in range(k):
        axes[k - 1][j].set_xlabel("lag (samples)", fontsize=8)
    axes[0][0].legend(fontsize=6)
    fig.suptitle(title or f"CK test ({result.estimator}), lag {ck.lag}, max deviation "
                 f"{ck.max_deviation:.3f} +- {ck.max_deviation_stderr:.3f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


__all__ = ["plot_implied_timescales", "plot_ck_test", "LagScan"]
