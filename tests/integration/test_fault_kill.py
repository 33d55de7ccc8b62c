"""Fault tests of durability with the real cmestreamd: kill -9 at random points while a
producer streams, restart on the same data directory, resume with `cmestream ingest --resume`;
the final model must equal the model of an uninterrupted run on another daemon (full learner
state digest, dictionary atoms, counts and Koopman eigenvalues, exact sample count: no loss, no
duplicates). Also: a garbage tail appended to the WAL is cut and reported, and a disk that is
full (RLIMIT_FSIZE on the daemon) refuses ingestion with a clear error and keeps the model intact.

Environment (ctest): CMESTREAMD, CMESTREAM, PYTHONPATH=<build>/python:client/python.
The daemons refresh their views every 0.2 s, so refreshes land at different points of the two
runs: refreshes never touch the learner, so the models must still agree bit for bit.
"""
import glob
import os
import random
import resource
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import grpc
import numpy as np

from cmestream.v1 import cmestream_pb2 as pb
from cmestream import Client
from cmestream.testing import Daemon, Stubs

CLI = os.environ.get("CMESTREAM", "cmestream")
DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")
SEED = int(os.environ.get("CMESTREAM_FAULT_SEED", "20240606"))
N = 12000


class FaultTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="cmestream-fault-")
        cls.dir = cls.tmp.name
        cls.csv = os.path.join(cls.dir, "duffing.csv")
        with open(cls.csv, "w") as f:
            subprocess.run([CLI, "simulate", "duffing", "--n", str(N), "--seed", "11"], stdout=f, check=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def cli(self, daemon, *args, check=True, timeout=120):
        p = subprocess.run([CLI, "--server", daemon.grpc_target, *args], capture_output=True, text=True,
                           timeout=timeout)
        if check and p.returncode != 0:
            self.fail(f"cmestream {' '.join(args)} exited {p.returncode}: {p.stderr}")
        return p

    def daemon(self, data, *extra, **kw):
        return Daemon(DAEMON, data, refresh_interval=0.2,
                      log_path=os.path.join(self.dir, os.path.basename(data) + f"-{time.monotonic_ns()}.log"),
                      extra_args=list(extra), **kw).start()

    def kill9(self, d):
        d.process.send_signal(signal.SIGKILL)
        d.process.wait()
        d.stop()  # closes pipes; the process is gone

    def create(self, d, name="duffing"):
        # sigma auto: the warm-up buffer (1000 pairs) and the bandwidth choice are replayed too.
        self.cli(d, "model", "create", name, "--dim", "2", "--dt", "0.25", "--max-dict", "150")

    def state(self, d, name="duffing"):
        s = Stubs(d.grpc_target)
        try:
            info = s.models.GetModel(pb.GetModelRequest(name=name, with_state_digest=True), timeout=30)
            s.queries.Refresh(pb.RefreshRequest(model=name, wait=True), timeout=120)
            dic = s.queries.GetDictionary(pb.DictionaryRequest(model=name), timeout=30)
            koop = s.queries.GetKoopman(pb.KoopmanRequest(model=name, top=6), timeout=30)
            counts = s.queries.GetCounts(pb.CountsRequest(model=name), timeout=30)
            prod = s.ingest.GetProducer(pb.GetProducerRequest(model=name, producer_id="p"), timeout=30)
            return info, dic, koop, counts, prod
        finally:
            s.close()

    def assertSameModel(self, a, b):
        ia, da, ka, ca, pa = a
        ib, db, kb, cb, pb_ = b
        self.assertEqual(ia.samples + ia.pending_warmup, N)
        self.assertEqual(ib.samples + ib.pending_warmup, N)  # no loss, no duplicates
        self.assertEqual(pa.applied_offset, N)
        self.assertEqual(pb_.applied_offset, N)
        self.assertNotEqual(ia.state_digest, 0)
        self.assertEqual(ia.state_digest, ib.state_digest)
        self.assertEqual(ia.sigma_selection.chosen, ib.sigma_selection.chosen)
        self.assertEqual(list(da.x_atoms), list(db.x_atoms))  # exact
        self.assertEqual(list(da.y_atoms), list(db.y_atoms))
        self.assertEqual([(e.__getattribute__("from"), e.to, e.count) for e in ca.counts],
                         [(e.__getattribute__("from"), e.to, e.count) for e in cb.counts])
        ea = np.array([[e.re, e.im] for e in ka.eigenvalues])
        eb = np.array([[e.re, e.im] for e in kb.eigenvalues])
        self.assertEqual(ea.shape, eb.shape)
        self.assertLessEqual(np.max(np.abs(ea - eb)), 1e-12)

    def test_kill9_restart_resume_equals_uninterrupted(self):
        rng = random.Random(SEED)
        # Reference: one uninterrupted run.
        ref = self.daemon(os.path.join(self.dir, "ref"))
        try:
            self.create(ref)
            self.cli(ref, "ingest", "duffing", "--csv", self.csv, "--producer", "p", "--batch", "250", "--quiet")
            expected = self.state(ref)
        finally:
            self.assertEqual(ref.stop(), 0)

        data = os.path.join(self.dir, "faulty")
        d = self.daemon(data)
        self.create(d)
        kills = 0
        # Kill points: the daemon is killed as soon as the producer's applied offset passes each
        # target (polled every few ms), i.e. at a random batch boundary or mid-batch.
        targets = sorted(rng.sample(range(1000, N - 2000, 250), 4))
        for round_, target in enumerate(targets):
            producer = subprocess.Popen([CLI, "--server", d.grpc_target, "ingest", "duffing", "--csv", self.csv,
                                         "--producer", "p", "--resume", "--batch", "100", "--quiet"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            s = Stubs(d.grpc_target)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and producer.poll() is None:
                req = pb.GetProducerRequest(model="duffing", producer_id="p")
                if s.ingest.GetProducer(req, timeout=10).applied_offset >= target:
                    break
                time.sleep(rng.uniform(0.001, 0.01))
            s.close()
            if round_ == 2:
                producer.send_signal(signal.SIGKILL)  # the producer dies instead of the daemon
                producer.wait()
                continue
            self.kill9(d)
            kills += 1
            producer.wait(timeout=60)
            self.assertNotEqual(producer.returncode, 0)  # it was interrupted, not finished
            d = self.daemon(data)
            with open(d.log_path) as f:
                log = f.read()
            self.assertIn("cmestreamd: recovered", log)
        try:
            s = Stubs(d.grpc_target)
            applied = s.ingest.GetProducer(pb.GetProducerRequest(model="duffing", producer_id="p")).applied_offset
            s.close()
            self.assertLess(applied, N, "the kills came too late to interrupt anything")
            self.cli(d, "ingest", "duffing", "--csv", self.csv, "--producer", "p", "--resume", "--batch", "250",
                     "--quiet")
            got = self.state(d)
        finally:
            d.stop()
        self.assertEqual(kills, 3)
        self.assertSameModel(expected, got)

    def test_python_client_resumes_by_itself_after_a_restart(self):
        # The client library's own resume: one ingest_pairs call streams the whole data set
        # while the daemon is killed -9 and restarted on the same address; the call finishes and
        # the model equals an uninterrupted run.
        data = np.loadtxt(self.csv, delimiter=",", comments="#")
        x, y = data[:, :2], data[:, 2:]
        ref = self.daemon(os.path.join(self.dir, "py-ref"))
        try:
            self.create(ref)
            with Client(ref.grpc_target) as c:
                c.ingest_pairs("duffing", x, y, producer="p", batch=100)
            expected = self.state(ref)
        finally:
            self.assertEqual(ref.stop(), 0)

        with socket.socket() as probe:  # a free port that the restarted daemon can bind again
            probe.bind(("127.0.0.1", 0))
            listen = f"127.0.0.1:{probe.getsockname()[1]}"
        data_dir = os.path.join(self.dir, "py-faulty")
        d = self.daemon(data_dir, listen=listen)
        self.create(d)
        outcome = {}

        def produce():
            try:
                with Client(listen, resume_timeout=60) as c:
                    outcome["result"] = c.ingest_pairs("duffing", x, y, producer="p", batch=100)
            except Exception as e:  # reported by the assertions below
                outcome["error"] = e

        producer = threading.Thread(target=produce)
        producer.start()
        s = Stubs(listen)
        deadline = time.monotonic() + 60
        applied = 0
        while time.monotonic() < deadline and applied < N // 3:
            applied = s.ingest.GetProducer(pb.GetProducerRequest(model="duffing", producer_id="p"),
                                           timeout=10).applied_offset
            time.sleep(0.002)
        s.close()
        self.kill9(d)
        self.assertLess(applied, N, "the kill came too late to interrupt the stream")
        time.sleep(0.5)  # the producer sees the daemon gone and starts retrying
        d = self.daemon(data_dir, listen=listen)
        try:
            producer.join(timeout=120)
            self.assertFalse(producer.is_alive())
            self.assertNotIn("error", outcome, outcome.get("error"))
            self.assertEqual(outcome["result"].producer_offset, N)
            got = self.state(d)
        finally:
            d.stop()
        self.assertSameModel(expected, got)

    def test_garbage_tail_is_cut_and_reported(self):
        data = os.path.join(self.dir, "tail")
        d = self.daemon(data)
        self.create(d, "m")
        self.cli(d, "ingest", "m", "--csv", self.csv, "--producer", "p", "--batch", "500", "--quiet")
        before = self.state(d, "m")
        self.kill9(d)
        seg = sorted(glob.glob(os.path.join(data, "wal", "*.log")))[-1]
        size = os.path.getsize(seg)
        with open(seg, "ab") as f:
            f.write(bytes(random.Random(1).getrandbits(8) for _ in range(300)))
        d = self.daemon(data)
        try:
            with open(d.log_path) as f:
                log = f.read()
            self.assertIn(f"{seg} offset {size}: torn tail record", log)
            self.assertIn("300 bytes dropped", log)
            self.assertEqual(os.path.getsize(seg), size)
            after = self.state(d, "m")
            self.assertEqual(before[0].state_digest, after[0].state_digest)
            self.assertEqual(after[0].samples, N)
        finally:
            d.stop()

    def test_disk_full_refuses_and_keeps_the_model(self):
        data = os.path.join(self.dir, "full")
        # Learn how large the log is after the model and the first 2000 pairs, then restart the
        # daemon allowed to write only a little more than that.
        first = os.path.join(self.dir, "first.csv")
        with open(self.csv) as f, open(first, "w") as g:
            rows = [line for line in f if not line.startswith("#")]
            g.writelines(rows[:2000])
        d = self.daemon(data)
        self.create(d, "m")
        self.cli(d, "ingest", "m", "--csv", first, "--producer", "p", "--batch", "500", "--quiet")
        self.assertEqual(d.stop(), 0)
        used = sum(os.path.getsize(p) for p in glob.glob(os.path.join(data, "wal", "*.log")))
        limit = 256 * 1024  # bytes any one file may grow to; one 2000-pair file is ~70 KB of log

        def limit_files():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes then fail with EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        d = Daemon(DAEMON, data, refresh_interval=3600, log_path=os.path.join(self.dir, "full.log"))
        # Daemon.start has no preexec hook: start the process the same way, with the limit.
        orig_popen = subprocess.Popen
        subprocess.Popen = lambda *a, **k: orig_popen(*a, preexec_fn=limit_files, **k)
        try:
            d.start()
        finally:
            subprocess.Popen = orig_popen
        try:
            before = self.state(d, "m")
            p = self.cli(d, "ingest", "m", "--csv", self.csv, "--producer", "p", "--resume", "--batch", "2000",
                         "--quiet", check=False)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("write-ahead log append failed: File too large", p.stderr)
            self.assertIn("RESOURCE_EXHAUSTED", p.stderr.upper().replace(" ", "_"))
            s = Stubs(d.grpc_target)
            info = s.models.GetModel(pb.GetModelRequest(name="m", with_state_digest=True))
            applied = s.ingest.GetProducer(pb.GetProducerRequest(model="m", producer_id="p")).applied_offset
            # What was applied is exactly what was logged: the batches before the refusal.
            self.assertEqual(info.samples + info.pending_warmup, applied)
            self.assertGreater(applied, 2000)
            self.assertLess(applied, N)
            s.queries.GetDictionary(pb.DictionaryRequest(model="m"), timeout=30)  # queries still work
            s.close()
            self.assertLess(used, limit)
            state_at_refusal = info.state_digest
        finally:
            self.assertEqual(d.stop(), 0)
        # After a restart without the limit, the recovered model is the one that refused.
        d = self.daemon(data)
        try:
            s = Stubs(d.grpc_target)
            info = s.models.GetModel(pb.GetModelRequest(name="m", with_state_digest=True))
            self.assertEqual(info.state_digest, state_at_refusal)
            s.close()
            with open(d.log_path) as f:
                self.assertNotIn("corrupt", f.read())
        finally:
            d.stop()


if __name__ == "__main__":
    unittest.main()
