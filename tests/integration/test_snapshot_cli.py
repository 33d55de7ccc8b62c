"""Snapshots with the real cmestreamd and the CLI: restart from the newest snapshot plus
the WAL tail after kill -9, fallback to the previous snapshot when the newest one is corrupt, and
moving a model between daemons with `cmestream export` / `cmestream import`.

Ground truth everywhere is an uninterrupted run on another daemon: learners are deterministic given
the config and the order of the pairs, so every path must reproduce its full learner-state digest
(GetModel with_state_digest) bit for bit, with exactly N samples (no loss, no duplicates).

Environment (ctest): CMESTREAMD, CMESTREAM, PYTHONPATH=<build>/python:client/python.
"""
import glob
import os
import signal
import subprocess
import tempfile
import time
import unittest

import grpc

from cmestream.v1 import cmestream_pb2 as pb
from cmestream.v1 import cmestream_pb2_grpc as pb_grpc
from cmestream.testing import Daemon

CLI = os.environ.get("CMESTREAM", "cmestream")
DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")
N = 4000
FIRST = 2500  # pairs ingested before the (first) snapshot


class SnapshotCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="cmestream-snap-")
        cls.dir = cls.tmp.name
        cls.csv = os.path.join(cls.dir, "duffing.csv")
        with open(cls.csv, "w") as f:
            subprocess.run([CLI, "simulate", "duffing", "--n", str(N), "--seed", "5"], stdout=f, check=True)
        cls.first = os.path.join(cls.dir, "first.csv")
        with open(cls.csv) as f, open(cls.first, "w") as g:
            g.writelines([line for line in f if not line.startswith("#")][:FIRST])
        # Reference: one uninterrupted run.
        ref = Daemon(DAEMON, os.path.join(cls.dir, "ref"), refresh_interval=0.2,
                     log_path=os.path.join(cls.dir, "ref.log"), extra_args=["--snapshot-interval", "0"]).start()
        try:
            cls._cli(ref, "model", "create", "duffing", "--dim", "2", "--dt", "0.25", "--max-dict", "120")
            cls._cli(ref, "ingest", "duffing", "--csv", cls.csv, "--producer", "p", "--batch", "250", "--quiet")
            cls.expected = cls._info(ref)
        finally:
            ref.stop()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @staticmethod
    def _cli(daemon, *args, check=True):
        p = subprocess.run([CLI, "--server", daemon.grpc_target, *args], capture_output=True, text=True, timeout=120)
        if check and p.returncode != 0:
            raise AssertionError(f"cmestream {' '.join(args)} exited {p.returncode}: {p.stderr}")
        return p

    @staticmethod
    def _info(d, name="duffing"):
        ch = grpc.insecure_channel(d.grpc_target)
        try:
            return pb_grpc.ModelServiceStub(ch).GetModel(pb.GetModelRequest(name=name, with_state_digest=True),
                                                         timeout=30)
        finally:
            ch.close()

    def daemon(self, data):
        return Daemon(DAEMON, data, refresh_interval=0.2,
                      log_path=os.path.join(self.dir, os.path.basename(data) + f"-{time.monotonic_ns()}.log"),
                      extra_args=["--snapshot-interval", "0"]).start()

    def kill9(self, d):
        d.process.send_signal(signal.SIGKILL)
        d.process.wait()
        d.stop()

    def log(self, d):
        with open(d.log_path) as f:
            return f.read()

    def assertSameAsReference(self, info):
        self.assertEqual(info.samples + info.pending_warmup, N)
        self.assertNotEqual(self.expected.state_digest, 0)
        self.assertEqual(info.state_digest, self.expected.state_digest)

    def start_with_first_part(self, data):
        d = self.daemon(data)
        self._cli(d, "model", "create", "duffing", "--dim", "2", "--dt", "0.25", "--max-dict", "120")
        self._cli(d, "ingest", "duffing", "--csv", self.first, "--producer", "p", "--batch", "250", "--quiet")
        return d

    def snapshot(self, d):
        p = self._cli(d, "snapshot", "duffing")
        path = p.stdout.strip()
        self.assertTrue(os.path.isfile(path), path)
        return path

    def rest(self, d):
        self._cli(d, "ingest", "duffing", "--csv", self.csv, "--producer", "p", "--resume", "--batch", "250",
                  "--quiet")

    def test_restart_from_snapshot_and_wal_tail(self):
        data = os.path.join(self.dir, "a")
        d = self.daemon(data)
        # An idle model (no batch after its creation) must not pin the WAL: the snapshot still
        # covers every record logged before it.
        # (kill -9: a clean stop would snapshot, and the oldest kept snapshot bounds deletion.)
        self._cli(d, "model", "create", "idle", "--dim", "3", "--sigma", "1")
        self.kill9(d)
        d = self.start_with_first_part(data)
        segments_before = set(glob.glob(os.path.join(data, "wal", "*")))
        self.assertGreater(len(segments_before), 0)
        path = self.snapshot(d)
        self.assertEqual(os.path.dirname(path), os.path.join(data, "snapshots"))
        # The covered segments are gone (the active one was rotated first).
        self.assertFalse(segments_before & set(glob.glob(os.path.join(data, "wal", "*"))))
        self.rest(d)
        self.kill9(d)
        d = self.daemon(data)
        try:
            log = self.log(d)
            self.assertIn(f"loaded snapshot {path} (2 models", log)
            self.assertIn("cmestreamd: recovered", log)
            self.assertSameAsReference(self._info(d))
            # Unknown model name: the snapshot command checks it and fails.
            p = self._cli(d, "snapshot", "nope", check=False)
            self.assertEqual(p.returncode, 1)
            self.assertIn("NOT_FOUND", p.stderr.upper().replace(" ", "_"))
        finally:
            self.assertEqual(d.stop(), 0)
        # A clean stop snapshots: the next start replays nothing and still agrees.
        d = self.daemon(data)
        try:
            self.assertIn("recovered 0 records", self.log(d))
            self.assertSameAsReference(self._info(d))
        finally:
            d.stop()

    def test_corrupt_newest_snapshot_falls_back_to_previous(self):
        data = os.path.join(self.dir, "b")
        d = self.start_with_first_part(data)
        older = self.snapshot(d)
        self.rest(d)
        newer = self.snapshot(d)
        self.assertNotEqual(older, newer)
        self.kill9(d)
        self.flip_byte(newer)
        d = self.daemon(data)
        try:
            log = self.log(d)
            self.assertIn(f"snapshot {newer} is unusable", log)
            self.assertIn("checksum mismatch", log)
            self.assertIn(f"loaded snapshot {older}", log)
            self.assertSameAsReference(self._info(d))
        finally:
            self.kill9(d)
        # The unusable file was moved aside (never pruned), and the fallback state was
        # snapshotted at once, so the next start depends on none of the damage.
        self.assertTrue(os.path.isfile(os.path.join(data, "snapshots", "unusable", os.path.basename(newer))))
        self.assertIn("snapshot after recovery", log)
        # Every kept snapshot unusable: the WAL records they covered are gone, so the daemon
        # refuses to start with a partial state (exit non-zero, naming the gap and the ways out)
        # instead of serving one.
        for path in glob.glob(os.path.join(data, "snapshots", "*.snap")):
            self.flip_byte(path)
        p = subprocess.run([DAEMON, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir", data,
                            "--snapshot-interval", "0"], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(f"snapshot {older} is unusable", p.stderr)
        self.assertIn("refusing to start", p.stderr)
        self.assertIn("--accept-data-loss", p.stderr)

    @staticmethod
    def flip_byte(path):
        with open(path, "r+b") as f:  # one byte in the middle of the model's state
            f.seek(os.path.getsize(path) // 2)
            b = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b[0] ^ 0x10]))

    def test_export_import_continues_identically(self):
        a = self.start_with_first_part(os.path.join(self.dir, "exp-a"))
        b = self.daemon(os.path.join(self.dir, "exp-b"))
        try:
            out = os.path.join(self.dir, "duffing.cmesnap")
            self._cli(a, "export", "duffing", "--out", out)
            p = self._cli(b, "import", out)
            self.assertIn("imported model 'duffing'", p.stdout)
            self.assertEqual(self._info(b).state_digest, self._info(a).state_digest)
            # Taken name: ALREADY_EXISTS, exit 1, nothing changes.
            p = self._cli(b, "import", out, check=False)
            self.assertEqual(p.returncode, 1)
            self.assertIn("ALREADY_EXISTS", p.stderr)
            # Corrupt file: DATA_LOSS naming what failed; not an export: INVALID_ARGUMENT.
            bad = os.path.join(self.dir, "bad.cmesnap")
            with open(out, "rb") as f:
                data = bytearray(f.read())
            data[len(data) // 2] ^= 0x01
            with open(bad, "wb") as f:
                f.write(bytes(data))
            p = self._cli(b, "import", bad, "--name", "copy", check=False)
            self.assertEqual(p.returncode, 1)
            self.assertIn("DATA_LOSS", p.stderr)
            self.assertIn("checksum", p.stderr.lower())
            p = self._cli(b, "import", self.csv, "--name", "copy", check=False)
            self.assertEqual(p.returncode, 1)
            self.assertIn("INVALID_ARGUMENT", p.stderr)
            # Both continue with the same stream (the producer's offset came with the model).
            self.rest(a)
            self.rest(b)
            self.assertSameAsReference(self._info(a))
            self.assertSameAsReference(self._info(b))
            # The import survives kill -9 on B: it is a record of B's own WAL.
            self.kill9(b)
            b = self.daemon(os.path.join(self.dir, "exp-b"))
            self.assertSameAsReference(self._info(b))
            # Import under a new name next to the original.
            p = self._cli(b, "import", out, "--name", "copy")
            self.assertIn("imported model 'copy'", p.stdout)
        finally:
            a.stop()
            b.stop()


if __name__ == "__main__":
    unittest.main()
