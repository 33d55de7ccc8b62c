"""The ordinary lifecycle of cmestreamd against the real daemon: every reproduction of "nothing
acknowledged is ever lost" is a test here. Clean restarts with models in every state, bounded ids
and values, imports that survive kill -9, damaged or missing WAL segments and snapshots that
refuse the start (naming the file and the way out) instead of serving a partial state, exclusive
ports and data dirs, memory and query budgets.

Environment (ctest): CMESTREAMD, PYTHONPATH=<build>/python:client/python.
"""
import glob
import os
import shutil
import struct
import subprocess
import tempfile
import time
import unittest

import grpc
import numpy as np

from cmestream.v1 import cmestream_pb2 as pb
from cmestream.testing import Daemon, Stubs
from masked_crc import crc32c, mask  # this folder

DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")

# --- The WAL record layout (service/storage/wal.h), to craft damage (CRC: masked_crc.py) -----------


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)


def read_text(path):
    with open(path, errors="replace") as f:
        return f.read()


SEGMENT_HEADER = 16
RECORD_HEADER = 17


def records(path):
    """(offset, length, type, sequence) of each record of a segment."""
    data = read_bytes(path)
    pos = SEGMENT_HEADER if data[:8] == b"CMEWALSG" else 0
    out = []
    while pos + RECORD_HEADER <= len(data):
        length, = struct.unpack_from("<I", data, pos + 4)
        typ = data[pos + 8]
        seq, = struct.unpack_from("<Q", data, pos + 9)
        out.append((pos, length, typ, seq))
        pos += RECORD_HEADER + length
    return out


def encode_record(typ: int, seq: int, payload: bytes) -> bytes:
    body = bytes([typ]) + struct.pack("<Q", seq) + payload
    return struct.pack("<II", mask(crc32c(body)), len(payload)) + body


def pairs(n, d=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, size=(n, d))
    y = 0.9 * x + 0.1 * rng.standard_normal((n, d))
    return x, y


class LifecycleTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="cmestream-life-")
        self.dir = self.tmp.name
        self.daemons = []

    def tearDown(self):
        for d in self.daemons:
            d.stop()
        self.tmp.cleanup()

    def start(self, data, *extra, expect_fail=False):
        d = Daemon(DAEMON, data, refresh_interval=0.2,
                   log_path=os.path.join(self.dir, f"{os.path.basename(data)}-{time.monotonic_ns()}.log"),
                   extra_args=["--snapshot-interval", "0", *extra])
        if expect_fail:
            with self.assertRaises(RuntimeError) as ctx:
                d.start()
            return str(ctx.exception)
        d.start()
        self.daemons.append(d)
        return d

    def kill9(self, d):
        d.process.kill()
        d.process.wait()
        d.stop()
        self.daemons.remove(d)

    def term(self, d):
        self.assertEqual(d.stop(), 0)
        self.daemons.remove(d)

    def create(self, d, name, **cfg):
        s = Stubs(d.grpc_target)
        try:
            return s.models.CreateModel(pb.CreateModelRequest(config=pb.ModelConfig(name=name, **cfg)), timeout=30)
        finally:
            s.close()

    def ingest(self, d, name, x, y, producer="p", offset=0, episode=""):
        s = Stubs(d.grpc_target)
        try:
            b = pb.IngestBatch(model=name, producer_id=producer, offset=offset, episode_id=episode,
                               x=x.ravel().tolist(), y=y.ravel().tolist())
            return s.ingest.IngestOne(b, timeout=60)
        finally:
            s.close()

    def digests(self, d):
        s = Stubs(d.grpc_target)
        try:
            out = {}
            for m in s.models.ListModels(pb.ListModelsRequest(), timeout=30).models:
                info = s.models.GetModel(pb.GetModelRequest(name=m.config.name, with_state_digest=True), timeout=30)
                out[m.config.name] = (info.state_digest, info.samples + info.pending_warmup)
            return out
        finally:
            s.close()

    def populated(self, data, n=3000):
        """A daemon with a fixed-sigma model fed n pairs (WAL only: snapshots off)."""
        d = self.start(data)
        self.create(d, "m", dim=2, sigma=0.5, max_dict=80)
        x, y = pairs(n)
        for k in range(0, n, 500):
            self.ingest(d, "m", x[k:k + 500], y[k:k + 500], offset=k)
        return d

    # --- 1. clean restart with a model in every state -------------------------------------

    def test_clean_restarts_keep_models_in_every_state(self):
        data = os.path.join(self.dir, "states")
        d = self.start(data)
        self.create(d, "auto_empty", dim=2)                          # sigma auto, no data
        self.create(d, "auto_warmup", dim=2, auto_sigma_warmup=500)  # sigma auto, in warm-up
        self.create(d, "auto_done", dim=2, auto_sigma_warmup=200, max_dict=60)
        self.create(d, "fixed", dim=2, sigma=0.5, max_dict=60, latent_states=2, window=2)
        self.create(d, "discrete", num_states=5, meta_states=2)
        self.create(d, "deleted", dim=1, sigma=1.0)
        x, y = pairs(400)
        self.ingest(d, "auto_warmup", x[:300], y[:300])
        self.ingest(d, "auto_done", x, y)
        s = Stubs(d.grpc_target)
        states = np.concatenate([x[:100], y[99:100]]).ravel().tolist()
        s.ingest.IngestOne(pb.IngestBatch(model="fixed", producer_id="q", states=states, episode_id="e"), timeout=30)
        s.ingest.IngestOne(pb.IngestBatch(model="discrete", x_ids=[0, 1, 2, 3], y_ids=[1, 2, 3, 4]), timeout=30)
        s.models.DeleteModel(pb.DeleteModelRequest(name="deleted"), timeout=30)
        s.models.DeleteModel(pb.DeleteModelRequest(name="discrete"), timeout=30)  # deleted and re-created
        s.models.CreateModel(pb.CreateModelRequest(config=pb.ModelConfig(name="discrete", num_states=4)), timeout=30)
        s.ingest.IngestOne(pb.IngestBatch(model="discrete", state_ids=[0, 1, 2, 3, 0]), timeout=30)
        s.close()
        before = self.digests(d)
        self.assertEqual(set(before), {"auto_empty", "auto_warmup", "auto_done", "fixed", "discrete"})
        self.assertEqual(before["discrete"][1], 4)
        for restart in range(3):  # the second start loads the first's shutdown snapshot, and so on
            self.term(d)
            d = self.start(data)
            self.assertEqual(self.digests(d), before, f"restart {restart}")
        # The warm-up model still finishes its warm-up and learns after all those restarts.
        self.ingest(d, "auto_warmup", x[300:], y[300:], producer="p2")
        self.assertEqual(self.digests(d)["auto_warmup"][1], 400)

    def koopman(self, d, name):
        s = Stubs(d.grpc_target)
        try:
            s.queries.Refresh(pb.RefreshRequest(model=name, wait=True), timeout=60)
            return s.queries.GetKoopman(pb.KoopmanRequest(model=name, top=6), timeout=30)
        finally:
            s.close()

    def test_clean_restart_mid_spectral_epoch_keeps_the_koopman_spectrum(self):
        """A model whose spectral moments are mid-epoch (pairs buffered for the next GEMM flush,
        a previous epoch kept) restarts from its shutdown snapshot bit for bit: same state digest,
        same Koopman eigenvalues (the spectrum is a deterministic function of that state)."""
        data = os.path.join(self.dir, "spectral")
        d = self.start(data)
        self.create(d, "m", dim=2, sigma=0.4, max_dict=300)
        n = 6037  # not a multiple of the 64-pair flush: the live epoch holds buffered pairs
        x, y = pairs(n, seed=3)
        for k in range(0, n, 1000):
            self.ingest(d, "m", x[k:k + 1000], y[k:k + 1000], offset=k)
        before = self.koopman(d, "m")
        digest = self.digests(d)
        sp = before.spectrum
        self.assertEqual(sp.estimator, "spectral-moments")
        self.assertGreaterEqual(sp.epoch, 2)            # the basis followed the growing dictionary
        self.assertLess(sp.epoch_samples, n)            # so the serving epoch is not the whole stream
        self.assertEqual(before.view.samples, n)
        for restart in range(2):
            self.term(d)
            d = self.start(data)
            self.assertEqual(self.digests(d), digest, f"restart {restart}")
            after = self.koopman(d, "m")
            self.assertEqual([(e.re, e.im) for e in after.eigenvalues], [(e.re, e.im) for e in before.eigenvalues])
            self.assertEqual(list(after.timescales), list(before.timescales))
            for f in ("epoch", "epoch_samples", "basis_size", "ridge", "selection_score"):
                self.assertEqual(getattr(after.spectrum, f), getattr(sp, f), f)

    # --- 2. ids and values: what is acknowledged can be written and read back -------------

    def test_long_ids_and_absurd_values_are_refused_and_change_nothing(self):
        data = os.path.join(self.dir, "ids")
        d = self.start(data)
        self.create(d, "m", dim=2, sigma=0.5)
        x, y = pairs(10)
        self.ingest(d, "m", x, y, producer="p" * 256, episode="e" * 256)  # at the bound: fine
        for field, kw in (("producer_id", dict(producer="p" * 257)), ("episode_id", dict(episode="e" * 4097))):
            with self.assertRaises(grpc.RpcError) as ctx:
                self.ingest(d, "m", x, y, **kw)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(f"field {field} is", ctx.exception.details())
            self.assertIn("at most 256 bytes", ctx.exception.details())
        for value in (1e308, -1e200, 1e13):
            bad = x.copy()
            bad[3, 1] = value
            with self.assertRaises(grpc.RpcError) as ctx:
                self.ingest(d, "m", bad, y, producer="")
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("pair 3, component 1", ctx.exception.details())
            self.assertIn("--max-abs-value", ctx.exception.details())
        before = self.digests(d)
        self.assertEqual(before["m"][1], 10)
        self.term(d)
        d = self.start(data)  # the shutdown snapshot holds the 256-byte ids and reads back
        self.assertEqual(self.digests(d), before)

    # --- 3. unusable snapshots: refuse, never start empty ------------------------------------

    def snapshot_only(self, data):
        """Model state held only by snapshots: two clean shutdowns prune every WAL segment."""
        d = self.populated(data)
        before = self.digests(d)
        self.term(d)
        d = self.start(data)
        self.term(d)
        self.assertEqual([r for seg in glob.glob(os.path.join(data, "wal", "*.log")) for r in records(seg)], [])
        return before

    def test_every_snapshot_unusable_with_an_empty_wal_refuses_to_start(self):
        data = os.path.join(self.dir, "unusable")
        before = self.snapshot_only(data)
        snaps = sorted(glob.glob(os.path.join(data, "snapshots", "*.snap")))
        self.assertEqual(len(snaps), 2)
        for path in snaps:
            raw = bytearray(read_bytes(path))
            raw[len(raw) // 2] ^= 0x10
            write_bytes(path, bytes(raw))
        log = self.start(data, expect_fail=True)
        self.assertIn("refusing to start", log)
        self.assertIn("--accept-data-loss", log)
        self.assertIn("--recover-from", log)
        # The refusal changed nothing: the files are still there for the operator.
        self.assertEqual(sorted(glob.glob(os.path.join(data, "snapshots", "*.snap"))), snaps)
        # The way out: accept the loss (starts empty, says so, and its new state is durable).
        d = self.start(data, "--accept-data-loss")
        self.assertEqual(self.digests(d), {})
        self.assertIn("DATA LOSS", read_text(d.log_path))
        self.assertEqual(len(glob.glob(os.path.join(data, "snapshots", "unusable", "*.snap"))), 2)
        self.term(d)
        self.start(data)  # and the next start needs no flag
        del before

    def test_a_newer_snapshot_version_is_kept_and_refused_by_name(self):
        data = os.path.join(self.dir, "newer")
        self.snapshot_only(data)
        for path in glob.glob(os.path.join(data, "snapshots", "*.snap")):
            raw = bytearray(read_bytes(path))
            struct.pack_into("<I", raw, 12, 99)  # format version
            struct.pack_into("<I", raw, len(raw) - 4, mask(crc32c(bytes(raw[:-4]))))
            write_bytes(path, bytes(raw))
        log = self.start(data, expect_fail=True)
        self.assertIn("snapshot format version 99", log)
        self.assertIn("refusing to start", log)

    def test_recover_from_a_snapshot_copy(self):
        data = os.path.join(self.dir, "copy")
        before = self.snapshot_only(data)
        snaps = sorted(glob.glob(os.path.join(data, "snapshots", "*.snap")))
        copy = os.path.join(self.dir, "backup.snap")
        shutil.copy(snaps[-1], copy)
        for path in snaps:
            os.remove(path)
        self.assertIn("refusing to start", self.start(data, expect_fail=True))
        d = self.start(data, "--recover-from", copy)
        self.assertEqual(self.digests(d), before)

    # --- 4. imports are logged ---------------------------------------------------------

    def test_import_survives_kill9_and_takes_later_batches(self):
        src = self.start(os.path.join(self.dir, "src"))
        self.create(src, "a", dim=2, sigma=0.5, max_dict=60)
        x, y = pairs(1000, seed=3)
        self.ingest(src, "a", x[:500], y[:500])
        s = Stubs(src.grpc_target)
        image = s.models.ExportModel(pb.ExportModelRequest(name="a"), timeout=30).data
        s.close()
        data = os.path.join(self.dir, "dst")
        d = self.start(data)
        s = Stubs(d.grpc_target)
        s.models.ImportModel(pb.ImportModelRequest(data=image, name="b"), timeout=30)
        s.close()
        self.kill9(d)  # right after the import: no snapshot exists
        self.assertEqual(glob.glob(os.path.join(data, "snapshots", "*.snap")), [])
        d = self.start(data)
        self.ingest(d, "b", x[500:], y[500:], offset=500)
        self.ingest(src, "a", x[500:], y[500:], offset=500)
        expected = self.digests(src)["a"]
        self.assertEqual(self.digests(d)["b"], expected)
        self.kill9(d)
        d = self.start(data)
        self.assertEqual(self.digests(d)["b"], expected)
        self.term(d)
        d = self.start(data)
        self.assertEqual(self.digests(d)["b"], expected)

    # --- 5. WAL damage ------------------------------------------------------------------

    def damaged_wal(self, name):
        data = os.path.join(self.dir, name)
        d = self.populated(data)
        before = self.digests(d)
        self.kill9(d)  # the WAL holds everything; no snapshot
        segs = sorted(glob.glob(os.path.join(data, "wal", "*.log")))
        return data, segs, before

    def flip(self, path, offset):
        raw = bytearray(read_bytes(path))
        raw[offset] ^= 0x40
        write_bytes(path, bytes(raw))

    def test_a_flipped_byte_mid_log_refuses_then_accepting_keeps_the_prefix(self):
        data, segs, before = self.damaged_wal("flip")
        recs = [(seg, r) for seg in segs for r in records(seg)]
        self.assertGreaterEqual(len(recs), 5)
        seg, (off, length, typ, seq) = recs[2]
        self.flip(seg, off + RECORD_HEADER + length // 2)
        log = self.start(data, expect_fail=True)
        self.assertIn(f"{seg} offset {off}", log)
        self.assertIn(f"records {seq}..{seq} are lost", log)
        self.assertIn("--accept-data-loss", log)
        d = self.start(data, "--accept-data-loss")
        got = self.digests(d)
        self.assertLess(got["m"][1], before["m"][1])  # the prefix before the damage
        self.assertIn("DATA LOSS", read_text(d.log_path))

    def test_a_flipped_byte_in_the_last_complete_record_is_not_cut_as_torn(self):
        data, segs, _ = self.damaged_wal("last")
        off, length, typ, seq = records(segs[-1])[-1]
        self.flip(segs[-1], off + RECORD_HEADER + length // 2)
        log = self.start(data, expect_fail=True)
        self.assertIn(f"the last record (sequence {seq}) is complete but damaged", log)

    def test_garbage_between_records_without_a_gap_is_skipped(self):
        data, segs, before = self.damaged_wal("garbage")
        raw = read_bytes(segs[-1])
        off = records(segs[-1])[1][0]
        write_bytes(segs[-1], raw[:off] + b"\x13" * 40 + raw[off:])
        d = self.start(data)
        self.assertEqual(self.digests(d), before)
        self.assertIn("damaged bytes", read_text(d.log_path))

    def test_a_deleted_wal_directory_refuses_to_start(self):
        data, _, _ = self.damaged_wal("nowal")
        shutil.rmtree(os.path.join(data, "wal"))
        log = self.start(data, expect_fail=True)
        self.assertIn("listed in the manifest are missing", log)

    def test_an_unknown_record_type_is_refused_not_cut(self):
        data, segs, before = self.damaged_wal("future")
        last_seq = records(segs[-1])[-1][3]
        with open(segs[-1], "ab") as f:
            f.write(encode_record(42, last_seq + 1, b"from the future"))
        log = self.start(data, expect_fail=True)
        self.assertIn("unknown record type 42", log)
        self.assertIn("newer cmestreamd", log)
        self.assertEqual(records(segs[-1])[-1][2], 42)  # still there, not cut

    # --- 6. exclusive ports and data dirs -------------------------------------------------

    def test_a_second_daemon_cannot_share_the_port_or_the_data_dir(self):
        data = os.path.join(self.dir, "one")
        d = self.start(data)
        port = d.grpc_target.rsplit(":", 1)[1]
        other = Daemon(DAEMON, os.path.join(self.dir, "two"), listen=f"127.0.0.1:{port}",
                       log_path=os.path.join(self.dir, "two.log"))
        with self.assertRaises(RuntimeError) as ctx:
            other.start()
        self.assertIn("cannot serve gRPC", str(ctx.exception))
        os.remove(os.path.join(data, "LOCK"))
        log = self.start(data, expect_fail=True)
        self.assertIn("in use by another cmestreamd", log)

    # --- 9. what a start with damage says and does ------------------------------------------

    def snapshot_rpc(self, d):
        s = Stubs(d.grpc_target)
        try:
            return s.models.Snapshot(pb.SnapshotRequest(), timeout=60)
        finally:
            s.close()

    def two_snapshots_and_a_tail(self, name):
        """Snapshot A, more pairs, snapshot B, more pairs, kill -9: the WAL holds A's cut to the end
        (retention keeps what the older snapshot needs), in a segment before B's cut and one after."""
        data = os.path.join(self.dir, name)
        d = self.populated(data)
        x, y = pairs(3000, seed=5)
        self.snapshot_rpc(d)
        self.ingest(d, "m", x[:1000], y[:1000], offset=3000)
        self.snapshot_rpc(d)
        self.ingest(d, "m", x[1000:2000], y[1000:2000], offset=4000)
        before = self.digests(d)
        self.kill9(d)
        snaps = sorted(glob.glob(os.path.join(data, "snapshots", "*.snap")))
        segs = sorted(glob.glob(os.path.join(data, "wal", "*.log")))
        self.assertEqual(len(snaps), 2)
        self.assertEqual(len(segs), 2)
        return data, snaps, segs, before

    @staticmethod
    def loss_lines(log_path):
        import json
        return [json.loads(line) for line in read_text(log_path).splitlines() if line.startswith('{"model"')]

    def test_rpcs_while_replaying_answer_unavailable_and_health_not_serving(self):
        import socket
        data = os.path.join(self.dir, "replay")
        d = self.populated(data, n=100000)
        before = self.digests(d)
        self.kill9(d)  # the WAL holds every pair: the restart replays 100k pairs
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        target = f"127.0.0.1:{port}"
        log = os.path.join(self.dir, "replay.log")
        with open(log, "wb") as err:
            proc = subprocess.Popen([DAEMON, "--listen", target, "--data-dir", data, "--metrics-listen", "127.0.0.1:0",
                                     "--snapshot-interval", "0"], stdout=subprocess.PIPE, stderr=err)
        try:
            from cmestream.v1 import cmestream_pb2_grpc as pb_grpc
            # Reconnect at once after a refused connection (the default backoff of 1 s or more
            # could sleep through the whole replay).
            channel = grpc.insecure_channel(target, options=[("grpc.initial_reconnect_backoff_ms", 20),
                                                             ("grpc.min_reconnect_backoff_ms", 20),
                                                             ("grpc.max_reconnect_backoff_ms", 50)])
            health = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda _: b"",
                                         response_deserializer=lambda b: b)
            s = Stubs.__new__(Stubs)
            s.channel = channel
            s.models = pb_grpc.ModelServiceStub(channel)
            s.queries = pb_grpc.QueryServiceStub(channel)
            seen, messages, health_answers = set(), [], set()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                # wait_for_ready: a call waits for the connection (as a retrying client does)
                # instead of failing at once while the channel is between connection attempts.
                try:
                    health_answers.add(health(None, timeout=2, wait_for_ready=True))
                except grpc.RpcError as e:
                    seen.add(("health", e.code(), e.details()))
                try:
                    s.models.GetModel(pb.GetModelRequest(name="m"), timeout=2, wait_for_ready=True)
                    break
                except grpc.RpcError as e:
                    seen.add(("GetModel", e.code(), e.details()))
                    if e.code() == grpc.StatusCode.UNAVAILABLE and e.details().startswith("recovering:"):
                        messages.append(e.details())
                try:  # a query gets the same answer
                    s.queries.GetKoopman(pb.KoopmanRequest(model="m"), timeout=2, wait_for_ready=True)
                except grpc.RpcError as e:
                    # After the handover the serving daemon answers: no view yet, a real answer.
                    if not (e.code() == grpc.StatusCode.FAILED_PRECONDITION and "no view yet" in e.details()):
                        seen.add(("GetKoopman", e.code(), e.details()))
            else:
                self.fail("the daemon did not become ready")
            channel.close()
            codes = {code for _, code, _ in seen}
            self.assertNotIn(grpc.StatusCode.UNIMPLEMENTED, codes, seen)
            # CANCELLED: a call that raced the switch from the recovering to the serving server
            # (service/README.md "Recovery"); anything else is UNAVAILABLE.
            self.assertLessEqual(codes, {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                                         grpc.StatusCode.CANCELLED},
                                 [x for x in seen if x[1] != grpc.StatusCode.UNAVAILABLE])
            self.assertTrue(messages, "no RPC was answered during the replay")
            self.assertRegex(messages[-1], r"^recovering: (\d+ of \d+ records replayed|loading the newest snapshot)")
            self.assertIn(b"\x08\x02", health_answers)  # NOT_SERVING while recovering
        finally:
            proc.send_signal(2)
            proc.wait(timeout=60)
            proc.stdout.close()
        d = self.start(data)
        self.assertEqual(self.digests(d), before)

    def test_recover_from_with_a_missing_wal_segment_refuses_by_name(self):
        data, snaps, segs, before = self.two_snapshots_and_a_tail("recover-missing")
        copy = os.path.join(self.dir, "recover-missing.snap")
        shutil.copy(snaps[-1], copy)
        os.remove(segs[-1])  # the pairs after the newest snapshot
        log = self.start(data, "--recover-from", copy, expect_fail=True)
        self.assertIn("refusing to start", log)
        self.assertIn(os.path.basename(segs[-1]), log)
        # Accepted: the loss is stated (sequences known, content gone) and is what the daemon lacks.
        d = self.start(data, "--recover-from", copy, "--accept-data-loss")
        got = self.digests(d)
        self.assertEqual(got["m"][1], before["m"][1] - 1000)
        lines = self.loss_lines(d.log_path)
        # The last segment is gone: what m lost there is unknown (never reported as 0).
        self.assertEqual([(l["model"], l["pairs_dropped"], l["model_dropped"]) for l in lines],
                         [("m", None, False), (None, None, None)])
        self.assertEqual(lines[0]["extent"], "unknown")
        self.assertIsNone(lines[1]["wal_sequences"][0][1])  # how many records the segment held: unknown

    def test_a_missing_manifest_and_segment_refuse_by_name(self):
        data, snaps, segs, before = self.two_snapshots_and_a_tail("manifest-missing")
        os.remove(os.path.join(data, "MANIFEST"))
        os.remove(segs[-1])
        log = self.start(data, expect_fail=True)
        self.assertIn("MANIFEST is missing", log)
        self.assertIn("--accept-data-loss", log)
        d = self.start(data, "--accept-data-loss")
        log = read_text(d.log_path)
        self.assertIn("DATA LOSS accepted", log)
        self.assertEqual(self.digests(d)["m"][1], before["m"][1] - 1000)
        # Issue 49 case 3: without the manifest nothing says where the log ended, so the loss is
        # reported as unknown (at least what is known), never as "no WAL record was dropped".
        self.assertNotIn("no WAL record was dropped", log)
        lines = self.loss_lines(d.log_path)
        self.assertEqual([(l["model"], l["pairs_dropped"], l["extent"]) for l in lines if l["model"]],
                         [("m", None, "unknown")])
        tail = [l for l in lines if l["model"] is None]
        self.assertEqual(len(tail), 1)
        self.assertIsNone(tail[0]["wal_sequences"][0][1])
        self.assertIn('data loss: model "m": unknown, at least 0 acknowledged pairs lost', log)
        self.assertIn("in total unknown, at least 0 pairs in 1 model(s)", log)
        self.assertNotRegex(log, r" 0 lost[,)]")  # the summary line agrees: not "0 lost"

    def test_accept_data_loss_reports_per_model_what_it_drops(self):
        data = os.path.join(self.dir, "report")
        d = self.start(data)
        self.create(d, "a", dim=2, sigma=0.5, max_dict=60)
        self.create(d, "b", dim=3, sigma=0.5, max_dict=60)
        acked = {"a": 0, "b": 0, "c": 0}
        rng = np.random.default_rng(9)
        for k in range(12):  # interleaved batches of both models
            for name, dim in (("a", 2), ("b", 3)):
                n = int(rng.integers(50, 150))
                x = rng.uniform(-1, 1, size=(n, dim))
                self.ingest(d, name, x, 0.9 * x, offset=acked[name])
                acked[name] += n
            if k == 8:
                self.create(d, "c", dim=2, sigma=0.5, max_dict=60)
            if k >= 8:
                x = rng.uniform(-1, 1, size=(70, 2))
                self.ingest(d, "c", x, 0.9 * x, offset=acked["c"])
                acked["c"] += 70
        self.kill9(d)
        seg = sorted(glob.glob(os.path.join(data, "wal", "*.log")))[-1]
        recs = records(seg)
        # Damage a batch of 'a' in the middle: every record from it on is dropped (point in time).
        off, length, typ, seq = [r for r in recs if r[2] == 3][10]
        self.flip(seg, off + RECORD_HEADER + length - 20)  # inside the coordinates
        d = self.start(data, "--accept-data-loss")
        lines = {l["model"]: l for l in self.loss_lines(d.log_path)}
        have = {name: samples for name, (_, samples) in self.digests(d).items()}
        self.assertEqual(set(lines), {"a", "b", "c"})
        for name, line in lines.items():
            self.assertEqual(line["pairs_dropped"], acked[name] - have.get(name, 0), name)
            self.assertEqual(line["model_dropped"], name not in have, name)
        self.assertTrue(lines["c"]["model_dropped"])
        self.assertEqual(lines["a"]["wal_sequences"][0][0], seq)
        last = recs[-1][3]
        self.assertEqual(max(r[1] for l in lines.values() for r in l["wal_sequences"]), last)
        self.assertIn(f"records {seq}..{last} are dropped", read_text(d.log_path))

    def test_a_damaged_segment_header_refuses_then_accepting_reads_its_records(self):
        data, segs, before = self.damaged_wal("header")
        self.flip(segs[-1], 9)  # the format version field; the header checksum no longer matches
        log = self.start(data, expect_fail=True)
        self.assertIn("damaged segment header", log)
        self.assertIn("--accept-data-loss", log)
        d = self.start(data, "--accept-data-loss")
        self.assertEqual(self.digests(d), before)  # every record checked by its own checksum
        self.assertEqual(len(glob.glob(segs[-1] + ".corrupt.*")), 1)  # the damaged file, kept
        self.kill9(d)
        d = self.start(data)  # the header was rewritten: no flag needed any more
        self.assertEqual(self.digests(d), before)

    def test_a_newer_snapshot_version_is_refused_even_when_the_wal_allows_a_fallback(self):
        data, snaps, _, _ = self.two_snapshots_and_a_tail("newer-fallback")
        raw = bytearray(read_bytes(snaps[-1]))
        struct.pack_into("<I", raw, 12, 4)  # format version 4
        struct.pack_into("<I", raw, len(raw) - 4, mask(crc32c(bytes(raw[:-4]))))
        write_bytes(snaps[-1], bytes(raw))
        log = self.start(data, expect_fail=True)
        self.assertIn(f"{snaps[-1]}: snapshot format version 4 was written by a newer cmestreamd", log)
        self.assertIn("refusing to start", log)
        self.assertEqual(sorted(glob.glob(os.path.join(data, "snapshots", "*.snap"))), snaps)  # kept in place
        self.assertEqual(glob.glob(os.path.join(data, "snapshots", "unusable", "*")), [])

    def test_a_flipped_byte_in_a_record_the_snapshot_covers_warns_and_loses_nothing(self):
        # Issue 49 case 1: the newest snapshot covers the damaged record, so it is not needed:
        # the start needs no flag, serves every pair, and warns with the file and the offset.
        data, snaps, segs, before = self.two_snapshots_and_a_tail("covered-flip")
        off, length, typ, seq = [r for r in records(segs[0]) if r[2] == 3][-1]  # a batch before B's cut
        self.flip(segs[0], off + RECORD_HEADER + length // 2)
        d = self.start(data)
        self.assertEqual(self.digests(d), before)  # every acknowledged pair, the same state
        log = read_text(d.log_path)
        self.assertIn(f"{segs[0]} offset {off}", log)
        self.assertIn(f"records {seq}..{seq} are damaged", log)
        self.assertIn("so they are not needed and nothing is lost", log)
        self.assertNotIn("DATA LOSS", log)
        self.assertEqual(self.loss_lines(d.log_path), [])
        self.assertEqual(glob.glob(os.path.join(data, "wal", "*.corrupt.*")), [])

    def test_a_missing_middle_segment_reports_per_model_and_producer_what_each_lacks(self):
        # Issue 49 case 2: models a and b fed alternately by producers pa and pb over three
        # segments (one per run: each start opens a new one), the middle one deleted.
        data = os.path.join(self.dir, "middle")
        acked = {"a": 0, "b": 0}
        rng = np.random.default_rng(49)
        for run in range(3):
            d = self.start(data)
            if run == 0:
                self.create(d, "a", dim=2, sigma=0.5, max_dict=60)
                self.create(d, "b", dim=2, sigma=0.5, max_dict=60)
            for k in range(4):
                for name, producer, n in (("a", "pa", 400 + 100 * k), ("b", "pb", 50 + 25 * k)):
                    x = rng.uniform(-1, 1, size=(n, 2))
                    self.ingest(d, name, x, 0.9 * x, producer=producer, offset=acked[name])
                    acked[name] += n
            self.kill9(d)
        segs = sorted(glob.glob(os.path.join(data, "wal", "*.log")))
        self.assertEqual(len(segs), 3)
        os.remove(segs[1])
        log = self.start(data, expect_fail=True)
        self.assertIn(os.path.basename(segs[1]), log)
        d = self.start(data, "--accept-data-loss")
        have = {name: samples for name, (_, samples) in self.digests(d).items()}
        lines = {l["model"]: l for l in self.loss_lines(d.log_path) if l["model"]}
        self.assertEqual(set(lines), {"a", "b"})
        for name, producer in (("a", "pa"), ("b", "pb")):
            lacks = acked[name] - have[name]
            self.assertGreater(lacks, 0)
            self.assertEqual(lines[name]["pairs_dropped"], lacks, name)  # what the model lacks, exactly
            self.assertEqual(lines[name]["extent"], "exact", name)
            self.assertEqual(lines[name]["producers"], [{"producer": producer, "offsets": [have[name], acked[name]]}])
        text = read_text(d.log_path)
        total = sum(acked[n] - have[n] for n in acked)
        self.assertIn(f'data loss: model "a": {acked["a"] - have["a"]} acknowledged pairs lost; '
                      f'producer "pa" offsets {have["a"]}..{acked["a"] - 1}', text)
        self.assertIn(f"data loss: in total {total} pairs in 2 model(s)", text)
        self.assertRegex(text, rf"recovered .* \d+ records \({total} pairs\) lost[,)]")
        # The segment after the gap is intact: kept as *.dropped.*, never called damaged.
        self.assertEqual(glob.glob(os.path.join(data, "wal", "*.corrupt.*")), [])
        self.assertEqual(len(glob.glob(segs[2] + ".dropped.*")), 1)
        self.assertNotIn("damaged record", text)

    def test_a_deleted_older_segment_the_snapshot_covers_loses_nothing(self):
        data, snaps, segs, before = self.two_snapshots_and_a_tail("covered")
        os.remove(segs[0])  # records between the two snapshots: the newest one holds them
        d = self.start(data)
        self.assertEqual(self.digests(d), before)
        log = read_text(d.log_path)
        self.assertIn("nothing is lost", log)
        self.assertNotIn("are lost", log.replace("nothing is lost", ""))

    def test_damage_in_the_last_records_length_field_is_refused_not_cut(self):
        data, segs, _ = self.damaged_wal("length")
        off, length, typ, seq = records(segs[-1])[-1]
        raw = bytearray(read_bytes(segs[-1]))
        struct.pack_into("<I", raw, off + 4, length + 4096)  # now it seems to run past the end
        write_bytes(segs[-1], bytes(raw))
        log = self.start(data, expect_fail=True)
        self.assertIn(f"the last record (sequence {seq}) is complete but damaged (length field damaged", log)
        self.assertEqual(len(read_bytes(segs[-1])), len(raw))  # nothing cut

    # --- 8. memory -----------------------------------------------------------------------

    def test_memory_and_query_budgets(self):
        data = os.path.join(self.dir, "mem")
        d = self.start(data, "--max-memory", "300M", "--max-query-mb", "1")
        made = 0
        with self.assertRaises(grpc.RpcError) as ctx:
            for i in range(100):
                # Charged as an empty model, about 3.3 MiB (the RFF and forecast sums), not at
                # max_dict 1000 (about 70 MiB, which refused the 5th): about 91 fit.
                self.create(d, f"m{i}", dim=2, sigma=0.5)
                made += 1
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("--max-memory", ctx.exception.details())
        self.assertIn("even empty it needs about", ctx.exception.details())
        self.assertGreaterEqual(made, 60)
        self.assertLess(made, 100)
        # A query larger than --max-query-mb is refused before it allocates.
        x, y = pairs(200)
        self.ingest(d, "m0", x, y)
        s = Stubs(d.grpc_target)
        s.queries.Refresh(pb.RefreshRequest(model="m0", wait=True), timeout=60)
        points = np.zeros((20000, 2)).ravel().tolist()
        with self.assertRaises(grpc.RpcError) as ctx:
            s.queries.GetKoopman(pb.KoopmanRequest(model="m0", points=points), timeout=30)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("--max-query-mb", ctx.exception.details())
        s.queries.GetKoopman(pb.KoopmanRequest(model="m0", points=points[:200]), timeout=30)
        s.close()
        # The refused model left nothing behind: a restart has exactly the models made.
        self.kill9(d)
        d = self.start(data, "--max-memory", "300M")
        self.assertEqual(len(self.digests(d)), made)


if __name__ == "__main__":
    unittest.main(verbosity=2)
