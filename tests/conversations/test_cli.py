"""The CLI against a real hub process: room send/messages/search/watch, board send/messages <row>,
await and respond, and the await loop that runs a command per message."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from tests.support.cli import mycelium as run_mycelium

pytestmark = pytest.mark.slow


def cli_env(hub_url: str) -> dict[str, str]:
    return {**os.environ, "MYCELIUM_API_URL": hub_url, "MYCELIUM_ROOM": "atlas", "MYCELIUM_HANDLE": "julia"}


async def mycelium(hub_url: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """The CLI off the event loop (the hub it talks to may be this test's); ``ok`` checks it exited 0."""
    return await asyncio.to_thread(run_mycelium, *args, base=cli_env(hub_url), ok=True if ok else None)


async def test_a_conversation_from_the_command_line(hub_process, task):
    hub = hub_process()
    url = hub.url
    sent = json.loads((await mycelium(url, "room", "send", "@bob can you take Apple Pay?", "--json")).stdout)
    assert sent["mentions"] == ["bob"]
    got = json.loads((await mycelium(url, "await", "--handle", "bob", "--timeout", "5", "--json")).stdout)
    assert got["prompt"] == "@bob can you take Apple Pay?" and got["sender"] == "julia"
    nothing = await mycelium(url, "await", "--handle", "bob", "--timeout", "0.2", ok=False)
    assert nothing.returncode == 1
    await mycelium(url, "respond", "--handle", "bob", "yes [[mycelium: stance=accept]]")
    await mycelium(url, "board", "send", task.key, "thread talk @carol", "--as", "api")
    await mycelium(url, "board", "send", task.short, "by short id", "--as", "api")
    thread = (await mycelium(url, "board", "messages", task.key)).stdout
    assert "@api [" in thread and "thread talk @carol" in thread and "by short id" in thread
    room = (await mycelium(url, "room", "messages", "--channel")).stdout
    assert "@bob: yes" in room and "wrote in thread" not in room  # pings are not chat
    found = (await mycelium(url, "room", "search", "from:api in:thread")).stdout
    assert "2 of 2" in found and "[Add Apple Pay]" in found
    problems = await mycelium(url, "room", "search", "stance:maybe", ok=False)
    assert problems.returncode == 1 and "! stance:maybe" in problems.stderr
    carol = json.loads((await mycelium(url, "await", "--handle", "carol", "--task", task.key,
                                       "--timeout", "5", "--json")).stdout)
    assert carol["prompt"] == "thread talk @carol" and carol["episode"] == task.episode
    refused = await mycelium(url, "respond", "--handle", "carol", "--episode", "nosuch", "x", ok=False)
    assert refused.returncode == 1 and "404" in refused.stderr


async def test_the_await_loop_runs_a_command_per_message_and_replies_in_its_thread(
        hub_process, task, tmp_path, admin_conn):
    hub = hub_process()
    head = await admin_conn.fetchval("SELECT last FROM mycelium.message_positions WHERE room = 'atlas'")
    script = tmp_path / "agent.sh"
    script.write_text('#!/bin/sh\nread -r line\necho "done: $MYCELIUM_PROMPT [[mycelium: confidence=0.9]]"\n')
    script.chmod(0o755)
    loop = subprocess.Popen([sys.executable, "-m", "mycelium.cli.main", "await", "--handle", "worker", "--loop",
                             "--timeout", "2", "--exec", str(script)], env=cli_env(hub.url),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watch = subprocess.Popen([sys.executable, "-m", "mycelium.cli.main", "room", "watch", "--json",
                              "--after", str(head)],
                             env=cli_env(hub.url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        await asyncio.sleep(1.5)
        await mycelium(hub.url, "board", "send", task.key, "@worker build it", "--as", "lead")
        await mycelium(hub.url, "room", "send", "@worker and this", "--as", "lead")
        replies = []
        deadline = time.monotonic() + 30
        while len(replies) < 2 and time.monotonic() < deadline:
            line = await asyncio.to_thread(watch.stdout.readline)
            assert line, f"room watch ended: {watch.stderr.read()}"
            m = json.loads(line)
            if m["sender_handle"] == "worker":
                replies.append(m)
        assert [(r["content"], r["episode"] == task.episode) for r in replies] == [
            ("done: @worker build it", True), ("done: @worker and this", False)]
        assert all(r["payload"] == {"confidence": 0.9} for r in replies)
    finally:
        loop.terminate()
        watch.terminate()
        loop.wait(10)
        watch.wait(10)
