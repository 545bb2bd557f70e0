"""The web app in a real browser (headless Chromium) against a real hub process: a person works a
room beside an agent driving the CLI, sees the agent's moves arrive live, is refused by a floor with
its reason, and nothing an agent writes runs as script; every page reads without JavaScript."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import asyncpg
import httpx
import pytest
from playwright.async_api import expect

pytestmark = pytest.mark.slow
LIVE = 5_000  # ms a live change may take to show (the bound is far lower; this is CI slack)


async def open_page(browser, hub_url, *, javascript=True, width=1400, height=900):
    context = await browser.new_context(java_script_enabled=javascript, viewport={"width": width, "height": height})
    page = await context.new_page()
    foreign: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(hub_url) else foreign.append(r.url))
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    return context, page, foreign, dialogs, errors


async def test_a_person_and_an_agent_work_a_room_live(browser, hub_url, cli, db_dsn, tmp_path):
    context, page, foreign, dialogs, errors = await open_page(browser, hub_url)
    await page.goto(hub_url + "/")
    await page.fill("input[name=name]", "atlas")
    await page.fill("form[action='/rooms'] input[name=handle]", "ana")
    await page.click("text=Create room")
    await expect(page).to_have_url(hub_url + "/room/atlas")

    # the person files two tasks, the second depending on the first
    await page.fill("[data-file-task] input[name=title]", "Ship passkey login")
    await page.fill("[data-file-task] input[name=assignee]", "julia")
    await page.click("[data-file-task] button")
    await page.fill("[data-file-task] input[name=title]", "Review login")
    await page.fill("[data-file-task] input[name=depends_on]", "work/ship-passkey-login")
    await page.click("[data-file-task] button")
    needs = page.locator(".col-needs_you")
    await expect(needs.locator(".card", has_text="Ship passkey login")).to_be_visible()
    await expect(needs.locator(".card", has_text="Review login")).to_contain_text("waits on work/ship-passkey-login")
    await expect(page.locator("[data-live-state]")).to_have_text("live")

    # the agent claims one from the CLI: the card moves to in flight without a reload
    marker = await page.evaluate("window.__marker = Math.random()")
    claimed = cli("board", "claim", "-r", "atlas", "work/ship-passkey-login", "--as", "nova")
    assert claimed.returncode == 0, claimed.stderr
    flight = page.locator(".col-in_flight .card", has_text="Ship passkey login")
    await expect(flight).to_contain_text("held by @nova", timeout=LIVE)
    await expect(flight.locator(".lease")).to_contain_text("left")
    await expect(page.locator(".timeline")).to_contain_text("@nova claimed")

    # … and writes in its thread: one folded line quoting it appears live
    started = time.monotonic()
    said = cli("respond", "-r", "atlas", "--handle", "nova", "--task", "work/ship-passkey-login",
               "On it. @ana can you review?")
    assert said.returncode == 0, said.stderr
    thread_line = page.locator(".line.thread", has_text="On it.")
    await expect(thread_line).to_be_visible(timeout=LIVE)
    print(f"\nan agent's message appeared in the open page {1000 * (time.monotonic() - started):.0f} ms after "
          "the CLI was started")
    assert await page.evaluate("window.__marker") == marker  # no reload happened

    # the person replies with an @-mention picked from the autocomplete; the agent's await gets it
    waiting = subprocess.Popen([sys.executable, "-m", "mycelium.cli.main", "await", "-r", "atlas", "--handle",
                                "nova", "--timeout", "30", "--json"], stdout=subprocess.PIPE, text=True,
                               env={"MYCELIUM_API_URL": hub_url, "PATH": "/usr/bin:/bin"})
    try:
        area = page.locator(".composer textarea")
        await area.click()
        await area.type("thanks @no")
        await expect(page.locator(".suggest li", has_text="@nova")).to_be_visible()  # (a shown list)
        await area.press("Enter")
        await area.type("please go ahead")
        assert await area.input_value() == "thanks @nova please go ahead"
        await page.click(".composer button[type=submit]")
        await expect(page.locator(".line.msg", has_text="please go ahead")).to_be_visible(timeout=LIVE)
        out, _ = waiting.communicate(timeout=40)
    finally:
        waiting.kill()
    assert "please go ahead" in out

    # a write refused by the thread's floor shows the floor's reason in the composer
    row = httpx.get(f"{hub_url}/api/rooms/atlas/tasks/work/ship-passkey-login").json()
    conn = await asyncpg.connect(db_dsn)
    try:
        await conn.execute("SELECT mycelium.hold_floor('atlas', $1, 'nova', '{}')", row["episode"])
    finally:
        await conn.close()
    await page.click("a.card-title:has-text('Ship passkey login')")
    await expect(page.locator("h1")).to_have_text("Ship passkey login")
    await expect(page.locator(".floor-line").first).to_contain_text("@nova holds the floor")
    await page.fill(".composer textarea", "may I?")
    await page.click(".composer button[type=submit]")
    await expect(page.locator(".composer-error")).to_contain_text("does not have the floor")
    await expect(page.locator(".line.msg", has_text="may I?")).to_have_count(0)

    await page.set_viewport_size({"width": 1400, "height": 1000})
    await page.goto(hub_url + "/room/atlas")
    await page.screenshot(path=str(tmp_path / "room-desktop.png"), full_page=True)
    await page.set_viewport_size({"width": 390, "height": 844})
    await page.screenshot(path=str(tmp_path / "room-phone.png"), full_page=True)
    print(f"screenshots in {tmp_path}")
    assert foreign == [] and dialogs == [] and errors == []
    await context.close()


async def test_nothing_an_agent_writes_runs_as_script(browser, hub_url):
    httpx.post(f"{hub_url}/api/rooms", json={"name": "atlas"}).raise_for_status()
    evil = '<script>alert("room")</script><img src=x onerror="alert(1)"> [x](javascript:alert(2))'
    httpx.post(f"{hub_url}/api/rooms/atlas/messages", json={"sender_handle": "eve", "content": evil}).raise_for_status()
    httpx.post(f"{hub_url}/api/rooms/atlas/memory", json={"items": [
        {"key": "notes/evil", "value": evil, "created_by": "eve"}]}).raise_for_status()
    context, page, foreign, dialogs, errors = await open_page(browser, hub_url)
    await page.goto(hub_url + "/room/atlas")
    await expect(page.locator(".line.msg").first).to_contain_text('<script>alert("room")</script>')
    # and a message arriving live is just as inert
    httpx.post(f"{hub_url}/api/rooms/atlas/messages", json={"sender_handle": "eve",
                                                             "content": "<img src=y onerror=alert(3)> live"})
    await expect(page.locator(".line.msg", has_text="live")).to_contain_text("<img src=y onerror=alert(3)>",
                                                                             timeout=LIVE)
    await page.goto(hub_url + "/room/atlas/memory/notes/evil")
    await expect(page.locator("article.prose")).to_contain_text("<script>")
    assert await page.locator("article.prose a[href^='javascript']").count() == 0
    assert await page.locator("img").count() == 0
    await page.wait_for_timeout(300)
    assert dialogs == [] and errors == [] and foreign == []
    await context.close()


async def test_every_page_reads_and_a_form_works_without_javascript(browser, hub_url, cli):
    assert cli("room", "create", "atlas").returncode == 0
    assert cli("board", "new", "-r", "atlas", "Ship it", "--assign", "@julia").returncode == 0
    assert cli("memory", "set", "-r", "atlas", "notes/hello", "hello [[notes/world]]").returncode == 0
    httpx.post(f"{hub_url}/api/rooms/atlas/messages", json={"sender_handle": "nova", "content": "plain text"})
    context, page, foreign, dialogs, errors = await open_page(browser, hub_url, javascript=False)
    await page.goto(hub_url + "/")
    await expect(page.locator(".rooms")).to_contain_text("atlas")
    await page.goto(hub_url + "/room/atlas")
    await expect(page.locator(".col-needs_you")).to_contain_text("Ship it")
    await expect(page.locator(".timeline")).to_contain_text("plain text")
    await page.fill(".composer input[name=handle]", "ana")
    await page.fill(".composer textarea", "written without a script")
    await page.click(".composer button[type=submit]")
    await expect(page).to_have_url(hub_url + "/room/atlas")
    await expect(page.locator(".timeline")).to_contain_text("written without a script")
    await page.click("a.card-title:has-text('Ship it')")
    await expect(page.locator(".fields")).to_contain_text("@julia")
    await page.goto(hub_url + "/room/atlas/memories")
    await page.click("text=notes/hello")
    await expect(page.locator("article.prose")).to_contain_text("hello")
    await page.goto(hub_url + "/transitions")
    await expect(page.locator("h1")).to_have_text("Transitions")
    assert foreign == [] and dialogs == [] and errors == []
    await context.close()


async def test_a_task_page_follows_its_thread_live_from_another_replica(browser, hub_url, db_dsn, tmp_path):
    from tests.support.processes import HubProcess

    other = HubProcess(data_dir=tmp_path / "other", database_url=db_dsn, extra=["--no-mirror", "--no-workers"])
    try:
        other.wait_ready()
        httpx.post(f"{hub_url}/api/rooms", json={"name": "atlas"}).raise_for_status()
        row = httpx.post(f"{hub_url}/api/rooms/atlas/tasks", json={"title": "Argue it out", "handle": "ana"}).json()
        context, page, foreign, dialogs, errors = await open_page(browser, hub_url, width=390, height=844)
        await page.goto(f"{hub_url}/room/atlas/task/{row['key']}")
        await expect(page.locator("[data-part=thread]")).to_contain_text("No one has written")
        marker = await page.evaluate("window.__marker = 1")
        # written through the other replica: this page's replica hears it from the database
        httpx.post(f"{other.url}/api/rooms/atlas/messages", json={
            "sender_handle": "nova", "content": "from the other replica", "episode": row["episode"]}).raise_for_status()
        await expect(page.locator("[data-part=thread] .line.msg")).to_contain_text("from the other replica",
                                                                                   timeout=LIVE)
        httpx.post(f"{other.url}/api/rooms/atlas/assignments/claim",
                   json={"key": row["key"], "handle": "nova"}).raise_for_status()
        await expect(page.locator("[data-part=row]")).to_contain_text("held by @nova", timeout=LIVE)
        assert await page.evaluate("window.__marker") == marker
        await page.screenshot(path=str(tmp_path / "task-phone.png"), full_page=True)
        assert foreign == [] and dialogs == [] and errors == []
        await context.close()
    finally:
        other.stop()


async def test_the_composer_completes_commands_and_memory_links(browser, hub_url):
    httpx.post(f"{hub_url}/api/rooms", json={"name": "atlas"}).raise_for_status()
    row = httpx.post(f"{hub_url}/api/rooms/atlas/tasks", json={"title": "Pick me", "handle": "ana"}).json()
    httpx.post(f"{hub_url}/api/rooms/atlas/memory", json={"items": [
        {"key": "notes/passkeys", "value": "how passkeys work", "created_by": "ana"}]}).raise_for_status()
    context, page, foreign, dialogs, errors = await open_page(browser, hub_url)
    await page.goto(f"{hub_url}/room/atlas/task/{row['key']}")
    await page.fill(".composer input[name=handle]", "ana")
    area = page.locator(".composer textarea")
    await area.click()
    await area.type("/cl")
    await expect(page.locator(".suggest li").first).to_contain_text("/claim")
    await expect(page.locator(".suggest")).to_be_visible()
    await area.press("Enter")
    assert await area.input_value() == "/claim"
    await page.click(".composer button[type=submit]")
    await expect(page.locator("[data-part=row]")).to_contain_text("held by @ana", timeout=LIVE)
    await expect(area).to_have_value("")
    await area.type("see [[pass")
    await expect(page.locator(".suggest li").first).to_have_text("notes/passkeys")
    await expect(page.locator(".suggest")).to_be_visible()
    await area.press("Tab")
    assert await area.input_value() == "see [[notes/passkeys]] "
    await page.click(".composer button[type=submit]")
    link = page.locator("[data-part=thread] .line.msg a", has_text="notes/passkeys")
    await expect(link).to_have_attribute("href", "/room/atlas/memory/notes/passkeys", timeout=LIVE)
    assert foreign == [] and dialogs == [] and errors == []
    await context.close()


class Cuttable:
    """A TCP relay in front of the hub whose connections the test can cut (and refuse for a while)."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.down = False
        self.open: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.down:
            writer.close()
            return
        far_reader, far_writer = await asyncio.open_connection(*self.upstream)
        self.open += [writer, far_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, far_writer), pipe(far_reader, writer))

    def cut(self) -> None:
        self.down = True
        for w in self.open:
            w.close()
        self.open.clear()

    async def stop(self) -> None:
        self.cut()
        self.server.close()


