"""Two views of one model must agree: the figures `describe` summarizes (the sub-views' fit
summaries, the alarm status) against the replies of the queries they summarize, on one model
after a refresh with no pair in between: the forecast summary's skill_ratio against the forecast
reply's skill, the lags summary's CK deviation against the cktest reply, the alarm count against
the alarm list.

Environment (ctest): CMESTREAMD, PYTHONPATH as the others.
"""
import os
import tempfile
import unittest

import grpc
import numpy as np

from cmestream import Client
from cmestream.client import CmestreamError
from cmestream.testing import Daemon

CMESTREAMD = os.environ.get("CMESTREAMD", "build/service/cmestreamd")


class SummariesAgreeTest(unittest.TestCase):
    def test_describe_matches_the_replies(self):
        rng = np.random.default_rng(2)
        n = 4000
        x = np.zeros((n, 2))
        for t in range(1, n):  # two OU channels, the second with a rate change at row 2500
            a = np.array([0.95, 0.9 if t < 2500 else 0.5])
            x[t] = a * x[t - 1] + np.sqrt(1 - a * a) * rng.normal(size=2)
        x[:, 1] *= 5  # a second sensor in other units: scaled per channel (docs/algorithms.md §1.13)
        with tempfile.TemporaryDirectory() as tmp:
            d = Daemon(CMESTREAMD, os.path.join(tmp, "data"), refresh_interval=3600).start()
            try:
                with Client(d.grpc_target) as c:
                    c.create_model("m", dim=2, lags=[1, 2, 4], max_dict=60, rff_features=32,
                                   auto_sigma_warmup=500)
                    c.ingest_trajectory("m", x, producer="p")
                    c.refresh("m", wait=True)
                    info = c.describe("m")
                    subs = {s.name: s for s in info.sub_views}
                    fc = c.forecast("m", window=x[-1:], horizon=1)
                    self.assertGreater(fc.skill.pairs, 0)
                    self.assertEqual(subs["forecast"].summary.figures["skill_ratio"], fc.skill.ratio)
                    self.assertEqual(subs["forecast"].summary.figures["skill_pairs"], fc.skill.pairs)
                    ck = c.cktest("m")
                    primary = ck.koopman if ck.estimator == "koopman" and ck.koopman is not None else ck.counts
                    self.assertEqual(subs["lags"].summary.figures["ck_max_deviation"], primary.max_deviation)
                    self.assertEqual(subs["lags"].summary.figures["ck_max_deviation_stderr"],
                                     primary.max_deviation_stderr)
                    alarms = c.list_alarms("m")
                    self.assertEqual(info.alarms.alarms_total, len(alarms.alarms) + alarms.dropped)
                    self.assertEqual(info.alarms.armed_at, alarms.armed_at)
                    self.assertGreaterEqual(info.alarms.alarms_total, 1)  # the rate change
                    self.assertEqual(alarms.alarms[-1].channels[0], 1)
                    # Where the stream gives no CK test (the same OU channels in one unit, no
                    # metastable sets with mass at every lag), summary and reply say so alike.
                    c.create_model("u", dim=2, lags=[1, 2, 4], max_dict=60, rff_features=32,
                                   auto_sigma_warmup=500, scale="none")
                    c.ingest_trajectory("u", x / [1, 5], producer="p")
                    c.refresh("u", wait=True)
                    lags = {s.name: s for s in c.describe("u").sub_views}["lags"].summary
                    if lags.termination == "no_ck_test":
                        with self.assertRaises(CmestreamError) as e:
                            c.cktest("u")
                        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
                        self.assertIn(lags.message, str(e.exception))
                    else:
                        ck = c.cktest("u")
                        self.assertIn(ck.estimator, ("koopman", "counts"))
            finally:
                d.stop()


if __name__ == "__main__":
    unittest.main()
