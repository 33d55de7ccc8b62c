#!/usr/bin/python3
"""One-step forecasts of public real series: cmestream against persistence, least-squares AR on
the same delays and batch kernel ridge (docs/user-guide.md "Real data"); on the seasonal ones,
forecasts of horizons 1..one season against seasonal naive and the iterated AR
(docs/benchmarks.md "Multi-step forecasts of real series").

Protocol, per series of N rows of C channels, with D delays (the daemon learns on delay vectors
of the D newest rows, docs/algorithms.md §1.14; the baselines use the same vectors):
  1. `cmestream model create NAME --dim C --delays D --warmup W` (W = min(1000, training pairs)),
  2. `cmestream ingest NAME --csv TRAIN --trajectory` with the raw rows of the first 80 %,
  3. `cmestream refresh NAME --wait`,
  4. `cmestream forecast NAME --series ALL --horizon H --json` over every row of the series (the
     reply's entries start at row D - 1, the first complete window; H = 1, or one season on the
     seasonal series of SEASON),
  5. score the one-step forecasts of the rows of the last 20 %. Channels are scored in units of
     their training standard deviation (RMSE over channels of the standardized errors), so no
     channel dominates by its units. On the seasonal series, also score each horizon h = 1..H
     from the same origins (multi_step) against seasonal naive (the row one season before the
     target) and the least-squares AR iterated (horizon_table).
  6. `cmestream koopman NAME --json`: the spectral estimate (consistent or the fallback) and the
     slowest oscillatory period (the entry of `periods` with the longest timescale), against the
     series' known cycle where it has one; and the headline's first cycle (the oscillation that
     carries the largest share of the observed variance, harmonics grouped: docs/algorithms.md
     §7.3) with its share.
Baselines, fitted on the same training pairs: persistence (next row = last row), least-squares
AR with an intercept on the same delay vectors, and batch kernel ridge (Gaussian kernel with the
model's bandwidth on the delay vectors scaled by the model's input scaler, centered targets, ridge
chosen on the last quarter of the training pairs).

Data: R's datasets (Debian r-base-core, exported with Rscript) and statsmodels' (Debian
python3-statsmodels); nothing is downloaded.

usage: PYTHONPATH=build/python:client/python scripts/real_data_report.py \\
           [--daemon build/service/cmestreamd] [--cli build/client/cmestream] \\
           [--series NAME,...] [--json OUT] [--plot PNG]
"""
import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

# name, source, dataset, columns (None: all), delays, known cycle in rows (None: none known)
SERIES = [
    ("sunspot.month", "R", "sunspot.month", None, 12, None),
    ("sunspot.year", "R", "sunspot.year", None, 12, 11.0),
    # lynx: "about 10 years" (the full record's spectral peak is near 9.6; an AR(6) on the first
    # 80 %, what the model learns from, gives 10.5).
    ("lynx", "R", "lynx", None, 6, 10.0),
    ("Nile", "R", "Nile", None, 6, None),
    ("treering", "R", "treering", None, 12, None),
    ("nottem", "R", "nottem", None, 12, 12.0),
    ("co2", "R", "co2", None, 12, 12.0),
    ("AirPassengers", "R", "AirPassengers", None, 12, 12.0),
    ("UKDriverDeaths", "R", "UKDriverDeaths", None, 12, 12.0),
    ("UKgas", "R", "UKgas", None, 4, 4.0),
    # discoveries: yearly counts whose last fifth sits below the rest; the regression's live
    # skill loses to persistence on the training pairs, so the model serves persistence.
    ("discoveries", "R", "discoveries", None, 6, None),
    ("BJsales", "R", "BJsales", None, 6, None),
    ("WWWusage", "R", "WWWusage", None, 6, None),
    ("sunspots (statsmodels)", "statsmodels", "sunspots", ["SUNACTIVITY"], 12, 11.0),
    ("EuStockMarkets", "R", "EuStockMarkets", None, 2, None),
    ("Seatbelts", "R", "Seatbelts", ["DriversKilled", "drivers", "front", "rear", "kms", "PetrolPrice",
                                     "VanKilled"], 3, 12.0),
]


