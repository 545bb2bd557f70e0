"""Running one agent process for a runner job: its environment, its folder, its output's tails,
its timeout, and its end when the worker that started it dies.

The process gets a small environment of its own: ``PATH`` (with this Python's scripts first, so
``mycelium`` is the hub's own), ``HOME``, the locale, the variables its runner names (their values
from this process), and the ``MYCELIUM_*`` variables that say where and who it is. It runs in a
session of its own (a timeout ends its whole process group) and, on Linux, is killed with the
worker: a job whose worker died is retried elsewhere, never run twice at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: how much of each stream a job's record keeps (its last characters)
TAIL_CHARS = 8000
#: how long a process told to stop (SIGTERM) has before it is killed
GRACE_SECONDS = 5.0
#: the variables every agent process gets from the worker's environment, when set
BASE_ENV = ("HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "USER", "LOGNAME", "SYSTEMROOT")

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child, between fork and exec
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def agent_env(
    names: Sequence[str], extra: Mapping[str, str], source: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of an agent process: the base variables and ``names`` from ``source`` (this
    process's environment), then ``extra``."""
    source = os.environ if source is None else source
    env = {k: source[k] for k in (*BASE_ENV, *names) if k in source}
    scripts = str(Path(sys.executable).parent)
    path = source.get("PATH", os.defpath)
    env["PATH"] = path if path.split(os.pathsep)[:1] == [scripts] else scripts + os.pathsep + path
    env.update(extra)
    return env


def working_folder(cwd: str, data_dir: Path, room: str) -> Path:
    """Where a job runs: an absolute ``cwd`` as it is, a relative one inside the data folder (the
    database refused any that leads out of it), none: ``<data>/workspaces/<room>``."""
    if cwd and Path(cwd).is_absolute():
        return Path(cwd)
    base = data_dir.resolve()
    folder = (base / cwd).resolve() if cwd else base / "workspaces" / room
    if not folder.is_relative_to(base):  # a symlink inside the data folder that points out of it
        raise OSError(f"cwd {cwd!r} resolves outside the data folder ({folder})")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Tail:
    """The last ``limit`` characters of a stream."""

    def __init__(self, limit: int = TAIL_CHARS) -> None:
        self.limit = limit
        self.text = ""

    def add(self, chunk: bytes) -> None:
        self.text = (self.text + chunk.decode("utf-8", "replace"))[-self.limit:]


@dataclass
class Ended:
    exit_code: int | None
    reason: str | None
    stdout: str
    stderr: str
    seconds: float


async def _drain(stream: asyncio.StreamReader | None, tail: Tail) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        tail.add(chunk)


async def _feed(stream: asyncio.StreamWriter | None, data: bytes | None) -> None:
    """Write ``data`` to the process and close its input (one that exits unread is no error)."""
    if stream is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stream.write(data or b"")
        await stream.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, OSError):
        stream.close()


def _signal_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


async def run_process(
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    on_start: Callable[[int], object] | None = None,
    stop: asyncio.Event | None = None,
    stdin: bytes | None = None,
    stdout_chars: int = TAIL_CHARS,
) -> Ended:
    """Run ``argv`` to its end, its timeout, or ``stop`` (then its group is told to stop, and killed
    ``GRACE_SECONDS`` later). ``on_start`` is called (awaited, if it returns an awaitable) with
    its pid once it runs. ``stdin``: what the process reads (else nothing); ``stdout_chars``: how
    much of its output is kept (its last characters)."""
    began = time.monotonic()
    out, err = Tail(stdout_chars), Tail()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=str(cwd), env=dict(env),
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, preexec_fn=_die_with_parent,
        )
    except OSError as exc:
        why = f"could not start {argv[0]!r}: {exc.strerror or exc}"
        return Ended(None, why, "", "", time.monotonic() - began)
    reason: str | None = None
    drains = asyncio.gather(_drain(proc.stdout, out), _drain(proc.stderr, err), _feed(proc.stdin, stdin))
    try:
        if on_start is not None:
            started = on_start(proc.pid)
            if asyncio.iscoroutine(started):
                await started
        waiting = asyncio.ensure_future(proc.wait())
        watchers = [waiting]
        if stop is not None:
            watchers.append(asyncio.ensure_future(stop.wait()))
        done, _ = await asyncio.wait(watchers, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for w in watchers[1:]:
            w.cancel()
        if waiting not in done:
            reason = (f"timed out after {timeout:g} s" if not (stop is not None and stop.is_set())
                      else "stopped: its worker gave the job up")
            _signal_group(proc, signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(waiting), GRACE_SECONDS)
            except TimeoutError:
                _signal_group(proc, signal.SIGKILL)
                await waiting
    except BaseException:
        _signal_group(proc, signal.SIGKILL)  # cancelled (the worker stops): the process goes too
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.wait(), GRACE_SECONDS)
        drains.cancel()
        raise
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(drains, 2.0)  # a grandchild may hold the pipes open: stop reading
    code = proc.returncode
    if reason is None and code is not None and code < 0:
        reason = f"killed by signal {-code} ({signal.Signals(-code).name})"
    return Ended(code, reason, out.text, err.text, time.monotonic() - began)
