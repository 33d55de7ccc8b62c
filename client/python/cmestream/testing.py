"""Helpers to run a real cmestreamd for tests and demos: Daemon starts it on loopback port 0
with its own data directory, reads the bound ports from its first stdout line
(`cmestreamd listening grpc=HOST:PORT metrics=HOST:PORT`) and stops it with SIGTERM."""
from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time
from typing import Optional

_LISTENING = re.compile(r"cmestreamd listening grpc=(\S+) metrics=(\S+)")


class Daemon:
    def __init__(self, binary: str, data_dir: str, refresh_interval: Optional[float] = None,
                 log_path: Optional[str] = None, extra_args=(), listen: str = "127.0.0.1:0"):
        self.binary = binary
        self.listen = listen
        self.data_dir = data_dir
        self.refresh_interval = refresh_interval
        self.log_path = log_path or os.path.join(data_dir, "cmestreamd.log")
        self.extra_args = list(extra_args)
        self.process: Optional[subprocess.Popen] = None
        self.grpc_target = ""
        self.metrics_target = ""

    def start(self, timeout: float = 20.0) -> "Daemon":
        os.makedirs(self.data_dir, exist_ok=True)
        args = [self.binary, "--listen", self.listen, "--data-dir", self.data_dir,
                "--metrics-listen", "127.0.0.1:0"]
        if self.refresh_interval is not None:
            args += ["--refresh-interval", str(self.refresh_interval)]
        args += self.extra_args
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._log)
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.2)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 4096)
                if not chunk:
                    break
                line += chunk
                m = _LISTENING.search(line.decode(errors="replace"))
                if m:
                    self.grpc_target, self.metrics_target = m.group(1), m.group(2)
                    return self
            if self.process.poll() is not None:
                break
        self.stop()
        with open(self.log_path, errors="replace") as f:
            log = f.read()[-2000:]
        raise RuntimeError(f"cmestreamd did not report its ports (stdout {line!r}); log:\n{log}")

    def stop(self, timeout: float = 15.0) -> Optional[int]:
        """SIGTERM, then wait; returns the exit code (SIGKILL after `timeout`, code then < 0)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        code = self.process.returncode
        self.process.stdout.close()
        self._log.close()
        self.process = None
        return code

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class Stubs:
    """The three raw gRPC stubs on one insecure channel, for tests that speak the wire protocol
    directly (explicit producer offsets, hand-built batches, digests)."""

    def __init__(self, target: str):
        import grpc  # imported here: Daemon alone needs no gRPC
        from .v1 import cmestream_pb2_grpc as pb_grpc
        self.channel = grpc.insecure_channel(target)
        self.models = pb_grpc.ModelServiceStub(self.channel)
        self.ingest = pb_grpc.IngestServiceStub(self.channel)
        self.queries = pb_grpc.QueryServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()
