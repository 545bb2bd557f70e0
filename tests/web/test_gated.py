"""The web app on a gated hub: the forms have no handle field (the author is the signed-in principal,
as the gateway binds it anyway), the page says who is signed in, and a write made from the page is
the principal's whatever a crafted form names; in a real browser against a gated hub process."""

from __future__ import annotations

import httpx
import pytest
from playwright.async_api import expect

from tests.auth.conftest import HUB_SECRET, Provider, bearer, gated, provider  # noqa: F401 (fixtures)
from tests.web.test_browser import LIVE, open_page

pytestmark = pytest.mark.slow


@pytest.fixture
def gated_url(hub_processes, provider: Provider) -> str:  # noqa: F811
    env = {"MYCELIUM_AUTH": "on", "MYCELIUM_AUTH_ISSUERS": provider.issuers(), "MYCELIUM_AUTH_SECRET": HUB_SECRET}
    return hub_processes(extra=["--no-mirror", "--no-workers"], env=env).url


async def test_a_signed_in_person_writes_as_their_principal_with_no_handle_field(
    browser, gated_url, provider: Provider  # noqa: F811
):
    operator = bearer(provider.token("olga", role="operator"))
    httpx.post(f"{gated_url}/api/rooms", json={"name": "atlas"}, headers=operator).raise_for_status()
    row = httpx.post(f"{gated_url}/api/rooms/atlas/tasks", json={"title": "Ship it", "handle": "olga"},
                     headers=operator).json()
    context, page, foreign, dialogs, errors = await open_page(browser, gated_url)
    await page.goto(f"{gated_url}/room/atlas")
    await expect(page).to_have_url(f"{gated_url}/login?next=/room/atlas")
    await page.fill("textarea[name=token]", provider.token("alice"))
    await page.click("form:has(textarea[name=token]) button[type=submit]")
    await expect(page).to_have_url(f"{gated_url}/room/atlas")
    await expect(page.locator(".me")).to_have_text("signed in as @alice")

    # no form on the room or the task page asks who you are: each says it is you
    assert await page.locator("input[name=handle]").count() == 0
    await expect(page.locator(".composer [data-signed-as]")).to_contain_text("as @alice")
    await expect(page.locator("[data-file-task] [data-signed-as]")).to_contain_text("You are @alice")
    await page.fill(".composer textarea", "hello from alice")
    await page.click(".composer button[type=submit]")
    await expect(page.locator(".line.msg", has_text="hello from alice")).to_contain_text("@alice", timeout=LIVE)
    await expect(page.locator(".composer-error")).to_be_hidden()

    await page.goto(f"{gated_url}/room/atlas/task/{row['key']}")
    assert await page.locator("input[name=handle]").count() == 0
    await page.click(".lease-form button[value=claim]")
    await expect(page.locator("[data-part=row]")).to_contain_text("held by @alice", timeout=LIVE)
    for path in ("/", "/room/atlas/memories", "/room/atlas/memory/" + row["key"]):
        await page.goto(gated_url + path)
        assert await page.locator("input[name=handle]").count() == 0, path

    # a crafted form naming someone else still writes as alice (the page's own origin, her cookie)
    said = await page.evaluate("""async () => {
      const body = new URLSearchParams({handle: 'olga', content: 'crafted as olga', back: '/room/atlas'});
      const r = await fetch('/room/atlas/messages', {method: 'POST', body, redirect: 'manual'});
      return r.type;
    }""")
    assert said == "opaqueredirect"
    messages = httpx.get(f"{gated_url}/api/rooms/atlas/messages", headers=operator).json()
    assert {m["content"]: m["sender_handle"] for m in messages if m["kind"] != "notice"} == {
        "hello from alice": "alice", "crafted as olga": "alice"}
    assert foreign == [] and dialogs == [] and errors == []
    await context.close()


async def test_a_private_rooms_runs_and_talk_are_not_found_by_a_non_member(gated, provider: Provider):  # noqa: F811
    olga = bearer(provider.token("olga", role="operator"))
    assert (await gated.post("/api/rooms", json={"name": "vault", "is_public": False, "owner": "olga"},
                             headers=olga)).status_code == 201
    row = (await gated.post("/api/rooms/vault/tasks", json={"title": "Secret", "handle": "olga"},
                            headers=olga)).json()
    html = {"accept": "text/html"}
    for who, status in (("olga", 200), ("bob", 404)):
        me = {**html, **bearer(provider.token(who, role="operator" if who == "olga" else "agent"))}
        for path in ("/room/vault/episodes", "/room/vault/episodes-parts", f"/room/vault/task/{row['key']}",
                     f"/room/vault/task-parts/{row['key']}?only=talk", "/room/vault/parts?only=talk"):
            r = await gated.get(path, headers=me)
            assert r.status_code == status, (who, path, r.status_code)
            if status == 404:
                assert "Secret" not in r.text and "room_not_found" in r.text