async def test_a_page_that_lost_its_stream_catches_up_without_a_reload(browser, hub_url):
    httpx.post(f"{hub_url}/api/rooms", json={"name": "atlas"}).raise_for_status()
    relay = Cuttable(hub_url)
    url = await relay.start()
    try:
        context, page, foreign, dialogs, errors = await open_page(browser, url)
        await page.goto(f"{url}/room/atlas")
        await expect(page.locator("[data-live-state]")).to_have_text("live")
        marker = await page.evaluate("window.__marker = 7")
        relay.cut()
        await expect(page.locator("[data-live-state]")).to_have_text("reconnecting…", timeout=10_000)
        httpx.post(f"{hub_url}/api/rooms/atlas/messages", json={"sender_handle": "nova",
                                                                 "content": "said while away"})
        await page.wait_for_timeout(500)
        assert await page.locator(".line.msg").count() == 0
        relay.down = False
        await expect(page.locator(".line.msg", has_text="said while away")).to_be_visible(timeout=15_000)
        await expect(page.locator("[data-live-state]")).to_have_text("live")
        assert await page.evaluate("window.__marker") == marker
        # and the keyboard: ? lists the shortcuts, / goes to the search
        await page.keyboard.press("?")
        await expect(page.locator("#keys-help")).to_be_visible()
        await page.keyboard.press("Escape")
        await page.keyboard.press("/")
        assert await page.evaluate("document.activeElement.id") == "q"
        assert foreign == [] and dialogs == [] and errors == []
        await context.close()
    finally:
        await relay.stop()


