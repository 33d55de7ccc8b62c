#!/usr/bin/python3
"""Forecast skill of default 1-channel models on NAB's real series, at several forecast_features
(docs/benchmarks.md "Forecast features sized to the input").

usage: PYTHONPATH=build/python:client/python /usr/bin/python3 scripts/nab_forecast_skill.py \
           PATH/TO/NAB DAEMON F1,F2,... [--json OUT]
Streams every NAB data file through one daemon, one `--dim 1` model per file and per F (F = 0:
the daemon's default), refreshes it and reads the live skill (each pair scored before it was
learned) of the regression, its linear part (the AR on the same state) and persistence at
h = 1 and h = 12, and the candidate `forecast` serves; prints geometric means over the files,
compared with the first F given.
"""
import csv
import glob
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np
from cmestream import Client
from cmestream.testing import Daemon

if len(sys.argv) not in (4, 6) or (len(sys.argv) == 6 and sys.argv[4] != "--json"):
    sys.exit(__doc__)
nab = os.path.join(sys.argv[1], "data")
daemon, feats = sys.argv[2], [int(f) for f in sys.argv[3].split(",")]
out = sys.argv[5] if len(sys.argv) == 6 else None
files = sorted(os.path.relpath(p, nab) for p in glob.glob(os.path.join(nab, "*", "*.csv")))
tmp = tempfile.mkdtemp(prefix="sf-", dir=os.environ.get("TMPDIR"))
d = Daemon(daemon, os.path.join(tmp, "d"), refresh_interval=3600).start()
rows = []
try:
    c = Client(d.grpc_target, timeout=300)
    for i, rel in enumerate(files):
        with open(os.path.join(nab, rel), newline="") as f:
            values = np.array([float(r["value"]) for r in csv.DictReader(f)])
        for F in feats:
            name = f"m{i}-f{F}"
            c.create_model(name, dim=1, **({"forecast_features": F} if F > 0 else {}))
            c.ingest_trajectory(name, values.reshape(-1, 1), producer="p")
            c.refresh(name)
            r = c.forecast(name, window=values[-1:].reshape(1, 1), horizon=12)
            hs = {h.horizon: h for h in r.horizon_skill}
            rec = {"file": rel, "F": F, "pairs": len(values) - 1,
                   "ff": c.describe(name).config.forecast_features}
            for h in (1, 12):
                s = hs.get(h)
                if s is None:
                    continue
                served = {"regression": s.rmse_regression, "linear": s.rmse_linear,
                          "persistence": s.rmse_persistence}[s.method]
                rec[f"h{h}"] = dict(reg=s.rmse_regression, lin=s.rmse_linear, per=s.rmse_persistence,
                                    served=served, method=s.method, pairs=s.pairs)
            rows.append(rec)
            c.delete_model(name)
finally:
    d.stop()
    shutil.rmtree(tmp, ignore_errors=True)




if out:
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)


def gm(xs):
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def q(a, b):
    return a / b if b > 0 else None


base = feats[0]
by = {(r["file"], r["F"]): r for r in rows}
print(f"{len(files)} files; ratios are geometric means over files (a ratio with a 0 denominator left out)")
for F in feats:
    line = [f"F={F} (describe {sorted({r['ff'] for r in rows if r['F'] == F})})"]
    for h in (1, 12):
        rs = [r for r in rows if r["F"] == F and f"h{h}" in r]
        k = f"h{h}"
        worst = max((q(r[k]['served'], by[(r['file'], base)][k]['served']) or 0, r['file']) for r in rs)
        line.append(f"h{h}: reg/per {gm([q(r[k]['reg'], r[k]['per']) for r in rs]):.4f}"
                    f" reg/lin {gm([q(r[k]['reg'], r[k]['lin']) for r in rs]):.4f}"
                    f" served/per {gm([q(r[k]['served'], r[k]['per']) for r in rs]):.4f}"
                    f" served/lin {gm([q(r[k]['served'], r[k]['lin']) for r in rs]):.4f}"
                    f" reg vs F={base} {gm([q(r[k]['reg'], by[(r['file'], base)][k]['reg']) for r in rs]):.4f}"
                    f" served vs F={base} {gm([q(r[k]['served'], by[(r['file'], base)][k]['served']) for r in rs]):.4f}"
                    f" served worst vs F={base} {worst[0]:.4f} ({worst[1]})"
                    f" reg-served {sum(r[k]['method'] == 'regression' for r in rs)}/{len(rs)}")
    print("\n  ".join(line))
