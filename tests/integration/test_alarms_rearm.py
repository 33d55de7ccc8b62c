"""An export whose alarm monitor an earlier release wrote, imported into the real cmestreamd
(docs/algorithms.md §12.8 "Older monitors re-arm", CONTRIBUTING.md "Binary formats"): a model of
three channels at alarm_rate 25 is fed the 4,000 pairs of the fixture's stream, exported, and its
alarm monitor (object ALRM v12) replaced by the d = 3 ALRM v5 monitor of
tests/core/alarms/older_monitors_fixture.inc (written by the release before, 11 alarms kept);
the enclosing objects' lengths and the file's CRC32C are fixed up. Imported, the model keeps
every stored alarm and its alarm count; ModelInfo, `model describe` (text and JSON) and, after a
restart, the daemon's start log say "alarm monitor from format v5 re-armed at pair 4000"; the
monitor re-arms 64 + 200 pairs later.

Environment (ctest): CMESTREAMD, CMESTREAM, PYTHONPATH as the others.
"""
import base64
import json
import os
import re
import struct
import subprocess
import tempfile
import unittest

import numpy as np

from cmestream import Client
from cmestream.testing import Daemon
from masked_crc import crc32c, mask  # this folder

CMESTREAMD = os.environ.get("CMESTREAMD", "build/service/cmestreamd")
CMESTREAM = os.environ.get("CMESTREAM", "build/client/cmestream")
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "core", "alarms",
                        "older_monitors_fixture.inc")
NOTE = "alarm monitor from format v5 re-armed at pair 4000"


def fixture(name):
    """The bytes of one entry of older_monitors_fixture.inc."""
    with open(FIXTURES) as f:
        text = f.read()
    m = re.search(r'\{"' + name + r'", (\d+), (\d+), (\d+), (\d+),\n((?:\s*"[^"]*"\}?,?\n)+)', text)
    b64 = "".join(re.findall(r'"([^"]*)"', m.group(5)))
    return base64.b64decode(b64), int(m.group(4))


def splice_monitor(export: bytes, old: bytes) -> bytes:
    """The export with its ALRM object replaced by `old`: the objects around it (tag, u32
    version, u64 body length, body) grow by the difference, and the footer's CRC32C is redone."""
    body = export[:-4]
    at = body.find(b"ALRM" + struct.pack("<I", 12))
    assert at >= 0, "no ALRM v12 object in the export"
    (length,) = struct.unpack_from("<Q", body, at + 8)
    end = at + 16 + length
    delta = len(old) - (16 + length)
    out = bytearray(body[:at] + old + body[end:])
    # Every object header before the monitor whose body spans it.
    for p in range(at):
        tag = body[p:p + 4]
        if not all(0x41 <= c <= 0x5A for c in tag):
            continue
        (version,) = struct.unpack_from("<I", body, p + 4)
        (n,) = struct.unpack_from("<Q", body, p + 8)
        if 1 <= version <= 64 and p + 16 + n >= end and p + 16 + n <= len(body):
            struct.pack_into("<Q", out, p + 8, n + delta)
    return bytes(out) + struct.pack("<I", mask(crc32c(bytes(out))))


def ou(n, a, seed, change=None, a1=None):
    rng = np.random.default_rng(seed)
    x = np.zeros(n)
    for t in range(1, n):
        at = a1 if change is not None and t > change else a
        x[t] = at * x[t - 1] + np.sqrt(1 - at * at) * rng.normal()
    return x


class AlarmsRearmTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.data = os.path.join(self.tmp.name, "data")
        self.daemons = []

    def tearDown(self):
        for d in self.daemons:
            d.stop()
        self.tmp.cleanup()

    def start(self):
        d = Daemon(CMESTREAMD, self.data, refresh_interval=3600).start()
        self.daemons.append(d)
        return d

    def test_an_older_monitor_re_arms_with_its_records(self):
        old, records = fixture("d3v5")
        self.assertEqual(old[4], 5)
        rows = np.stack([ou(4601, 0.9, 1), ou(4601, 0.9, 2, 2000, 0.5), ou(4601, 0.8, 3)], axis=1)
        d = self.start()
        with Client(d.grpc_target) as c:
            c.create_model("fresh", dim=3, alarm_rate=25)
            c.ingest_trajectory("fresh", rows[:4001])
            data = splice_monitor(c.export_model("fresh"), old)
            info = c.import_model(data, name="upgraded")
            self.assertEqual(info.alarms.rearmed, NOTE)
            self.assertEqual(info.alarms.alarms_total, 11)
            self.assertEqual(info.alarms.armed_at, -1)
            self.assertIsNone(c.describe("fresh").alarms.rearmed)
            listed = c.list_alarms("upgraded")
            self.assertEqual(len(listed.alarms), records)
            self.assertEqual(listed.dropped, 0)
            text = subprocess.run([CMESTREAM, "--server", d.grpc_target, "model", "describe", "upgraded"],
                                  capture_output=True, text=True, check=True).stdout
            self.assertIn(NOTE, text)
            js = json.loads(subprocess.run(
                [CMESTREAM, "--server", d.grpc_target, "model", "describe", "upgraded", "--json"],
                capture_output=True, text=True, check=True).stdout)
            self.assertEqual(js["alarms"]["rearmed"], NOTE)
            self.assertNotIn("rearmed", json.loads(subprocess.run(
                [CMESTREAM, "--server", d.grpc_target, "model", "describe", "fresh", "--json"],
                capture_output=True, text=True, check=True).stdout)["alarms"])
        self.assertEqual(d.stop(), 0)
        d = self.start()
        with open(d.log_path, errors="replace") as f:
            self.assertIn(f"cmestreamd: model 'upgraded': {NOTE}\n", f.read())
        with Client(d.grpc_target) as c:
            self.assertEqual(c.describe("upgraded").alarms.rearmed, NOTE)
            c.ingest_trajectory("upgraded", rows[4000:4601])
            after = c.describe("upgraded").alarms
            # The rebuilt forecast fits first at 64 pairs; the tests arm on their 200th scored pair.
            self.assertEqual(after.armed_at, 4000 + 64 + 199)
            self.assertGreaterEqual(after.alarms_total, 11)
            self.assertEqual(c.list_alarms("upgraded").alarms[:records], listed.alarms)


if __name__ == "__main__":
    unittest.main()
