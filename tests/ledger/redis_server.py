"""A real ``redis-server`` for the tests: its own port and folder, append-only persistence with an
fsync per write (what the Redis ledger store asks of production), started, stopped and restarted."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.support.processes import free_port

BINARY = shutil.which("redis-server")


class RedisServer:
    def __init__(self, folder: Path) -> None:
        if BINARY is None:
            raise RuntimeError("redis-server is not installed")
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        args = [
            BINARY, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
            "--logfile", str(self.folder / "redis.log"),
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(self.folder / 'redis.log').read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError("redis-server did not answer PING")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
        self.proc = None

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(64)
