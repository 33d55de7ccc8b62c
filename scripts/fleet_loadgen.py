#!/usr/bin/python3
"""Fleet load generator: N models of 1 or 8 channels in one real cmestreamd over loopback.

    PYTHONPATH=build/python:client/python /usr/bin/python3 scripts/fleet_loadgen.py \
        --cmestreamd build/service/cmestreamd --models 100 --channels 1 --pairs 2000

Starts its own daemon (--cmestreamd, a fresh data directory under /tmp, removed at the end;
--daemon-arg passes flags through, e.g. --daemon-arg=--max-memory=20G) or uses a running one
(--server HOST:PORT, RSS then from its /metrics). Then:
  1. creates the models (default options: sigma auto, alarms on; `--config key=value` adds
     ModelConfig fields), timing each CreateModel (with --create-with-wave: each just before
     its first batch, so a fleet grows as it is fed);
  2. feeds every model `--pairs` pairs of a real-shaped series (seeded per model: two cycles of
     random periods and phases, Gaussian noise, level shifts at random times; 8 channels mix
     the cycles with random weights) as trajectory batches of `--batch` pairs (IngestOne, one
     producer per model, episode continued across batches), from `--workers` threads, round
     robin over the models (with --wave W: over waves of W models, each fed to its end before
     the next, so earlier waves idle and can be evicted), paced at `--rate` pairs/s per model
     (0: as fast as the daemon takes them; the pace counts from the feed's start); reports
     IngestOne calls/s and the log's fdatasyncs/s (group commit);
  3. meanwhile one probe thread calls GetModel and GetKoopman (top 6, no points) on a random
     model in a loop;
  4. reads the daemon's resident memory (/proc/PID/status VmRSS) after start, after the
     creations and after the feed, and its CPU time during the feed (/proc/PID/stat: the CPU a
     pair costs, which the machine's other load does not change much), sums the models' alarms
     (ListModels) and reads the memory budget's series (what the models are charged, batches at
     a budget cap) and the refresh scheduler's (views built, their CPU time, the refresh budget,
     views stale and pairs behind them after the feed) from /metrics.
  5. with --evict-wait S (and the daemon started with --evict-idle-seconds, e.g.
     --daemon-arg=--evict-idle-seconds=30): an idle phase of up to S seconds until every model
     is evicted (cmestream_models{state="evicted"}), RSS then;
  6. with --restart: every model's state digest, counters and alarm count (GetModel), a snapshot
     (its time and the daemon's peak RSS during it, sampled every 0.1 s), SIGTERM (its shutdown
     snapshot; time to exit), the daemon started again on the same data directory (time from
     the start to its listening line: recovery done, serving), RSS then, and every model's
     digest, counters and alarms again (equal before/after);
  7. with --evict-wait (unless --no-touch), a touch phase after that: every model
     once, in a random order, one GetKoopman (answered from the evicted model's view), then one
     IngestOne of --batch new pairs (which loads the model back), each call timed (first-reply
     latency p50/p99), the reload time from cmestream_model_reload_seconds, and RSS after.
Prints a report and, with --json FILE, writes it as JSON. Latencies are wall-clock per call in
this (Python) process, so they include its own serialization and GIL waits: an upper bound on
the daemon's.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import urllib.request

import grpc
import numpy as np

from cmestream.testing import Daemon
from cmestream.v1 import cmestream_pb2 as pb
from cmestream.v1 import cmestream_pb2_grpc as pb_grpc


def series(index: int, rows: int, channels: int, seed: int) -> np.ndarray:
    """A real-shaped series for model `index`: cycles + noise + level shifts, (rows, channels)."""
    rng = np.random.default_rng([seed, index])
    t = np.arange(rows, dtype=float)
    periods = rng.uniform(20, 200, size=2)
    phases = rng.uniform(0, 2 * np.pi, size=2)
    cycles = np.stack([np.sin(2 * np.pi * t / periods[k] + phases[k]) for k in range(2)], axis=1)
    weights = rng.normal(size=(2, channels)) if channels > 1 else np.array([[1.0], [0.4]])
    out = cycles @ weights
    out += rng.normal(scale=rng.uniform(0.05, 0.3), size=(rows, channels))
    for _ in range(rng.integers(0, 3)):  # 0-2 level shifts
        at = int(rng.integers(rows // 4, rows))
        out[at:] += rng.normal(scale=2.0, size=channels)
    return out * rng.uniform(0.5, 20) + rng.uniform(-100, 100)


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metric_value(metrics_target: str, name: str) -> float:
    with urllib.request.urlopen(f"http://{metrics_target}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{}"):
                return float(line.split()[-1])
    return float("nan")


def pct(values, q):
    return float(np.percentile(values, q)) * 1e3 if values else float("nan")


def parse_config(items):
    cfg = {}
    for item in items:
        key, _, value = item.partition("=")
        field = pb.ModelConfig.DESCRIPTOR.fields_by_name[key]
        if field.label == field.LABEL_REPEATED:
            cfg[key] = [int(v) for v in value.split(",") if v]
        elif field.type in (field.TYPE_DOUBLE, field.TYPE_FLOAT):
            cfg[key] = float(value)
        elif field.type == field.TYPE_STRING:
            cfg[key] = value
        else:
            cfg[key] = int(value)
    return cfg


def wait_evicted(report, args, live, metrics_target, rss):
    """Idle until every model is evicted (or --evict-wait passed); RSS then."""
    start = time.monotonic()
    evicted = 0.0
    while time.monotonic() - start < args.evict_wait:
        evicted = metric_value(metrics_target, 'cmestream_models{state="evicted"}')
        if evicted >= len(live):
            break
        time.sleep(0.5)
    report["evicted"] = evicted
    report["evict_seconds"] = time.monotonic() - start
    time.sleep(1.0)
    report["rss_after_evict"] = rss()
    report["rss_per_model_evicted"] = (report["rss_after_evict"] - report["rss_start"]) / max(1, len(live))


def model_states(models, live):
    """Per model: (state digest, samples, batches, alarms raised, producer offset), and how many are evicted."""
    states, evicted = {}, 0
    for name in live:
        info = models.GetModel(pb.GetModelRequest(name=name, with_state_digest=True), timeout=120)
        states[name] = (info.state_digest, info.samples, info.batches_applied, info.alarms.alarms_total)
        evicted += 1 if info.evicted else 0
    return states, evicted


def restart_phase(report, args, live, daemon, channel_for, rss):
    """Snapshot (peak RSS sampled), SIGTERM (its shutdown snapshot), start again on the same data dir.

    Returns the new daemon's (channel, models, ingest, queries, metrics target)."""
    channel, models, _, _ = channel_for(daemon.grpc_target)
    before, report["evicted_before_restart"] = model_states(models, live)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss())
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    s = time.monotonic()
    snap = models.Snapshot(pb.SnapshotRequest(), timeout=3600)
    report["snapshot_seconds"] = time.monotonic() - s
    done.set()
    sampler.join()
    report["snapshot_bytes"] = snap.bytes
    report["rss_peak_snapshot"] = peak[0]
    report["rss_before_stop"] = rss()
    channel.close()
    s = time.monotonic()
    report["stop_code"] = daemon.stop(timeout=3600)
    report["stop_seconds"] = time.monotonic() - s  # includes the shutdown snapshot
    s = time.monotonic()
    daemon.start(timeout=3600)  # returns at the listening line: recovery done, serving
    report["restart_ready_seconds"] = time.monotonic() - s
    time.sleep(1.0)
    report["rss_after_restart"] = rss()
    channel, models, ingest, queries = channel_for(daemon.grpc_target)
    after, report["evicted_after_restart"] = model_states(models, live)
    report["restart_digests_equal"] = sum(1 for n in live if before[n] == after.get(n))
    report["restart_models"] = len(after)
    if report["restart_digests_equal"] != len(live):
        bad = [n for n in live if before[n] != after.get(n)]
        report["restart_first_difference"] = (bad[0], before[bad[0]], after.get(bad[0]))
    return channel, models, ingest, queries, daemon.metrics_target


