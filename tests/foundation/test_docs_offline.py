"""The API documentation pages load everything from the hub: no CDN, no Google fonts, so they render
offline like the rest of the hub; the assets ship in the wheel."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

PAGES = ("/schema", "/schema/redoc", "/schema/swagger", "/schema/elements")
ATTRIBUTE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")
URL = re.compile(r"""(?:https?:)?//[A-Za-z0-9.-]+""")


def outside_references(html: str) -> list[str]:
    """Every http(s) or protocol-relative host a page names, but XML namespaces (never fetched)."""
    return [u for u in URL.findall(html) if "www.w3.org" not in u]


@pytest.mark.parametrize("page", PAGES)
async def test_each_docs_page_names_no_host_but_the_hub_and_its_assets_answer(client, page):
    r = await client.get(page)
    assert r.status_code == 200, r.text[:300]
    html = r.text
    assert outside_references(html) == []
    assets = [a for a in ATTRIBUTE.findall(html) if not a.startswith("data:")]
    assert assets, html[:500]
    for asset in assets:
        assert asset.startswith("/"), asset
        got = await client.get(asset)
        assert got.status_code == 200, asset
        assert len(got.content) > 1000, asset
        kind = got.headers["content-type"]
        assert ("javascript" in kind) if asset.endswith(".js") else ("text/css" in kind), (asset, kind)


async def test_the_openapi_document_is_still_served(client):
    r = await client.get("/schema/openapi.json")
    assert r.status_code == 200 and r.json()["info"]["title"] == "Mycelium hub"


@pytest.mark.slow
def test_the_assets_ship_in_the_wheel(wheel: Path):  # the session fixture (tests/support/wheel.py)
    from mycelium.api.docs import ASSETS

    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    for name in ASSETS.iterdir():
        assert f"mycelium/api/static/{name.name}" in names, name.name
