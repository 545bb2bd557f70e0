"""The `mycelium` command as a user types it: one subprocess per call (the entry point as the
``mycelium`` script calls it), for every test that drives the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def mycelium(*args: str, url: str | None = None, env: Mapping[str, str] | None = None,
             ok: bool | None = None, stdin: str | None = None, timeout: float = 60,
             cwd: str | Path | None = None, base: Mapping[str, str] | None = None,
             module: str = "mycelium.cli.main") -> subprocess.CompletedProcess[str]:
    """Run ``python -m mycelium.cli.main *args`` and capture its output.

    ``url`` sets MYCELIUM_API_URL; ``env`` is laid over ``base`` (the test's own environment unless
    given); ``ok=True`` asserts it exited 0 and ``ok=False`` that it did not (None: no check);
    ``stdin`` is its standard input (none unless given)."""
    full = dict(os.environ if base is None else base)
    if url is not None:
        full["MYCELIUM_API_URL"] = url
    full.update(env or {})
    out = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=full,
                         input=stdin, timeout=timeout, cwd=cwd)
    if ok is True:
        assert out.returncode == 0, (args, out.stdout, out.stderr)
    elif ok is False:
        assert out.returncode != 0, (args, out.stdout, out.stderr)
    return out


def without_proxies(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment less the proxy variables (a CLI on loopback must not go through one)."""
    return {k: v for k, v in (os.environ if environ is None else environ).items()
            if k.lower() not in PROXY_VARIABLES}
