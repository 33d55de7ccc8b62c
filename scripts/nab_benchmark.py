#!/usr/bin/python3
"""Scores cmestream's change alarms on the Numenta Anomaly Benchmark (NAB) with NAB's own scorer.

    /usr/bin/python3 scripts/nab_benchmark.py PATH/TO/NAB [--daemon build/service/cmestreamd]
        [--scratch DIR] [--detector cmestream] [--keep]

PATH/TO/NAB is a NAB checkout (data/, labels/, config/, nab/, run.py and results/null/ with the
null detector's totals). It is only read: the script copies it into a scratch folder, writes its
results there and runs NAB's scorer (`run.py --score --normalize`) in that copy.

What it does, per CSV file under data/<category>/: starts one real cmestreamd (loopback, port 0,
a temporary data directory), creates one `--dim 1` model with default options, streams the
file's values in their recorded order as one trajectory, reads the model's alarms
(ListAlarms) and checks the model did not fail (ModelInfo.failure unset) and the daemon did not
exit. Each alarm is one detection: anomaly_score 1 on the row that completes the alarming pair
(alarm index + 1, or index + (D-1)*S + 1 for a model with D delays of stride S), 0 elsewhere;
the detector's threshold is 0.5 for the three profiles.

Prints: the three normalized NAB profile scores (standard, reward_low_FP_rate,
reward_low_FN_rate), the alarm count, and the false alarms per 10^4 pairs on the stationary
stretches: every pair of the artificialNoAnomaly files plus, in every other file, the pairs
completed before the file's first label window begins (also given counting only pairs after
the detector armed). Exit code 0 when no model failed and the daemon never exited on its own.

Needs build/python on PYTHONPATH (the generated stubs) and client/python (done below, as the
tests do), numpy, and pandas for NAB's scorer (Debian: python3-pandas).
"""
import argparse
import csv
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "build", "python"), os.path.join(ROOT, "client", "python")]

import numpy as np  # noqa: E402

from cmestream import Client  # noqa: E402
from cmestream.testing import Daemon  # noqa: E402

PROFILES = ("standard", "reward_low_FP_rate", "reward_low_FN_rate")
TIME_FORMATS = ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")


def parse_time(text):
    for fmt in TIME_FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            pass
    raise ValueError(f"unknown timestamp format: {text!r}")


def model_name(relpath):
    category, base = relpath.split("/")
    return f"{category}.{os.path.splitext(base)[0]}".replace("_", "-")[:120]


