"""The pure parts of the pages: markdown with raw HTML off, the timeline's folding, durations."""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta

import pytest

from mycelium.verbs.messages import MessageRead
from mycelium.web import render, views

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


@pytest.mark.parametrize("text", ["hello room", "On it. Can you review?", "a 'quoted' \"word\" here",
                                  "ends with a dot.", "  padded  ", "3 + 4 = 7"])
def test_plain_prose_renders_as_markdown_would(text):
    assert html.unescape(render.markdown(text, "atlas")) == html.unescape(render._MARKDOWN.render(text))


@pytest.mark.parametrize("text", ["<script>alert(1)</script>", "x & y", "[a](javascript:alert(1))",
                                  "<img src=x onerror=alert(1)>", "**b** <b>c</b>"])
def test_markdown_never_passes_raw_html_or_script_links(text):
    shown = render.markdown(text, "atlas")
    assert "<script" not in shown and "<img" not in shown and "<b>" not in shown and "href=\"javascript" not in shown


def test_wikilinks_link_to_the_memory_page_quoted():
    shown = render.markdown("see [[notes/a b]] and [[notes/c|the c note]]", "my room")
    assert 'href="/room/my%20room/memory/notes/a%20b"' in shown and ">the c note</a>" in shown


def test_a_file_link_downloads_the_rooms_file():
    shown = render.markdown("the chart: [[file:reports/q3 v2.png]], or [[FILE:a.pdf|the deck]]", "my room")
    assert 'href="/api/rooms/my%20room/files/reports/q3%20v2.png"' in shown and ">📎 reports/q3 v2.png</a>" in shown
    assert 'href="/api/rooms/my%20room/files/a.pdf"' in shown and ">📎 the deck</a>" in shown
    assert "/memory/" not in shown


def message(position, *, episode="urn:ioc:mycelium:episode:atlas:live", payload_type="message", payload=None,
            sender="nova", content="", mid=None):
    return MessageRead(id=mid or f"id{position}", room_name="atlas", position=position, sender_handle=sender,
                       sender_role="agent", recipient_handle=None, recipients=[], message_type="broadcast",
                       content=content, metadata=None, episode=episode, kind="exchange", subkind=None,
                       payload_type=payload_type, payload=payload or {}, parents=[], mentions=[],
                       silent_mentions=[], edited_at=None, created_at=NOW)


def test_a_threads_pings_fold_into_one_line_quoting_its_newest_message_at_its_newest_ping():
    thread = "urn:ioc:mycelium:episode:atlas:abcd1234"
    seen = [
        message(1, content="hello"),
        message(2, episode=thread, content="first", mid="t1"),
        message(3, payload_type="ping", payload={"episode": thread, "sender": "nova", "message": "t1"}),
        message(4, payload_type="notice", payload={"subkind": "claimed", "key": "work/x", "by": "nova",
                                                   "title": "X"}),
        message(5, episode=thread, content="second", mid="t2", sender="julia"),
        message(6, payload_type="ping", payload={"episode": thread, "sender": "julia", "message": "t2"}),
        message(7, payload_type="presence"),
    ]
    lines = views.timeline("atlas", seen, {})
    assert [(line.kind, line.position) for line in lines] == [("message", 1), ("notice", 4), ("thread", 6)]
    folded = lines[-1]
    assert folded.text == "second" and folded.count == 2 and folded.sender == "julia" and folded.thread == "abcd1234"
    assert lines[1].text == "@nova claimed" and lines[1].title == "X"


@pytest.mark.parametrize(("seconds", "shown"), [(None, ""), (-1, "expired"), (0, "expired"), (42.9, "42s"),
                                                (60, "1m"), (1799, "29m"), (3900, "1h 05m")])
def test_durations_read_as_people_say_them(seconds, shown):
    assert views.duration(seconds) == shown


def test_relative_times():
    assert views.relative(NOW - timedelta(seconds=10), NOW) == "just now"
    assert views.relative(NOW - timedelta(minutes=5), NOW) == "5m ago"
    assert views.relative(NOW - timedelta(days=2), NOW) == "2d ago"
    assert views.relative(NOW + timedelta(hours=3), NOW) == "in 3h"


def test_a_version_diff_marks_what_was_added_and_removed():
    diff = views.version_diff("a\nb\n", "a\nc\n", "v1", "v2")
    assert ("del", "-b") in diff and ("add", "+c") in diff



def test_the_board_namespaces_are_the_vocabularys_live_namespaces():
    import json

    from mycelium.paths import contracts_dir

    vocabulary = json.loads((contracts_dir() / "board-vocabulary.json").read_text())
    assert list(views.BOARD_NAMESPACES) == vocabulary["live_namespaces"]
    assert [a for a, _ in views.COLUMNS] == vocabulary["attention_filters"]
