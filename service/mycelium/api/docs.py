"""The API documentation pages, rendered with assets the package ships (``api/static``, see its
NOTICE.md): Redoc at ``/schema`` and ``/schema/redoc``, Swagger UI at ``/schema/swagger``, Stoplight
Elements at ``/schema/elements``, the document at ``/schema/openapi.json`` (and ``.yaml``). Nothing is
loaded from a CDN and no font from Google, so the pages render offline like the rest of the hub."""

from __future__ import annotations

from pathlib import Path

from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import (
    JsonRenderPlugin,
    RedocRenderPlugin,
    StoplightRenderPlugin,
    SwaggerRenderPlugin,
    YamlRenderPlugin,
)
from litestar.router import Router
from litestar.static_files import create_static_files_router

ASSETS = Path(__file__).with_name("static")
ASSETS_PATH = "/schema/assets"
NO_FAVICON = "<link rel='icon' href='data:,'>"  # the browser asks no host for one


def _asset(name: str) -> str:
    return f"{ASSETS_PATH}/{name}"


def openapi_config(title: str, version: str) -> OpenAPIConfig:
    return OpenAPIConfig(title=title, version=version, render_plugins=[
        RedocRenderPlugin(path=["/", "/redoc"], js_url=_asset("redoc.standalone.js"), google_fonts=False,
                          favicon=NO_FAVICON),
        SwaggerRenderPlugin(js_url=_asset("swagger-ui-bundle.js"), css_url=_asset("swagger-ui.css"),
                            standalone_preset_js_url=_asset("swagger-ui-standalone-preset.js"),
                            favicon=NO_FAVICON),
        StoplightRenderPlugin(js_url=_asset("elements-web-components.min.js"),
                              css_url=_asset("elements-styles.min.css"), favicon=NO_FAVICON),
        JsonRenderPlugin(), YamlRenderPlugin(),
    ])


def assets_router() -> Router:
    """The vendored files, under ``/schema/assets`` (out of the OpenAPI document)."""
    return create_static_files_router(path=ASSETS_PATH, directories=[ASSETS], include_in_schema=False,
                                      name="docs-assets")