def read_file(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [r["timestamp"] for r in rows], np.array([float(r["value"]) for r in rows])


def score_with_nab(scratch, detector, optimize=False):
    """NAB's scores of `detector`'s results: at threshold 0.5, or with `optimize` at the
    threshold NAB's optimizer picks per profile (which it writes to config/thresholds.json)."""
    thresholds_path = os.path.join(scratch, "config", "thresholds.json")
    with open(thresholds_path) as f:
        thresholds = json.load(f)
    thresholds[detector] = {p: {"score": 0.0, "threshold": 0.5} for p in PROFILES}
    with open(thresholds_path, "w") as f:
        json.dump(thresholds, f, indent=4, sort_keys=True)
    steps = ["--optimize"] if optimize else []
    proc = subprocess.run([sys.executable, "run.py", "-d", detector, *steps, "--score", "--normalize",
                           "--skipConfirmation", "-n", "1"],
                          cwd=scratch, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"NAB's scorer failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                 f"{proc.stderr[-3000:]}")
    scores = {}
    for m in re.finditer(r"Final score for '(\S+)' detector on '(\S+)' profile = (-?[0-9.]+)",
                         proc.stdout):
        if m.group(1) == detector:
            scores[m.group(2)] = float(m.group(3))
    return scores


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("nab", help="the NAB folder (data/, labels/, config/, nab/, run.py, results/null/)")
    ap.add_argument("--daemon", default=os.path.join(ROOT, "build", "service", "cmestreamd"))
    ap.add_argument("--scratch", help="where to copy NAB and write results (default: a temp dir)")
    ap.add_argument("--detector", default="cmestream", help="the detector's name in NAB's results")
    ap.add_argument("--alarm-rate", type=float,
                    help="diagnostics only: create the models with this alarm_rate (what is scored "
                         "as the product's figure is the default, without this flag)")
    ap.add_argument("--scores", action="store_true",
                    help="also score the per-pair anomaly scores (detector NAME-score; NAB splits names at '_') at the "
                         "threshold NAB's optimizer picks per profile (a few minutes more)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--json", help="also write the figures, per file too, to this JSON file")
    args = ap.parse_args()

    nab = os.path.abspath(args.nab)
    data = os.path.join(nab, "data")
    files = sorted(os.path.relpath(p, data) for p in glob.glob(os.path.join(data, "*", "*.csv")))
    if not files:
        sys.exit(f"no CSV files under {data}/*/")
    with open(os.path.join(nab, "labels", "combined_windows.json")) as f:
        windows = json.load(f)

    tmp = tempfile.mkdtemp(prefix="cmestream-nab-")
    scratch = os.path.abspath(args.scratch) if args.scratch else os.path.join(tmp, "nab")
    if os.path.exists(scratch):
        shutil.rmtree(scratch)
    shutil.copytree(nab, scratch, ignore=shutil.ignore_patterns("*.pyc", "__pycache__"))
    out_root = os.path.join(scratch, "results", args.detector)
    if os.path.exists(out_root):
        shutil.rmtree(out_root)

    problems, notes, per_file = [], [], {}
    total_alarms = total_pairs = 0
    stat_pairs = stat_alarms = stat_armed_pairs = stat_armed_alarms = 0
    t0 = time.monotonic()
    d = Daemon(args.daemon, os.path.join(tmp, "daemon"), refresh_interval=3600).start()
    try:
        c = Client(d.grpc_target, timeout=300)
        for rel in files:
            name = model_name(rel)
            stamps, values = read_file(os.path.join(data, rel))
            extra = {"alarm_rate": args.alarm_rate} if args.alarm_rate else {}
            c.create_model(name, dim=1, **extra)
            ingested = c.ingest_trajectory(name, values.reshape(-1, 1), producer="nab",
                                           anomaly_scores=args.scores)
            if d.process.poll() is not None:
                problems.append(f"{rel}: the daemon exited ({d.process.returncode})")
                break
            info = c.describe(name)
            if info.failure is not None:
                problems.append(f"{rel}: the model failed: {info.failure.reason}")
            alarms = c.list_alarms(name)
            if alarms.dropped:
                # the model keeps its last 1,000 alarms; `dropped` also counts an alarm a test
                # raised on the pair another test's alarm was recorded on (counted, not listed)
                notes.append(f"{rel}: ListAlarms reports {alarms.dropped} dropped")
            delays = info.config.delays or 1
            stride = info.config.delay_stride or 1
            shift = (delays - 1) * stride + 1
            rows = sorted({a.index + shift for a in alarms.alarms if a.index + shift < len(values)})
            n_pairs = len(values) - 1 - (delays - 1) * stride
            total_alarms += len(rows)
            total_pairs += n_pairs

            # NAB results file
            times = [parse_time(s) for s in stamps]
            wins = [(parse_time(a), parse_time(b)) for a, b in windows.get(rel, [])]
            score = np.zeros(len(values))
            score[rows] = 1.0
            label = [int(any(a <= t <= b for a, b in wins)) for t in times]
            out_dir = os.path.join(out_root, os.path.dirname(rel))
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, f"{args.detector}_{os.path.basename(rel)}"), "w") as f:
                f.write("timestamp,value,anomaly_score,label\n")
                for s, v, a, lab in zip(stamps, values, score, label):
                    f.write(f"{s},{v!r},{a:g},{lab}\n")
            if args.scores:
                # The per-pair anomaly score on the row that completes each scored pair.
                per_row = np.zeros(len(values))
                keep = ingested.anomaly_index + shift < len(values)
                per_row[ingested.anomaly_index[keep] + shift] = ingested.anomaly_scores[keep]
                score_dir = os.path.join(scratch, "results", f"{args.detector}-score", os.path.dirname(rel))
                os.makedirs(score_dir, exist_ok=True)
                with open(os.path.join(score_dir, f"{args.detector}-score_{os.path.basename(rel)}"), "w") as f:
                    f.write("timestamp,value,anomaly_score,label\n")
                    for s, v, a, lab in zip(stamps, values, per_row, label):
                        f.write(f"{s},{v!r},{a:.9g},{lab}\n")

            # stationary stretch: the whole file without windows, else the rows before the first
            # window (a pair counts when the row completing it is before the window)
            if wins:
                first = min(a for a, _ in wins)
                end_row = next(i for i, t in enumerate(times) if t >= first)
            else:
                end_row = len(values)
            armed_row = alarms.armed_at + shift if alarms.armed_at >= 0 else len(values)
            sp = max(end_row - shift, 0)
            sa = sum(1 for r in rows if r < end_row)
            stat_pairs += sp
            stat_alarms += sa
            stat_armed_pairs += max(end_row - max(armed_row, shift), 0)
            stat_armed_alarms += sum(1 for r in rows if armed_row <= r < end_row)
            kinds = {}
            for a in alarms.alarms:
                kinds[a.kind] = kinds.get(a.kind, 0) + 1
            per_file[rel] = {"pairs": n_pairs, "alarms": len(rows), "kinds": kinds,
                             "armed_at": alarms.armed_at, "windows": len(wins),
                             "stationary_pairs": sp, "stationary_alarms": sa,
                             "alarm_list": [{"index": a.index, "row": a.index + shift, "kind": a.kind,
                                             "direction": a.direction, "score": a.score,
                                             "threshold": a.threshold, "onset": a.onset,
                                             "stationary": a.index + shift < end_row}
                                            for a in alarms.alarms]}
            print(f"  {rel}: {n_pairs} pairs, {len(rows)} alarms {kinds}, armed at "
                  f"{alarms.armed_at}, {sa} before the first window ({sp} pairs)", flush=True)
        c.close()
    finally:
        code = d.stop()
    if code not in (0, None):
        problems.append(f"the daemon exited with {code} at SIGTERM")
    stream_seconds = time.monotonic() - t0

    scores = score_with_nab(scratch, args.detector)
    optimized = score_with_nab(scratch, f"{args.detector}-score", optimize=True) if args.scores else {}
    fa = 1e4 * stat_alarms / max(stat_pairs, 1)
    fa_armed = 1e4 * stat_armed_alarms / max(stat_armed_pairs, 1)
    print(f"{len(per_file)} files, {total_pairs} pairs streamed in {stream_seconds:.1f} s, "
          f"{len(problems)} problem(s) (daemon aborts, failed models)")
    for p in problems:
        print("  " + p)
    for n in notes:
        print("  note: " + n)
    print("NAB normalized scores: " + ", ".join(f"{p} {scores.get(p, float('nan')):.1f}"
                                                 for p in PROFILES))
    if optimized:
        print("NAB normalized scores of the per-pair anomaly score, at the threshold NAB's optimizer "
              "picks per profile: " + ", ".join(f"{p} {optimized.get(p, float('nan')):.1f}" for p in PROFILES))
    print(f"alarms: {total_alarms}")
    print(f"stationary stretches: {stat_alarms} alarms in {stat_pairs} pairs = {fa:.2f} per 10^4 "
          f"pairs ({stat_armed_alarms} in {stat_armed_pairs} armed pairs = {fa_armed:.2f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"scores": scores, "optimized_anomaly_scores": optimized, "alarms": total_alarms, "pairs": total_pairs,
                       "stationary": {"alarms": stat_alarms, "pairs": stat_pairs,
                                      "per_1e4": fa, "armed_alarms": stat_armed_alarms,
                                      "armed_pairs": stat_armed_pairs, "armed_per_1e4": fa_armed},
                       "problems": problems, "notes": notes, "files": per_file}, f, indent=1)
    if args.keep or args.scratch:
        print(f"results in {out_root}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
