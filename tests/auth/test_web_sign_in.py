"""Signing in to a gated hub's web app: a page asked for without a token sends the browser to
/login; a pasted token or a redeemed join code becomes an HttpOnly, SameSite=Strict cookie the gate
reads; a write carried by that cookie from another site is refused."""

from __future__ import annotations

from tests.auth.conftest import Provider, bearer

HTML = {"accept": "text/html"}


async def test_a_browser_signs_in_with_a_token_and_writes_from_the_hubs_own_pages(gated, provider: Provider):
    r = await gated.get("/", headers=HTML, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login?next=/"
    assert (await gated.get("/login")).status_code == 200
    assert (await gated.get("/api/rooms")).status_code == 401  # an API client still gets the 401

    refused = await gated.post("/login", data={"token": provider.token("alice", aud="other")})
    assert refused.status_code == 401 and "not for this hub" in refused.text

    signed = await gated.post("/login", data={"token": provider.token("alice"), "back": "/"},
                              follow_redirects=False)
    assert signed.status_code == 303
    cookie = signed.headers["set-cookie"]
    assert cookie.startswith("mycelium_token=") and "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
    page = await gated.get("/", headers=HTML)
    assert page.status_code == 200 and "as @alice" in page.text

    form = {"name": "atlas", "back": "/"}
    across = await gated.post("/rooms", data=form, headers={"origin": "https://evil.example"},
                              follow_redirects=False)
    assert across.status_code == 403 and across.json()["error"] == "cross_site"
    assert (await gated.get("/api/rooms/atlas", headers=bearer(provider.token("alice")))).status_code == 404
    own = await gated.post("/rooms", data=form, headers={"sec-fetch-site": "same-origin"},
                           follow_redirects=False)
    assert own.status_code == 303, own.text
    room = (await gated.get("/api/rooms/atlas", headers=bearer(provider.token("alice")))).json()
    assert room["created_by"] == "alice"

    out = await gated.post("/logout", follow_redirects=False)
    assert out.status_code == 303 and 'mycelium_token=""' in out.headers["set-cookie"]


async def test_a_join_code_signs_a_browser_in_as_the_member(gated, provider: Provider):
    olga = bearer(provider.token("olga", role="operator"))
    r = await gated.post("/api/rooms", json={"name": "vault", "is_public": False, "owner": "olga"}, headers=olga)
    assert r.status_code == 201
    code = (await gated.post("/api/rooms/vault/joins", json={"handle": "dave"}, headers=olga)).json()["code"]
    assert (await gated.post("/login", data={"code": "nope-nope-nope"})).status_code == 400
    signed = await gated.post("/login", data={"code": code, "back": "/room/vault"}, follow_redirects=False)
    if signed.status_code == 503:  # no MYCELIUM_AUTH_SECRET: the page says member tokens are off
        assert "MYCELIUM_AUTH_SECRET" in signed.text
        return
    assert signed.status_code == 303 and signed.headers["location"] == "/room/vault"
    page = await gated.get("/room/vault", headers=HTML)
    assert page.status_code == 200 and "as @dave" in page.text
