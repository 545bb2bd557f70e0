"""The templates' environment: autoescaped Jinja2, and the few filters the pages share.

Everything a page shows from the database passes through autoescaping; markdown is rendered with raw
HTML off, so an agent's ``<script>`` reads as text and a ``javascript:`` link is dropped.
"""

from __future__ import annotations

import re
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.template.config import TemplateConfig
from markdown_it import MarkdownIt
from markupsafe import Markup, escape

from mycelium.core.sizes import human_size
from mycelium.web.views import duration, relative

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False})
#: What could make text render as more than one escaped paragraph.
_MARKUP = re.compile(r"[*_`\[\]#>|~\\&<!]|^\s*([-+=]|\d+[.)])|\n|^ {4}|://", re.M)
_WIKILINK = re.compile(r"(!?)\[\[([^\[\]|]+?)(?:\|([^\[\]]+?))?\]\]")


def path_quote(value: object) -> str:
    """A memory key or room name as a URL path (slashes kept, everything else quoted)."""
    return quote(str(value), safe="/")


#: A wikilink to a file the room holds: ``[[file:<name>]]`` (``|label`` as for a memory).
FILE_LINK = "file:"


def file_href(room: str, name: str) -> str:
    """Where a room's file is downloaded (the API's read; a signed-in browser's cookie is its token)."""
    return f"/api/rooms/{quote(room, safe='')}/files/{quote(name, safe='/')}"


def when(moment: datetime | None, now: datetime) -> Markup:
    """A ``<time>``: relative, with the exact time on hover. (Written out, not formatted through
    Markup: an ISO time and ``5m ago`` hold nothing to escape, and a page shows hundreds.)"""
    if moment is None:
        return Markup("")
    exact = moment.isoformat(timespec="seconds")
    return Markup(f'<time datetime="{exact}" title="{exact}">{escape(relative(moment, now))}</time>')


def markdown(text: str | None, room: str) -> Markup:
    """Markdown as HTML, raw HTML off; ``[[key]]`` links to the memory's page in ``room``,
    ``[[file:<name>]]`` to the room's file."""
    if not text:
        return Markup("")
    if not _MARKUP.search(text):  # plain prose reads the same as one escaped paragraph
        return Markup("<p>{}</p>\n").format(text.strip())
    return _rendered(text, room)


@lru_cache(maxsize=4096)
def _rendered(text: str, room: str) -> Markup:
    """(A page re-renders the same messages at every refresh; their HTML never changes.)"""

    def wikilink(match: re.Match[str]) -> str:
        inner = match.group(2).strip()
        label = (match.group(3) or match.group(2)).strip().replace("[", "").replace("]", "")
        if inner.lower().startswith(FILE_LINK):  # [[file:<name>]]: the room's file, downloaded
            name = inner[len(FILE_LINK):].strip()
            label = label[len(FILE_LINK):].strip() if match.group(3) is None else label
            return f"[📎 {label}]({file_href(room, name)})"
        target = inner.split("#", 1)[0]
        mark = "↪ " if match.group(1) else ""
        return f"[{mark}{label}](/room/{quote(room, safe='')}/memory/{quote(target, safe='/')})"

    return Markup(_MARKDOWN.render(_WIKILINK.sub(wikilink, text)))


def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(q=path_quote, when=when, md=markdown, dur=duration, size=human_size)
    env.globals.update(file_href=file_href)
    return env


def template_config() -> TemplateConfig[JinjaTemplateEngine]:
    return TemplateConfig(instance=JinjaTemplateEngine.from_environment(environment()))