async def test_a_message_re_reads_what_was_said_and_a_notice_the_whole_room(browser, hub_url):
    httpx.post(f"{hub_url}/api/rooms", json={"name": "atlas"}).raise_for_status()
    row = httpx.post(f"{hub_url}/api/rooms/atlas/tasks", json={"title": "Ship it", "handle": "ana"}).json()
    httpx.post(f"{hub_url}/api/rooms/atlas/messages", json={"sender_handle": "nova", "content": "first"})
    context, page, foreign, dialogs, errors = await open_page(browser, hub_url)
    reads: list[str] = []
    page.on("request", lambda r: reads.append(r.url.split("/parts", 1)[1]) if "/parts" in r.url else None)
    await page.goto(f"{hub_url}/room/atlas")
    await expect(page.locator("[data-live-state]")).to_have_text("live")
    httpx.post(f"{hub_url}/api/rooms/atlas/messages", json={"sender_handle": "nova", "content": "said again"})
    await expect(page.locator(".line.msg", has_text="said again")).to_be_visible(timeout=LIVE)
    assert reads == ["?rows=50&only=talk"]
    # a claim is a notice: the board is read again with it
    httpx.post(f"{hub_url}/api/rooms/atlas/assignments/claim", json={"key": row["key"], "handle": "nova"})
    await expect(page.locator(".col-in_flight .card", has_text="Ship it")).to_be_visible(timeout=LIVE)
    assert reads[-1] == "?rows=50"
    # someone the members rail does not know yet: the rail is read again too
    httpx.post(f"{hub_url}/api/rooms/atlas/messages", json={"sender_handle": "zed", "content": "hello, I am new"})
    await expect(page.locator("[data-part=members] [data-handle=zed]")).to_be_visible(timeout=LIVE)
    assert foreign == [] and dialogs == [] and errors == []
    await context.close()
