"""A real hub process on the test's database, and Debian's Chromium driven by Playwright (the
system's browser: nothing is downloaded)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.cli import mycelium, without_proxies

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[object]:
    if not Path(CHROMIUM).exists():
        if os.environ.get("MYCELIUM_REQUIRE_BROWSER") == "1":  # set by .ci/run: CI never skips these
            pytest.fail("chromium is not installed (MYCELIUM_REQUIRE_BROWSER=1)")
        pytest.skip("chromium is not installed")
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture
def hub_url(hub_processes) -> str:
    """A `mycelium up` process on this test's database (tests/support/hubs.py)."""
    return hub_processes().url


@pytest.fixture
def cli(hub_url: str):
    """Run the `mycelium` CLI against the hub, as an agent would."""

    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return mycelium(*args, url=hub_url, base=without_proxies(), timeout=timeout)

    return run