def touch_phase(report, args, live, data, ingest, queries, metrics_target, rss):
    """Every model once, in a random order: a view query, then a batch (which reloads an evicted model)."""
    order = list(live)
    random.Random(args.seed).shuffle(order)
    koopman_lat, ingest_lat = [], []
    for name in order:
        s = time.monotonic()
        while True:
            try:
                queries.GetKoopman(pb.KoopmanRequest(model=name, top=6), timeout=60)
                koopman_lat.append(time.monotonic() - s)
            except grpc.RpcError as e:
                # UNAVAILABLE: restored evicted at a restart, loaded back to build its view; retried
                # (the time until the view answers is timed).
                if e.code() == grpc.StatusCode.UNAVAILABLE and time.monotonic() - s < 60:
                    time.sleep(0.02)
                    continue
                if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    raise
            break
        rows = data[name][args.pairs:args.pairs + args.batch + 1]
        s = time.monotonic()
        ingest.IngestOne(pb.IngestBatch(model=name, producer_id="p", offset=args.pairs, states=rows.ravel(),
                                        episode_id="e"), timeout=120)
        ingest_lat.append(time.monotonic() - s)
    reload_sum = metric_value(metrics_target, "cmestream_model_reload_seconds_sum")
    reloads = metric_value(metrics_target, "cmestream_model_reload_seconds_count")
    report.update({
        "touch_order": order,
        "touch_koopman_p50_ms": pct(koopman_lat, 50), "touch_koopman_p99_ms": pct(koopman_lat, 99),
        "touch_ingest_p50_ms": pct(ingest_lat, 50), "touch_ingest_p99_ms": pct(ingest_lat, 99),
        "reloads": reloads, "reload_mean_ms": 1e3 * reload_sum / reloads if reloads else float("nan"),
    })
    time.sleep(1.0)
    report["rss_after_touch"] = rss()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cmestreamd", help="start this daemon binary (own data dir, loopback port 0)")
    ap.add_argument("--server", help="use a running daemon at HOST:PORT instead")
    ap.add_argument("--metrics", help="its metrics HOST:PORT (with --server, for RSS)")
    ap.add_argument("--daemon-arg", action="append", default=[], help="a flag for the started daemon")
    ap.add_argument("--models", type=int, default=100)
    ap.add_argument("--channels", type=int, default=1)
    ap.add_argument("--pairs", type=int, default=2000, help="pairs per model")
    ap.add_argument("--batch", type=int, default=200, help="pairs per IngestOne call")
    ap.add_argument("--rate", type=float, default=0, help="pairs/s per model (0: unpaced)")
    ap.add_argument("--workers", type=int, default=8, help="threads sending batches")
    ap.add_argument("--wave", type=int, default=0,
                    help="feed the models in waves of this many, one wave after another (0: all round robin)")
    ap.add_argument("--create-with-wave", action="store_true",
                    help="with --wave: create each model just before its first batch, not all up front")
    ap.add_argument("--create-retry-seconds", type=float, default=60,
                    help="with --create-with-wave: retry a creation refused for memory this long (0: never)")
    ap.add_argument("--no-probe", action="store_true", help="no GetModel/GetKoopman probe")
    ap.add_argument("--config", action="append", default=[], help="ModelConfig field=value for every model")
    ap.add_argument("--prefix", default="fleet")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("--evict-wait", type=float, default=0,
                    help="seconds to wait for every model to be evicted, then touch each (0: no idle phase)")
    ap.add_argument("--no-touch", action="store_true",
                    help="with --evict-wait: no touch phase (e.g. a restart of many models, whose touch would take long)")
    ap.add_argument("--restart", action="store_true",
                    help="after the feed (and the eviction wait): snapshot, SIGTERM, start again on the same data "
                         "dir; time to ready, RSS, state digests before/after (needs --cmestreamd)")
    args = ap.parse_args()
    if bool(args.cmestreamd) == bool(args.server):
        ap.error("give exactly one of --cmestreamd and --server")
    if args.restart and not args.cmestreamd:
        ap.error("--restart needs --cmestreamd")

    data_dir = None
    daemon = None
    if args.cmestreamd:
        data_dir = tempfile.mkdtemp(prefix=f"fleet-loadgen-{os.getpid()}-")
        daemon = Daemon(args.cmestreamd, data_dir, extra_args=args.daemon_arg).start()
        target, metrics_target = daemon.grpc_target, daemon.metrics_target
    else:
        target, metrics_target = args.server, args.metrics

    def cpu():
        return cpu_seconds(daemon.process.pid) if daemon is not None else float("nan")

    def rss():
        if daemon is not None:
            return rss_bytes(daemon.process.pid)
        return metric_value(metrics_target, "process_resident_memory_bytes") if metrics_target else float("nan")

    report = {"models": args.models, "channels": args.channels, "pairs_per_model": args.pairs,
              "batch": args.batch, "rate_per_model": args.rate, "workers": args.workers,
              "config": args.config, "daemon_args": args.daemon_arg}
    opts = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 256 << 20)]

    def channel_for(grpc_target):
        ch = grpc.insecure_channel(grpc_target, options=opts)
        return ch, pb_grpc.ModelServiceStub(ch), pb_grpc.IngestServiceStub(ch), pb_grpc.QueryServiceStub(ch)

    channel, models, ingest, queries = channel_for(target)
    try:
        time.sleep(0.5)
        report["rss_start"] = rss()
        names = [f"{args.prefix}-{i}" for i in range(args.models)]
        extra = parse_config(args.config)
        create_lat = []
        refused = []
        t0 = time.monotonic()
        for name in ([] if args.create_with_wave else names):
            s = time.monotonic()
            try:
                models.CreateModel(pb.CreateModelRequest(config=pb.ModelConfig(name=name, dim=args.channels, **extra)))
            except grpc.RpcError as e:
                refused.append((name, e.code().name, e.details()))
                continue
            create_lat.append(time.monotonic() - s)
        report["create_seconds"] = time.monotonic() - t0
        report["create_p99_ms"] = pct(create_lat, 99)
        report["created"] = len(create_lat)
        report["create_refused"] = len(refused)
        if refused:
            report["first_refusal"] = refused[0]
            print(f"refused {len(refused)} creations, first: {refused[0]}", file=sys.stderr)
        live = [n for n in names if n not in {r[0] for r in refused}]
        time.sleep(1.0)
        report["rss_after_create"] = rss()

        # Series: rows = pairs + 1 per model (a trajectory of n rows is n - 1 pairs).
        touch = args.batch if args.evict_wait > 0 else 0  # pairs sent to each model after its eviction
        data = {n: series(i, args.pairs + 1 + touch, args.channels, args.seed)
                for i, n in enumerate(names) if n in set(live)}
        batches_per_model = (args.pairs + args.batch - 1) // args.batch
        # The work list: batch k of every model, then batch k + 1 (round robin); with --wave W,
        # the models in waves of W, each wave fed to the end before the next starts (so the
        # earlier waves idle, and with --evict-idle-seconds get evicted, while later ones feed).
        wave = args.wave if args.wave > 0 else max(1, len(live))
        work = [(k, n) for w in range(0, len(live), wave)
                for k in range(batches_per_model) for n in live[w:w + wave]]
        lock = threading.Lock()
        next_item = [0]
        ingest_lat = []
        errors = []
        pairs_done = [0]
        alarms_raised = [0]
        fsyncs_before = metric_value(metrics_target, "cmestream_wal_fsync_seconds_count") if metrics_target else float("nan")
        feed_start = time.monotonic()
        cpu_start = cpu()
        stop_probe = threading.Event()
        refused_names = set()  # creations refused during the feed (--create-with-wave)
        creating = set()  # creations in progress (retrying), whose later batches wait
        create_retries = [0]

        def worker():
            lat = []
            while True:
                with lock:
                    if next_item[0] >= len(work):
                        break
                    k, name = work[next_item[0]]
                    next_item[0] += 1
                    if args.create_with_wave and k == 0:
                        creating.add(name)  # its later batches wait for its creation
                if args.rate > 0:
                    due = feed_start + k * args.batch / args.rate
                    wait = due - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                if args.create_with_wave and k > 0:
                    while True:  # its creation may be waiting for room (below)
                        with lock:
                            if name not in creating:
                                break
                        time.sleep(0.05)
                    with lock:
                        if name in refused_names:
                            continue  # its creation was refused: nothing to feed
                if args.create_with_wave and k == 0:
                    # the model is created just before its first batch (its wave's turn); a
                    # creation refused for memory (RESOURCE_EXHAUSTED: the budget is full until
                    # idle models are evicted) is retried for --create-retry-seconds, as a
                    # producer should
                    s = time.monotonic()
                    while True:
                        try:
                            models.CreateModel(pb.CreateModelRequest(
                                config=pb.ModelConfig(name=name, dim=args.channels, **extra)))
                            with lock:
                                create_lat.append(time.monotonic() - s)
                                creating.discard(name)
                            break
                        except grpc.RpcError as e:
                            if (e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                                    and time.monotonic() - s < args.create_retry_seconds):
                                with lock:
                                    create_retries[0] += 1
                                time.sleep(0.5)
                                continue
                            with lock:
                                refused.append((name, e.code().name, e.details()))
                                refused_names.add(name)
                                creating.discard(name)
                            break
                    if name in refused_names:
                        continue
                rows = data[name][k * args.batch:min((k + 1) * args.batch, args.pairs) + 1]
                req = pb.IngestBatch(model=name, producer_id="p", offset=k * args.batch, states=rows.ravel(),
                                     episode_id="e")
                s = time.monotonic()
                for attempt in range(50):
                    try:
                        ack = ingest.IngestOne(req, timeout=120)
                        break
                    except grpc.RpcError as e:
                        if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and attempt < 49:
                            time.sleep(0.1)
                            continue
                        with lock:
                            errors.append((name, k, e.code().name, e.details()))
                        ack = None
                        break
                lat.append(time.monotonic() - s)
                if ack is not None:
                    with lock:
                        pairs_done[0] += ack.pairs_applied
                        alarms_raised[0] += ack.effects.alarms_raised
            with lock:
                ingest_lat.extend(lat)

        getmodel_lat, koopman_lat = [], []

        def probe():
            rng = random.Random(args.seed)
            while not stop_probe.is_set() and live:
                name = rng.choice(live)
                s = time.monotonic()
                try:
                    models.GetModel(pb.GetModelRequest(name=name), timeout=60)
                except grpc.RpcError as e:  # not created yet (--create-with-wave): not timed
                    if e.code() != grpc.StatusCode.NOT_FOUND:
                        raise
                    time.sleep(0.01)
                    continue
                getmodel_lat.append(time.monotonic() - s)
                s = time.monotonic()
                try:
                    queries.GetKoopman(pb.KoopmanRequest(model=name, top=6), timeout=60)
                    koopman_lat.append(time.monotonic() - s)
                except grpc.RpcError as e:  # no view yet (still in its warm-up): not timed
                    if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
                        raise
                time.sleep(0.01)

        # Daemon threads: an interrupt (Ctrl-C) ends the run, stopping the daemon it started.
        threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.workers)]
        prober = None if args.no_probe else threading.Thread(target=probe, daemon=True)
        if prober:
            prober.start()
        for t in threads:
            t.start()
        rss_peak = 0
        while any(t.is_alive() for t in threads):
            rss_peak = max(rss_peak, rss())
            time.sleep(0.5)
        for t in threads:
            t.join()
        feed_seconds = time.monotonic() - feed_start
        feed_cpu = cpu() - cpu_start
        stop_probe.set()
        if prober:
            prober.join()
        report.update({
            "feed_seconds": feed_seconds, "pairs_applied": pairs_done[0],
            "pairs_per_s": pairs_done[0] / feed_seconds, "ingest_calls": len(ingest_lat),
            "ingest_p50_ms": pct(ingest_lat, 50), "ingest_p99_ms": pct(ingest_lat, 99),
            "ingest_errors": len(errors), "getmodel_calls": len(getmodel_lat),
            "getmodel_p50_ms": pct(getmodel_lat, 50), "getmodel_p99_ms": pct(getmodel_lat, 99),
            "koopman_calls": len(koopman_lat), "koopman_p50_ms": pct(koopman_lat, 50),
            "koopman_p99_ms": pct(koopman_lat, 99), "alarms_raised": alarms_raised[0],
            "rss_peak_during_feed": rss_peak, "daemon_cpu_seconds": feed_cpu,
            "daemon_cpu_us_per_pair": 1e6 * feed_cpu / max(1, pairs_done[0]),
        })
        if errors:
            report["first_error"] = errors[0]
        if metrics_target:
            # The log's durable writes: one fdatasync covers every record written while the
            # previous one ran (group commit across models and producers).
            fsyncs = metric_value(metrics_target, "cmestream_wal_fsync_seconds_count") - fsyncs_before
            report["wal_fsyncs_per_s"] = fsyncs / feed_seconds
            report["ingest_calls_per_s"] = len(ingest_lat) / feed_seconds
            report["ingest_calls_per_fsync"] = len(ingest_lat) / max(fsyncs, 1)
        if args.create_with_wave:
            report["created"], report["create_refused"] = len(create_lat), len(refused)
            report["create_retries"] = create_retries[0]
            report["create_p99_ms"] = pct(create_lat, 99)
            if refused:
                report["first_refusal"] = refused[0]
                live = [n for n in live if n not in refused_names]  # the later phases see what exists
        time.sleep(1.0)
        report["rss_after_feed"] = rss()
        infos, token = [], ""
        while True:  # pages of 1,000 (a fleet's list in one reply can exceed a message's size)
            page = models.ListModels(pb.ListModelsRequest(page_size=1000, page_token=token), timeout=120)
            infos.extend(page.models)
            token = page.next_page_token
            if not token:
                break
        report["models_listed"] = len(infos)
        report["alarms_armed"] = sum(1 for m in infos if m.alarms.enabled and m.alarms.armed_at >= 0)
        report["alarms_total"] = sum(m.alarms.alarms_total for m in infos)
        report["dictionary_mean"] = float(np.mean([m.dictionary_size for m in infos])) if infos else 0
        if metrics_target:
            for key, name in (("memory_budget", "cmestream_memory_budget_bytes"),
                              ("memory_committed", "cmestream_memory_committed_bytes"),
                              ("growth_denied", "cmestream_dictionary_growth_denied_total"),
                              ("refreshes_periodic", 'cmestream_refreshes_total{trigger="periodic"}'),
                              ("refreshes_requested", 'cmestream_refreshes_total{trigger="requested"}'),
                              ("refresh_cpu_seconds", "cmestream_refresh_cpu_seconds_total"),
                              ("refresh_budget", "cmestream_refresh_budget"),
                              ("views_stale", "cmestream_views_stale"),
                              ("view_lag_pairs", "cmestream_view_lag_pairs")):
                report[key] = metric_value(metrics_target, name)
        if args.evict_wait > 0:
            wait_evicted(report, args, live, metrics_target, rss)
        if args.restart:
            channel.close()
            channel, models, ingest, queries, metrics_target = restart_phase(report, args, live, daemon, channel_for,
                                                                             rss)
        if args.evict_wait > 0 and not args.no_touch:
            touch_phase(report, args, live, data, ingest, queries, metrics_target, rss)
        n = max(1, report["created"])
        report["rss_per_model_empty"] = (report["rss_after_create"] - report["rss_start"]) / n
        report["rss_per_model_fed"] = (report["rss_after_feed"] - report["rss_start"]) / n
    finally:
        channel.close()
        if daemon is not None and daemon.process is not None:
            daemon.stop(timeout=3600)
        if data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)

    mib = 1 / (1 << 20)
    print(f"fleet: {report['created']} models x {args.channels} channels, {args.pairs} pairs each, "
          f"batch {args.batch}, rate {args.rate or 'unpaced'} pairs/s/model, {args.workers} workers")
    print(f"  create: {report['create_seconds']:.1f} s, p99 {report['create_p99_ms']:.1f} ms, "
          f"refused {report['create_refused']}, retries {report.get('create_retries', 0)}")
    print(f"  RSS: start {report['rss_start'] * mib:.1f} MiB, after create {report['rss_after_create'] * mib:.1f} MiB "
          f"({report['rss_per_model_empty'] * mib:.2f} MiB/model), after feed {report['rss_after_feed'] * mib:.1f} MiB "
          f"({report['rss_per_model_fed'] * mib:.2f} MiB/model), peak {report['rss_peak_during_feed'] * mib:.1f} MiB")
    print(f"  feed: {report['pairs_applied']} pairs in {report['feed_seconds']:.1f} s = {report['pairs_per_s']:.0f} pairs/s; "
          f"IngestOne p50 {report['ingest_p50_ms']:.1f} ms p99 {report['ingest_p99_ms']:.1f} ms; "
          f"errors {report['ingest_errors']}")
    if "wal_fsyncs_per_s" in report:
        print(f"  durable writes: {report['ingest_calls_per_s']:.0f} IngestOne calls/s, "
              f"{report['wal_fsyncs_per_s']:.0f} fdatasyncs/s ({report['ingest_calls_per_fsync']:.1f} calls a sync)")
    print(f"  daemon CPU during the feed: {report['daemon_cpu_seconds']:.1f} s "
          f"({report['daemon_cpu_us_per_pair']:.1f} us a pair)")
    print(f"  probe: GetModel p50 {report['getmodel_p50_ms']:.1f} p99 {report['getmodel_p99_ms']:.1f} ms "
          f"({report['getmodel_calls']}), GetKoopman p50 {report['koopman_p50_ms']:.1f} "
          f"p99 {report['koopman_p99_ms']:.1f} ms ({report['koopman_calls']})")
    if "memory_committed" in report:
        print(f"  budget: {report['memory_committed'] * mib:.0f} MiB charged of {report['memory_budget'] * mib:.0f} MiB; "
              f"batches at a budget cap: {report['growth_denied']:.0f}")
    if "refreshes_periodic" in report:
        print(f"  refreshes: {report['refreshes_periodic']:.0f} periodic + {report['refreshes_requested']:.0f} "
              f"requested, {report['refresh_cpu_seconds']:.1f} CPU s (budget {report['refresh_budget']:g} core); "
              f"after the feed {report['views_stale']:.0f} views stale, {report['view_lag_pairs']:.0f} pairs behind")
    print(f"  alarms: armed on {report['alarms_armed']} of {report['models_listed']} models, "
          f"{report['alarms_total']} raised; mean dictionary {report['dictionary_mean']:.1f} atoms")
    if args.evict_wait > 0:
        print(f"  evict: {report['evicted']:.0f} of {len(report.get('touch_order', [])) or report['created']} models "
              f"evicted {report['evict_seconds']:.1f} s after the feed; RSS then {report['rss_after_evict'] * mib:.1f} MiB "
              f"({report['rss_per_model_evicted'] * mib:.3f} MiB/model)")
    if args.evict_wait > 0 and not args.no_touch:
        print(f"  touch: first GetKoopman p50 {report['touch_koopman_p50_ms']:.1f} p99 "
              f"{report['touch_koopman_p99_ms']:.1f} ms (evicted, no reload); first IngestOne p50 "
              f"{report['touch_ingest_p50_ms']:.1f} p99 {report['touch_ingest_p99_ms']:.1f} ms (reload + batch); "
              f"reloads {report['reloads']:.0f}, mean reload {report['reload_mean_ms']:.2f} ms; "
              f"RSS after {report['rss_after_touch'] * mib:.1f} MiB")
        report.pop("touch_order", None)
    if args.restart:
        print(f"  restart: {report['evicted_before_restart']} of {report['created']} models evicted; snapshot "
              f"{report['snapshot_bytes'] / 1e6:.0f} MB in {report['snapshot_seconds']:.1f} s, RSS peak during it "
              f"{report['rss_peak_snapshot'] * mib:.0f} MiB (before {report['rss_before_stop'] * mib:.0f} MiB); "
              f"SIGTERM to exit {report['stop_seconds']:.1f} s (code {report['stop_code']}); start to ready "
              f"{report['restart_ready_seconds']:.1f} s; RSS after {report['rss_after_restart'] * mib:.0f} MiB; "
              f"{report['evicted_after_restart']} evicted after; digests equal {report['restart_digests_equal']} of "
              f"{len(live)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if not report.get("ingest_errors") else 1


if __name__ == "__main__":
    sys.exit(main())
