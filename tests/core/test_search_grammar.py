"""The message search grammar: what a line of text asks for, and what it could not honour."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from mycelium.core.search_grammar import (
    SNIPPET_WIDTH,
    Clause,
    SearchQuery,
    day_of,
    parse,
    parse_time,
    score_text,
    snippet,
)

NOW = datetime(2026, 9, 10, 12, 0, tzinfo=UTC)


def q(raw: str) -> SearchQuery:
    return parse(raw, now=NOW)


def clauses(raw: str) -> list[tuple[str, str, bool]]:
    return [(c.field, c.value, c.negate) for c in q(raw).clauses]


def tokens(query: SearchQuery) -> list[str]:
    return [p.token for p in query.problems]


# ── words, phrases, fields ──────────────────────────────────────────────────


def test_fields_phrases_negation_and_shorthand_split_out_of_the_text():
    query = q('@avery to:builder "apple pay" refund -stripe -stance:reject')
    assert query.words == ("refund",)
    assert query.phrases == ("apple pay",)
    assert query.excluded == ("stripe",)
    assert clauses('@avery to:builder "apple pay" refund -stripe -stance:reject') == [
        ("from", "avery", False),
        ("to", "builder", False),
        ("stance", "reject", True),
    ]
    assert query.problems == ()


def test_words_and_phrases_are_lowercased_and_phrase_whitespace_collapses():
    query = q('Refund "Apple   PAY"')
    assert query.words == ("refund",)
    assert query.phrases == ("apple pay",)
    assert query.text == 'refund "apple pay"'
    assert query.needles == ("apple pay", "refund")


def test_aliases_land_on_the_canonical_field():
    assert [c.field for c in q("sender:a by:b author:c recipient:d mention:e row:f episode:g").clauses] == [
        "from",
        "from",
        "from",
        "to",
        "mentions",
        "task",
        "thread",
    ]


def test_a_quoted_field_value_holds_spaces():
    assert clauses('task:"apple pay"') == [("task", "apple pay", False)]


def test_the_same_field_twice_is_an_or_and_different_fields_and_together():
    grouped = q("from:a from:b -from:c type:direct").by_field()
    assert list(grouped) == ["from", "type"]
    assert grouped["from"] == (Clause("from", "a"), Clause("from", "b"), Clause("from", "c", negate=True))


def test_handle_values_are_normalised_like_every_handle():
    assert clauses("from:@Bob#a8f3 -@Carol to:ALICE mentions:@~dave") == [
        ("from", "bob", False),
        ("from", "carol", True),
        ("to", "alice", False),
        ("mentions", "~dave", False),
    ]


def test_a_bare_at_sign_and_a_field_with_no_value_yet_narrow_nothing():
    query = q("apple from: task: -stance: after: sort: @ from:@")
    assert query.words == ("apple",)
    assert query.clauses == ()
    assert query.excluded == ()
    assert query.problems == ()


def test_an_undeclared_prefix_is_free_text():
    query = q("https://example.test/a Nope:Value work/x:y")
    assert query.clauses == ()
    assert query.words == ("https://example.test/a", "nope:value", "work/x:y")


def test_a_quoted_word_that_looks_like_a_field_is_a_phrase():
    query = q('"from:alice"')
    assert query.phrases == ("from:alice",)
    assert query.clauses == ()


def test_an_unterminated_quote_runs_to_the_end():
    assert q('"apple pay').phrases == ("apple pay",)


def test_a_positive_type_widens_the_scope_to_that_type():
    assert q("type:L9_knowledge -type:event").named_types == frozenset({"l9_knowledge"})


# ── closed values ───────────────────────────────────────────────────────────


def test_a_closed_field_value_outside_its_set_is_a_problem_and_its_clause_is_kept():
    query = q("has:linkz in:thread")
    assert tokens(query) == ["has:linkz"]
    assert "has:" in query.problems[0].reason
    assert clauses("has:linkz in:thread") == [("has", "linkz", False), ("in", "thread", False)]


def test_closed_values_compare_case_insensitively():
    query = q("IS:Edited stance:ACCEPT")
    assert query.problems == ()
    assert clauses("IS:Edited stance:ACCEPT") == [("is", "edited", False), ("stance", "accept", False)]


# ── time ────────────────────────────────────────────────────────────────────


def test_time_bounds_read_ages_dates_and_days():
    query = q("after:2h before:2026-09-10")
    assert query.after == NOW - timedelta(hours=2)
    assert query.before == datetime(2026, 9, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "ago"),
    [
        ("30m", timedelta(minutes=30)),
        ("30min", timedelta(minutes=30)),
        ("2h", timedelta(hours=2)),
        ("3d", timedelta(days=3)),
        ("1w", timedelta(weeks=1)),
        ("2H", timedelta(hours=2)),
    ],
)
def test_an_age_is_that_long_before_now(value, ago):
    assert q(f"since:{value}").after == NOW - ago


def test_a_date_only_before_excludes_that_day():
    assert q("until:2026-09-03").before == datetime(2026, 9, 3, tzinfo=UTC)


def test_on_spans_the_whole_utc_day():
    query = q("on:2026-09-03")
    assert (query.after, query.before) == (datetime(2026, 9, 3, tzinfo=UTC), datetime(2026, 9, 4, tzinfo=UTC))
    yesterday = q("on:yesterday")
    assert (yesterday.after, yesterday.before) == (
        datetime(2026, 9, 9, tzinfo=UTC),
        datetime(2026, 9, 10, tzinfo=UTC),
    )


def test_on_with_an_instant_spans_the_day_it_falls_in():
    query = q("on:3d")
    assert (query.after, query.before) == (datetime(2026, 9, 7, tzinfo=UTC), datetime(2026, 9, 8, tzinfo=UTC))


def test_today_and_yesterday_are_utc_days_relative_to_now():
    assert q("after:today").after == datetime(2026, 9, 10, tzinfo=UTC)
    assert q("before:yesterday").before == datetime(2026, 9, 9, tzinfo=UTC)


def test_a_stamp_is_read_in_utc_whatever_offset_it_was_written_with():
    assert q("after:2026-09-03T10:00:00+02:00").after == datetime(2026, 9, 3, 8, tzinfo=UTC)
    assert q("after:2026-09-03T10:00:00Z").after == datetime(2026, 9, 3, 10, tzinfo=UTC)
    assert q('after:"2026-09-03 10:00"').after == datetime(2026, 9, 3, 10, tzinfo=UTC)
    assert q("after:2026-09-03T10:00").after.tzinfo is UTC


def test_bounds_come_back_aware_and_in_utc_even_when_now_is_not_utc():
    local_now = NOW.astimezone(timezone(timedelta(hours=-7)))
    query = parse("after:today before:1h", now=local_now)
    assert query.after == datetime(2026, 9, 10, tzinfo=UTC)
    assert query.before == NOW - timedelta(hours=1)
    assert query.after.tzinfo is UTC


def test_repeated_bounds_narrow_to_their_intersection():
    query = q("after:3d after:1d before:2026-09-10 before:2026-09-09")
    assert query.after == NOW - timedelta(days=1)
    assert query.before == datetime(2026, 9, 9, tzinfo=UTC)


def test_unreadable_scope_is_reported_not_dropped():
    query = q("after:someday sort:loudest hello on:2026-13-40 before:20260903")
    assert tokens(query) == ["after:someday", "sort:loudest", "on:2026-13-40", "before:20260903"]
    assert query.after is None
    assert query.before is None
    assert query.sort == "newest"
    assert query.words == ("hello",)


def test_a_negated_time_bound_is_a_problem_and_sets_nothing():
    query = q("-after:2d -on:today")
    assert tokens(query) == ["-after:2d", "-on:today"]
    assert (query.after, query.before) == (None, None)


def test_the_parser_needs_an_aware_now():
    with pytest.raises(ValueError, match="aware"):
        parse("after:2h", now=datetime(2026, 9, 10, 12))


def test_a_day_value_is_read_as_the_utc_date():
    assert clauses("day:yesterday date:2026-09-03 day:2026-09-03T23:30:00-02:00") == [
        ("day", "2026-09-09", False),
        ("day", "2026-09-03", False),
        ("day", "2026-09-04", False),
    ]
    assert day_of("1w", now=NOW).isoformat() == "2026-09-03"


def test_an_unreadable_day_is_a_problem_and_its_clause_is_kept():
    query = q("day:someday")
    assert tokens(query) == ["day:someday"]
    assert clauses("day:someday") == [("day", "someday", False)]


def test_parse_time_reads_every_form_and_refuses_the_rest():
    assert parse_time("2026-09-03", now=NOW) == datetime(2026, 9, 3, tzinfo=UTC)
    assert parse_time("5m", now=NOW) == NOW - timedelta(minutes=5)
    assert parse_time("soon", now=NOW) is None
    assert parse_time("5y", now=NOW) is None


# ── sort ────────────────────────────────────────────────────────────────────


def test_sort_reads_every_declared_order_and_reports_the_rest():
    assert q("sort:Oldest").sort == "oldest"
    assert q("sort:relevance").sort == "relevance"
    assert q("").sort == "newest"
    negated = q("-sort:oldest")
    assert negated.sort == "newest"
    assert tokens(negated) == ["-sort:oldest"]


# ── the echo ────────────────────────────────────────────────────────────────


def test_the_scope_echoes_the_interpretation():
    assert q('from:julia "apple pay" -stance:reject after:2h has:nope').scope() == {
        "text": '"apple pay"',
        "clauses": [
            {"field": "from", "value": "julia", "negate": False},
            {"field": "stance", "value": "reject", "negate": True},
            {"field": "has", "value": "nope", "negate": False},
        ],
        "after": NOW - timedelta(hours=2),
        "before": None,
        "sort": "newest",
        "problems": ["has:nope"],
    }


def test_an_empty_query_asks_for_everything():
    assert parse(None, now=NOW) == SearchQuery()
    assert q("   ") == SearchQuery()


# ── scoring ─────────────────────────────────────────────────────────────────


def test_any_excluded_word_drops_the_text():
    assert score_text("Apple Pay via Stripe", q("apple -stripe")) is None


def test_every_word_and_phrase_is_required():
    assert score_text("apple pay", q("apple banana")) is None
    assert score_text("apple and pay", q('"apple pay"')) is None


def test_a_phrase_scores_three_per_occurrence():
    assert score_text("apple pay, then apple pay again", q('"apple pay"')) == 6


def test_a_word_scores_its_capped_count_plus_its_whole_word_hits():
    assert score_text("pay payment repay pay", q("pay")) == 4 + 2
    assert score_text("pay " * 8, q("pay")) == 5 + 8


def test_a_query_with_no_free_text_scores_zero():
    assert score_text("anything", q("from:julia")) == 0


# ── snippets ────────────────────────────────────────────────────────────────


def test_a_short_text_is_its_own_snippet_on_one_line():
    assert snippet("hello\n\n  world", ["world"]) == "hello world"


def test_a_long_text_is_cut_around_the_first_match_with_ellipses():
    text = "a" * 300 + " needle " + "b" * 300
    cut = snippet(text, ["needle"])
    assert cut.startswith("…") and cut.endswith("…")
    body = cut[1:-1]
    assert len(body) <= SNIPPET_WIDTH
    assert body.index("needle") == SNIPPET_WIDTH // 3


def test_a_match_near_the_start_has_no_leading_ellipsis():
    cut = snippet("needle " + "x" * 400, ["needle"])
    assert cut.startswith("needle")
    assert cut.endswith("…")


def test_with_no_match_the_snippet_is_the_opening():
    cut = snippet("y" * 400, ["absent"])
    assert cut == "y" * SNIPPET_WIDTH + "…"


def test_needles_are_tried_in_order():
    text = "x" * 200 + " first " + "x" * 200 + " second " + "x" * 200
    assert "second" in snippet(text, ["second", "first"])