# Seasonal series: rows per season. Their forecasts are also scored at horizons 1..season
# (multi_step): against seasonal naive and the least-squares AR iterated.
SEASON = {"nottem": 12, "co2": 12, "AirPassengers": 12, "UKDriverDeaths": 12, "UKgas": 4, "Seatbelts": 12}


def have_r():
    return shutil.which("Rscript") is not None


def have_statsmodels():
    try:
        import statsmodels.datasets  # noqa: F401
        return True
    except ImportError:
        return False


def load(source, dataset, columns, tmp):
    """The series as an (N, C) float array, oldest row first."""
    if source == "R":
        path = os.path.join(tmp, dataset + ".csv")
        expr = ('x <- get("%s"); m <- as.matrix(x); if (is.null(colnames(m))) colnames(m) <- "x"; '
                'write.csv(m, "%s", row.names = FALSE)') % (dataset, path)
        subprocess.run(["Rscript", "-e", expr], check=True, capture_output=True)
        with open(path) as f:
            rows = list(csv.reader(f))
        header, body = rows[0], rows[1:]
        idx = [header.index(c) for c in columns] if columns else list(range(len(header)))
        return np.array([[float(r[i]) for i in idx] for r in body], dtype=np.float64)
    import statsmodels.datasets as smd
    df = getattr(smd, dataset).load_pandas().data
    return df[columns].to_numpy(dtype=np.float64)


def delay_states(values, delays):
    """Row t - D + 1 = rows t-D+1..t flattened (oldest first), t = D-1..N-1."""
    n, c = values.shape
    return np.stack([values[t - delays + 1:t + 1].ravel() for t in range(delays - 1, n)])


