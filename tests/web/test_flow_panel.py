"""The flow panel in a real browser: a conductor run driven by the hub's own engine worker with
scripted members, followed live on the task's page (the graph, the current step, whom the floor
admits, the trace, then the outcome and the metrics), and the room's episodes and an episode's page."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import asyncpg
import pytest
from playwright.async_api import expect

from tests.engines.conftest import coordinate, make_task, setup_room
from tests.web.test_browser import open_page

pytestmark = pytest.mark.slow
LIVE = 15_000  # ms: a step goes through the hub's engine worker, then the stream (CI slack)

Rule = Callable[[str], Awaitable[str | None]]


async def member(dsn: str, room: str, handle: str, rule: Rule) -> None:
    """A scripted member: takes its next turn from its inbox and answers it in its thread."""
    conn = await asyncpg.connect(dsn)
    try:
        while True:
            row = await conn.fetchrow("SELECT * FROM mycelium.take_next($1, $2)", room, handle)
            if row is None:
                await asyncio.sleep(0.03)
                continue
            if row["sender"] == "system":
                continue
            text = await rule(row["text"])
            if text is not None:
                await conn.execute("SELECT * FROM mycelium.reply($1, $2, $3, NULL, $4)", room, handle, text,
                                   row["episode"])
    finally:
        await conn.close()


async def test_the_flow_panel_follows_a_conductor_run_live(browser, hub_url, db_dsn, admin_conn, tmp_path):
    await setup_room(admin_conn)
    key, _ = await make_task(admin_conn, "atlas", "Ship the pricing page")
    checked = asyncio.Event()  # julia answers the first check only when the test has looked
    blocked = {"n": 1}

    async def nova(text: str) -> str | None:
        if "· propose ·" in text:
            return "Plan: a static page behind a flag. [[mycelium: confidence=0.6]]"
        if "· revise ·" in text:
            return "Plan: the same, with a rollback switch. [[mycelium: confidence=0.8]]"
        return None

    async def julia(text: str) -> str | None:
        if "· check ·" not in text:
            return None
        await checked.wait()
        if blocked["n"]:
            blocked["n"] -= 1
            return "It needs a rollback plan. [[mycelium: stance=block confidence=0.4]]"
        return "Fine by me. [[mycelium: stance=accept confidence=0.9]]"

    members = [asyncio.create_task(member(db_dsn, "atlas", h, r)) for h, r in (("nova", nova), ("julia", julia))]
    try:
        context, page, foreign, dialogs, errors = await open_page(browser, hub_url)
        await page.goto(f"{hub_url}/room/atlas/task/{key}")
        panel = page.locator("[data-part=flow]")
        await expect(panel).to_contain_text("No engine has run in this thread")
        marker = await page.evaluate("window.__marker = Math.random()")
        reads: list[str] = []
        page.on("request", lambda r: reads.append(r.url) if "/task-parts/" in r.url else None)

        await coordinate(admin_conn, "atlas", key, "gated @nova @julia: ship the pricing page")
        run = panel.locator(".run")
        # the run as it stands at check: julia's turn, the floor hers alone, propose behind it
        await expect(run.locator(".run-now")).to_contain_text("Now at check", timeout=LIVE)
        await expect(run.locator(".run-now")).to_contain_text("waiting for @julia")
        await expect(run.locator("[data-floor]")).to_contain_text("@conductor holds the floor; @julia may speak")
        await expect(run.locator("h3")).to_contain_text("gated")
        await expect(run.locator("h3 .badge").first).to_have_text("conductor")
        await expect(run.locator("h3 .state")).to_have_text("running")
        await expect(run.locator(".cast")).to_contain_text("@nova")
        await expect(run.locator(".step[data-step=check]")).to_have_attribute("aria-current", "step")
        await expect(run.locator(".step[data-step=propose]")).to_have_class("step visited")
        await expect(run.locator(".step[data-step=propose] .edges .taken")).to_contain_text("→ check")
        first = run.locator(".trace li[data-turn='1']")
        await expect(first).to_contain_text("1 · propose")
        await expect(first).to_contain_text("@nova")
        await expect(first).to_contain_text("→ check")
        await page.screenshot(path=str(tmp_path / "flow-running.png"), full_page=True)

        # julia blocks once, nova revises, julia accepts: the panel follows to the outcome
        checked.set()
        await expect(run.locator("h3 .state")).to_have_text("resolved", timeout=LIVE)
        await expect(run.locator(".trace li")).to_have_count(4)
        await expect(run.locator(".trace li[data-turn='2']")).to_contain_text("@julia: reject")
        await expect(run.locator(".trace li[data-turn='2']")).to_contain_text("→ revise")
        await expect(run.locator(".trace li[data-turn='4']")).to_contain_text("→ passed")
        await expect(run.locator(".run-now")).to_have_count(0)
        metrics = run.locator(".metrics")
        await expect(metrics).to_contain_text("MPC")
        await expect(metrics).to_contain_text("0.85")  # (0.8 + 0.9) / 2
        await expect(metrics).to_contain_text("provenance weight")
        await expect(page.locator("[data-part=thread]")).to_contain_text("resolved after 4 step(s)")
        assert await page.evaluate("window.__marker") == marker  # all of it live, no reload
        # the run moved the floor at every step, and said things: none of it touches the row, so the
        # page re-read its thread and flow panel alone
        assert reads and all(url.endswith("?only=talk") for url in reads), reads

        # the room's episodes, and the episode's own page with its slice of the thread
        await page.goto(f"{hub_url}/room/atlas")
        await page.click("a:has-text('Episodes')")
        row = page.locator("table.episodes tbody tr")
        await expect(row).to_have_count(1)
        await expect(row).to_contain_text("gated")
        await expect(row).to_contain_text("Ship the pricing page")
        await expect(row).to_contain_text("resolved")
        await row.locator("a").first.click()
        await expect(page.locator("h1")).to_contain_text("Episode")
        await expect(page.locator("[data-part=run] .trace li")).to_have_count(4)
        await expect(page.locator("[data-part=messages]")).to_contain_text("Fine by me.")
        await page.click("text=The record, as a memory")
        await expect(page.locator("article.prose")).to_contain_text("outcome")
        await page.set_viewport_size({"width": 390, "height": 844})
        await page.go_back()
        await page.screenshot(path=str(tmp_path / "episode-phone.png"), full_page=True)
        assert foreign == [] and dialogs == [] and errors == []
        await context.close()
    finally:
        for t in members:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
