"""Real hub processes for tests: start `mycelium up`, wait until it answers, stop it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CliProcess:
    """A `mycelium …` subprocess with its output in a log file: started, signalled, killed, stopped."""

    def __init__(self, args: Sequence[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        self._log = open(log, "w")  # noqa: SIM115 - closed when the process is stopped
        self.proc = subprocess.Popen([sys.executable, "-m", "mycelium.cli.main", *args], stdout=self._log,
                                     stderr=subprocess.STDOUT, env={**os.environ, **env})

    def signal(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self._log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        elif not self._log.closed:
            self._log.close()


class HubProcess(CliProcess):
    """A `mycelium up` subprocess on a free port."""

    def __init__(self, *, data_dir: Path, database_url: str | None = None, extra: Sequence[str] = (),
                 env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = data_dir
        args = ["up", "--port", str(self.port), "--data-dir", str(data_dir), *extra]
        if database_url:
            args += ["--database-url", database_url]
        data_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(args, data_dir.parent / f"hub-{self.port}.log", {"MYCELIUM_EMBEDDER": "none", **(env or {})})

    def wait_ready(self, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hub exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                r = httpx.get(self.url + "/health", timeout=1.0)
                if r.status_code == 200:
                    return r.json()
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"hub not ready:\n{self.log.read_text()}")