def write_csv(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(",".join(repr(float(v)) for v in r) + "\n")


def cli_json(cli, server, *args):
    out = subprocess.run([cli, "--server", server, *args, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def cli(cli_path, server, *args):
    subprocess.run([cli_path, "--server", server, *args], check=True, capture_output=True, text=True)


def gaussian_gram(a, b, sigma):
    d2 = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
    return np.exp(-np.maximum(d2, 0) / (2 * sigma * sigma))


def kernel_ridge(xtr, ytr, xte, sigma, max_pairs=2000):
    """Batch kernel ridge, centered targets, ridge chosen on the last quarter of the training
    pairs (contiguous: shuffled pairs leak on time series), then refitted on all of them (the
    last max_pairs training pairs: the n^3 solve stays under a few seconds)."""
    xtr, ytr = xtr[-max_pairs:], ytr[-max_pairs:]
    n = len(xtr)
    cut = n - max(n // 4, 1)
    best, best_err = None, math.inf
    for lam in 10.0 ** np.arange(-6, 2):
        k = gaussian_gram(xtr[:cut], xtr[:cut], sigma)
        mu = ytr[:cut].mean(0)
        alpha = np.linalg.solve(k + lam * cut * np.eye(cut), ytr[:cut] - mu)
        err = ((gaussian_gram(xtr[cut:], xtr[:cut], sigma) @ alpha + mu - ytr[cut:]) ** 2).mean()
        if err < best_err:
            best, best_err = lam, err
    mu = ytr.mean(0)
    alpha = np.linalg.solve(gaussian_gram(xtr, xtr, sigma) + best * n * np.eye(n), ytr - mu)
    return gaussian_gram(xte, xtr, sigma) @ alpha + mu


def slowest_period(koopman, rows):
    """The period of the oscillatory mode with the longest timescale among the periods the data
    can show (at most half the `rows` learned: two cycles seen); NaN: none."""
    best, best_t = math.nan, -1.0
    for p, t in zip(koopman.get("periods", []), koopman.get("timescales", [])):
        if p is None or not math.isfinite(p) or p > rows / 2:
            continue
        t = math.inf if t is None else t  # null: |mu| >= 1
        if t > best_t:
            best, best_t = p, t
    return best


def first_cycle(koopman):
    """The headline's first cycle: (period, share of the observed variance with its harmonics);
    (NaN, NaN) when the reply has none."""
    cycles = koopman.get("headline", {}).get("cycles", [])
    if not cycles:
        return float("nan"), float("nan")
    c = cycles[0]
    return float(c["period"]), float(c.get("group_share", c.get("share", float("nan"))))


def ar_period(coef, delays, c):
    """The least-squares AR's slowest oscillation (scalar series: the companion matrix's complex
    eigenvalue of largest modulus); NaN for multichannel series or none."""
    if c != 1:
        return math.nan
    a = coef[::-1, 0]  # newest delay first
    comp = np.zeros((delays, delays))
    comp[0] = a
    comp[1:, :-1] = np.eye(delays - 1)
    ev = np.linalg.eigvals(comp)
    ev = ev[np.abs(ev.imag) > 1e-9]
    if len(ev) == 0:
        return math.nan
    mu = ev[np.argmax(np.abs(ev))]
    return float(2 * np.pi / abs(np.angle(mu)))


def rmse(pred, truth, scale):
    return float(np.sqrt((((pred - truth) / scale) ** 2).mean()))


def iterate_ar(coef, state, horizon, c):
    """The least-squares AR's forecasts of the next `horizon` rows from a delay vector (oldest
    row first), each fed back as the newest row: (horizon, c)."""
    out = np.empty((horizon, c))
    s = state.copy()
    for h in range(horizon):
        out[h] = np.concatenate([[1.0], s]) @ coef
        s = np.concatenate([s[c:], out[h]])
    return out


def multi_step(values, states, delays, season, n_train, f, start, coef, scale):
    """Per horizon h = 1..season, the RMSE (standardized units) of the model's h-step forecasts,
    of seasonal naive (row t + h forecast by row t + h - season, the last season seen) and of the
    iterated least-squares AR, from the same origins: rows t = n_train - 1 .. n - 1 - season (every
    forecast lies in the test rows)."""
    n, c = values.shape
    origins = np.arange(n_train - 1, n - season)
    out = {"horizon": [], "model": [], "seasonal_naive": [], "ar_iterated": [], "persistence": []}
    ar = np.stack([iterate_ar(coef, states[t - delays + 1], season, c) for t in origins])  # (origins, H, c)
    for h in range(1, season + 1):
        truth = values[origins + h]
        out["horizon"].append(h)
        out["model"].append(rmse(f[origins - start, h - 1, :], truth, scale))
        out["seasonal_naive"].append(rmse(values[origins + h - season], truth, scale))
        out["ar_iterated"].append(rmse(ar[:, h - 1, :], truth, scale))
        out["persistence"].append(rmse(values[origins], truth, scale))
    out["origins"] = len(origins)
    return out


def run_series(name, values, delays, cli_path, server, tmp, model, season=None):
    """The protocol on one series; returns the scores and the forecasts. With `season`, the
    forecasts are asked for horizons 1..season and scored per horizon (multi_step)."""
    n, c = values.shape
    n_train = int(0.8 * n)
    states = delay_states(values, delays)        # state i ends at row i + D - 1
    first_test_state = n_train - delays          # its forecast is row n_train
    train_states = states[:n_train - delays + 1]  # rows 0..n_train-1
    pairs = len(train_states) - 1
    warmup = max(20, min(1000, pairs))
    cli(cli_path, server, "model", "create", model, "--dim", str(c), "--delays", str(delays), "--warmup",
        str(warmup))
    train_csv = os.path.join(tmp, model + "-train.csv")
    all_csv = os.path.join(tmp, model + "-all.csv")
    write_csv(train_csv, values[:n_train])
    write_csv(all_csv, values)
    cli(cli_path, server, "ingest", model, "--csv", train_csv, "--trajectory", "--quiet")
    cli(cli_path, server, "refresh", model, "--wait")
    reply = cli_json(cli_path, server, "forecast", model, "--series", all_csv, "--horizon", str(season or 1))
    sigma = cli_json(cli_path, server, "dictionary", model).get("sigma")
    koopman = cli_json(cli_path, server, "koopman", model, "--top", "16")
    f = np.array(reply["forecasts"], dtype=np.float64)  # (rows - start, H, C): entry i forecasts row start+i+1
    start = reply["start"]
    assert start == delays - 1, reply["start"]
    # One-step forecasts of rows n_train..n-1, made at rows n_train-1..n-2.
    idx = np.arange(n_train - 1, n - 1) - start
    model_pred = f[idx, 0, :]
    truth = values[n_train:]
    last = values[n_train - 1:n - 1]
    scale = values[:n_train].std(0)
    scale[scale == 0] = 1.0
    # Baselines on the training pairs (state i -> row i + D).
    xtr = states[:pairs]
    ytr = states[1:pairs + 1, -c:]
    xte = states[first_test_state:len(states) - 1]
    z = np.hstack([np.ones((len(xtr), 1)), xtr])
    coef, *_ = np.linalg.lstsq(z, ytr, rcond=None)
    ar_pred = np.hstack([np.ones((len(xte), 1)), xte]) @ coef
    # Kernel ridge with the model's kernel: its bandwidth is in the model's scaled units, so the
    # delay vectors are scaled by the model's frozen input scaler first (targets stay raw).
    scaling = cli_json(cli_path, server, "model", "describe", model).get("input_scaling") or {}
    center = np.array(scaling.get("center") or [0.0] * states.shape[1])
    spread = np.array(scaling.get("scale") or [1.0] * states.shape[1])
    krr_pred = (kernel_ridge((xtr - center) / spread, ytr, (xte - center) / spread, sigma) if sigma
                else np.full_like(ar_pred, np.nan))
    cli(cli_path, server, "model", "delete", model)
    r = {
        "series": name, "rows": n, "channels": c, "delays": delays, "train_pairs": pairs,
        "test_rows": len(truth), "sigma": sigma,
        "rmse": rmse(model_pred, truth, scale),
        "persistence": rmse(last, truth, scale),
        "ar": rmse(ar_pred, truth, scale),
        "krr": rmse(krr_pred, truth, scale),
        "skill": reply["skill"],
        "method": reply.get("method", ""),
        "estimator": koopman["spectrum"]["estimator"],
        "ready": bool(koopman["spectrum"].get("ready", False)),
        "period": slowest_period(koopman, n_train),
        "first_cycle": first_cycle(koopman)[0],
        "first_cycle_share": first_cycle(koopman)[1],
        "cycles": koopman.get("headline", {}).get("cycles", []),
        "shares": koopman.get("shares", []),
        "periods": koopman.get("periods", []),
        "timescales": koopman.get("timescales", []),
        "nonstationary": bool(koopman.get("headline", {}).get("nonstationary", False)),
        "data_share": koopman["spectrum"].get("data_share", 0.0),
        "epochs": koopman["spectrum"].get("epochs", 0),
        "views_warning": bool(koopman["spectrum"].get("slowest_timescales", {}).get("warning", False)),
        "views_diagnostic": koopman["spectrum"].get("slowest_timescales", {}).get("diagnostic", ""),
        "scaled": scaling.get("mode") == "auto" and bool(scaling.get("frozen")),
        "ar_period": ar_period(coef[1:], delays, c),
    }
    r["ratio_persistence"] = r["rmse"] / r["persistence"]
    r["ratio_ar"] = r["rmse"] / r["ar"]
    r["step_methods"] = reply.get("step_methods", [])
    r["horizon_skill"] = reply.get("horizon_skill", [])
    if season:
        r["season"] = season
        r["multi_step"] = multi_step(values, states, delays, season, n_train, f, start, coef, scale)
    eig = np.array([complex(e["re"], e["im"]) for e in koopman.get("eigenvalues", [])])
    return r, {"values": values, "pred": model_pred, "ar": ar_pred, "last": last, "n_train": n_train,
               "eigenvalues": eig, "periods": koopman.get("periods", [])}


def available_series(names=None):
    out = []
    for s in SERIES:
        if names and s[0] not in names:
            continue
        if s[1] == "R" and not have_r():
            continue
        if s[1] == "statsmodels" and not have_statsmodels():
            continue
        out.append(s)
    return out


def run_all(cli_path, server, series, tmp):
    results, traces = [], {}
    for i, (name, source, dataset, columns, delays, cycle) in enumerate(series):
        values = load(source, dataset, columns, tmp)
        r, t = run_series(name, values, delays, cli_path, server, tmp, "real%d" % i, SEASON.get(name))
        r["cycle"] = cycle
        results.append(r)
        traces[name] = t
    return results, traces


def table(results):
    lines = ["| series | rows x channels | delays | train pairs | cmestream | persistence | AR (LS) | "
             "kernel ridge | vs persistence | vs AR | live skill ratio | spectrum | slowest period (known) | "
             "first cycle (share) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append("| %s | %d x %d | %d | %d | %.4g | %.4g | %.4g | %.4g | %.3f | %.3f | %s | %s%s | %.3g (%s) | %.4g (%.2f) |" % (
            r["series"], r["rows"], r["channels"], r["delays"], r["train_pairs"], r["rmse"], r["persistence"],
            r["ar"], r["krr"], r["ratio_persistence"], r["ratio_ar"],
            "%.3f" % r["skill"]["ratio"] if r["skill"]["ratio"] is not None else "-",
            r["estimator"], ", ready" if r["ready"] else "", r["period"],
            "%g" % r["cycle"] if r["cycle"] else "-", r["first_cycle"], r["first_cycle_share"]))
    g = math.exp(np.mean([math.log(r["ratio_ar"]) for r in results]))
    lines.append("")
    lines.append("Geometric mean of the RMSE ratios vs AR: %.3f; largest %.3f; largest vs persistence %.3f." % (
        g, max(r["ratio_ar"] for r in results), max(r["ratio_persistence"] for r in results)))
    return "\n".join(lines), g


def horizon_table(results):
    """Per seasonal series, the RMSE at h = 1, season / 2 and season of cmestream, seasonal naive,
    the iterated AR and persistence; then the geometric means at h = one season."""
    seasonal = [r for r in results if r.get("multi_step")]
    if not seasonal:
        return "", math.nan, math.nan
    lines = ["| series | season | origins | h | cmestream | seasonal naive | AR iterated | persistence | "
             "vs seasonal naive | vs AR | served |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in seasonal:
        m = r["multi_step"]
        season = r["season"]
        for h in sorted({1, max(1, season // 2), season}):
            i = h - 1
            lines.append("| %s | %d | %d | %d | %.4g | %.4g | %.4g | %.4g | %.3f | %.3f | %s |" % (
                r["series"], season, m["origins"], h, m["model"][i], m["seasonal_naive"][i], m["ar_iterated"][i],
                m["persistence"][i], m["model"][i] / m["seasonal_naive"][i], m["model"][i] / m["ar_iterated"][i],
                r["step_methods"][i] if i < len(r["step_methods"]) else "-"))
    g_sn = math.exp(np.mean([math.log(r["multi_step"]["model"][-1] / r["multi_step"]["seasonal_naive"][-1])
                             for r in seasonal]))
    g_ar = math.exp(np.mean([math.log(r["multi_step"]["model"][-1] / r["multi_step"]["ar_iterated"][-1])
                             for r in seasonal]))
    lines.append("")
    lines.append("At h = one season, geometric mean of the RMSE ratios: %.3f vs seasonal naive, %.3f vs the "
                 "iterated AR (%d series)." % (g_sn, g_ar, len(seasonal)))
    return "\n".join(lines), g_sn, g_ar


def plot(traces, path, scalar="sunspot.month", multi="Seatbelts", channel=0, labels=("month", "month")):
    """Forecasts vs truth and the Koopman spectrum: a scalar series (top) and one channel of a
    multichannel series (bottom), each beside its eigenvalues on the unit circle."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [n for n in (scalar, multi) if n in traces]
    fig, axes = plt.subplots(len(rows), 2, figsize=(11, 3.6 * len(rows)), squeeze=False,
                             gridspec_kw={"width_ratios": [3, 1]})
    for k, name in enumerate(rows):
        t = traces[name]
        n_train, truth = t["n_train"], t["values"]
        c = channel if name == multi else 0
        ax = axes[k][0]
        x = np.arange(len(truth))
        lo = max(0, n_train - (len(t["pred"]) // 3 if len(truth) > 1000 else 3 * len(t["pred"])))
        ax.plot(x[lo:], truth[lo:, c], color="0.3", lw=1.0, label="truth")
        ax.plot(x[n_train:], t["pred"][:, c], color="C3", lw=1.0, label="cmestream one-step forecast")
        ax.plot(x[n_train:], t["ar"][:, c], color="C0", lw=0.8, ls="--", label="least-squares AR")
        ax.plot(x[n_train:], t["last"][:, c], color="C2", lw=0.6, ls=":", label="persistence")
        ax.axvline(n_train, color="0.6", lw=0.8)
        ax.set_xlabel("row (%s)" % labels[k])
        what = name if truth.shape[1] == 1 else "%s, channel %d of %d" % (name, c + 1, truth.shape[1])
        ax.set_title("%s: one-step forecasts of the last 20 %%" % what, fontsize=10)
        ax.legend(loc="upper left", fontsize=7)
        ax = axes[k][1]
        z = np.exp(1j * np.linspace(0, 2 * np.pi, 200))
        ax.plot(z.real, z.imag, color="0.7", lw=0.8)
        e = t["eigenvalues"]
        ax.scatter(e.real, e.imag, s=14, color="C3")
        # The three least damped oscillations the data can show (period <= half the rows learned).
        shown = sorted([(abs(mu), mu, p) for mu, p in zip(e, t["periods"])
                        if p is not None and np.isfinite(p) and mu.imag > 0 and p <= n_train / 2],
                       key=lambda v: -v[0])[:3]
        for _, mu, p in shown:
            ax.annotate("%.1f" % p, (mu.real, mu.imag), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_aspect("equal")
        ax.set_xlim(-1.15, 1.15)
        ax.set_ylim(-1.15, 1.15)
        ax.set_title("Koopman eigenvalues (periods, rows)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--daemon", default="build/service/cmestreamd")
    ap.add_argument("--cli", default="build/client/cmestream")
    ap.add_argument("--series", default="", help="comma-separated names (default: all available)")
    ap.add_argument("--json", default="")
    ap.add_argument("--plot", default="", help="PNG: sunspot.month and Seatbelts forecasts vs truth, with spectra")
    args = ap.parse_args()
    series = available_series([s for s in args.series.split(",") if s])
    if not series:
        print("no data: install r-base-core and/or python3-statsmodels (scripts/install-deps.sh)")
        return 77
    from cmestream.testing import Daemon
    with tempfile.TemporaryDirectory(prefix="cmestream-real-") as tmp:
        daemon = Daemon(args.daemon, os.path.join(tmp, "data"), refresh_interval=3600).start()
        try:
            results, traces = run_all(args.cli, daemon.grpc_target, series, tmp)
        finally:
            daemon.stop()
    text, _ = table(results)
    print(text)
    text, _, _ = horizon_table(results)
    if text:
        print()
        print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        plot(traces, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
