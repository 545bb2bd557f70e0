"""Usage events tried as a person in psql and over HTTP: a text, a handle or a nested value in attrs
is refused by the table's CHECK, an event is never changed, an engine's turn and a runner's job
record themselves naming nobody, the model seam records each call (answered and failed), and the
summary and the Metrics page read them."""

from __future__ import annotations

import asyncpg
import pytest

from mycelium.engines.models import Metered, ModelError, Rule, ScriptedModel

INSERT = "INSERT INTO mycelium.usage_events (kind, engine, outcome, attrs) VALUES ($1, $2, 'answered', $3)"


async def refused(conn: asyncpg.Connection, sql: str, *args: object) -> asyncpg.PostgresError:
    with pytest.raises(asyncpg.PostgresError) as caught:
        await conn.execute(sql, *args)
    return caught.value


@pytest.mark.parametrize(("attrs", "why"), [
    ({"prompt": 1}, "attrs.prompt is a prohibited field"), ({"Handle": "bob"}, "attrs.Handle is a prohibited"),
    ({"room": "atlas"}, "attrs.room is a prohibited"), ({"note": "hello there, bob"}, "attrs.note is a short word"),
    ({"nested": {"x": 1}}, "attrs.nested is a number"), ({"list": [1]}, "attrs.list is a number"),
    ({"BadKey": 1}, "is not a lowercase word"), ([], "attrs is an object"), ("text", "attrs is an object"),
], ids=["prompt", "handle-any-case", "room", "a-sentence", "nested", "list", "not-lowercase", "array", "string"])
async def test_attrs_that_would_name_or_quote_are_refused_by_the_table(admin_conn, attrs, why):
    assert why in await admin_conn.fetchval("SELECT mycelium.usage_attrs_problem($1)", attrs)
    err = await refused(admin_conn, INSERT, "model_call", "persona", attrs)
    assert err.sqlstate == "23514" and "usage_no_names" in str(err)
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.usage_events") == 0


async def test_an_event_names_no_one_but_an_engine_and_is_never_changed(admin_conn):
    assert await admin_conn.fetchval("SELECT mycelium.usage_attrs_problem($1)", {"attempt": 2, "ok": True}) is None
    err = await refused(admin_conn, INSERT, "runner_job", "bob", {})
    assert err.sqlstate == "23514" and "usage_names_nobody" in str(err)
    err = await refused(admin_conn, INSERT, "engine_turn", None, {})
    assert "usage_turn_engine" in str(err)
    await admin_conn.execute(INSERT, "model_call", "persona", {"attempt": 2, "cached": False, "tier": "small"})
    err = await refused(admin_conn, "UPDATE mycelium.usage_events SET outcome = 'failed'")
    assert err.sqlstate == "MY409" and "never changed" in str(err)
    assert await admin_conn.fetchval("DELETE FROM mycelium.usage_events RETURNING id") is not None  # pruned
    err = await refused(admin_conn, "SELECT (mycelium.record_usage('model_call', 'nova', NULL, 'm', 'answered', 1, "
                                    "NULL, NULL, $1)).id", {"text": "hi"})
    assert err.sqlstate == "MY422" and "attrs.text is a prohibited field" in str(err)


async def test_an_engines_turn_and_a_runners_job_record_themselves(admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    await admin_conn.execute("SELECT mycelium.create_engine('atlas', 'nova', 'persona', NULL, 'ops')")
    await admin_conn.execute("SELECT mycelium.post_message('atlas', 'alice', '@nova what do you think?')")
    await admin_conn.execute("UPDATE mycelium.engine_summons SET state = 'done', outcome = 'answered', "
                             "done_at = created_at + interval '250 ms'")
    turn = await admin_conn.fetchrow("SELECT * FROM mycelium.usage_events WHERE kind = 'engine_turn'")
    assert (turn["engine"], turn["engine_kind"], turn["outcome"]) == ("nova", "persona", "answered")
    assert turn["duration_ms"] == pytest.approx(250.0)
    await admin_conn.execute("SELECT * FROM mycelium.add_runner('atlas', 'bob', ARRAY['agent'], p_by => 'ops')")
    await admin_conn.execute("SELECT mycelium.post_message('atlas', 'alice', '@bob over to you')")
    (job,) = await admin_conn.fetch("SELECT * FROM mycelium.claim_runner_jobs('w1', 10, 30)")
    await admin_conn.execute("SELECT mycelium.runner_job_started('atlas', $1, 'w1', 4242)", job["id"])
    await admin_conn.execute("SELECT * FROM mycelium.finish_runner_job('atlas', $1, 'w1', 3, NULL, 'secret out', "
                             "'secret err')", job["id"])
    ended = await admin_conn.fetchrow("SELECT * FROM mycelium.usage_events WHERE kind = 'runner_job'")
    assert ended["engine"] is None and ended["outcome"] == "failed" and ended["attrs"]["exit_code"] == 3
    row = " ".join(str(v) for v in dict(ended).values())
    assert "bob" not in row and "secret" not in row and "atlas" not in row


async def test_the_model_seam_records_each_call_answered_or_failed(hub, admin_conn):
    from mycelium.verbs import HUB_PRINCIPAL, usage, verbs_of

    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    await admin_conn.execute("SELECT mycelium.create_engine('atlas', 'nova', 'persona', NULL, 'ops')")
    import re

    inner = ScriptedModel([Rule(re.compile("hello"), reply="hi"), Rule(re.compile("break"), fail="down")],
                          name="scripted:rules v2.yaml")
    model = Metered(inner, usage.recorder(verbs_of(hub, HUB_PRINCIPAL)))
    assert await model.complete("sys", [{"role": "user", "content": "hello"}], handle="nova") == "hi"
    with pytest.raises(ModelError, match="down"):
        await model.complete("sys", [{"role": "user", "content": "break it"}], handle="nova")
    rows = await admin_conn.fetch("SELECT * FROM mycelium.usage_events ORDER BY id")
    assert [(r["kind"], r["engine"], r["engine_kind"], r["model"], r["outcome"]) for r in rows] == [
        ("model_call", "nova", "persona", "scripted:rules_v2.yaml", "answered"),
        ("model_call", "nova", "persona", "scripted:rules_v2.yaml", "failed")]
    assert all(r["duration_ms"] >= 0 and r["tokens_in"] is None for r in rows)  # a script counts no tokens


async def test_the_summary_and_the_metrics_page(client, admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('lab')")
    await admin_conn.execute("SELECT mycelium.create_engine('lab', 'nova', 'persona', NULL, 'ops')")
    for kind, engine, model, outcome, ms, tin, tout in [
        ("model_call", "nova", "chat:small", "answered", 120, 300, 40),
        ("model_call", "nova", "chat:small", "failed", 30, None, None),
        ("model_call", "zed", "chat:<b>big</b>", "answered", 900, 1000, 200),
        ("engine_turn", "nova", None, "answered", 200, None, None),
    ]:
        await admin_conn.execute("SELECT (mycelium.record_usage($1, $2, NULL, $3, $4, $5, $6, $7)).id",
                                 kind, engine, model, outcome, ms, tin, tout)
    r = await client.get("/api/observability/usage", params={"group_by": "model"})
    assert r.status_code == 200, r.text
    groups = {g["group"]: g for g in r.json()["groups"]}
    assert groups["chat:small"]["events"] == 2 and groups["chat:small"]["failures"] == 1
    assert groups["chat:small"]["tokens_in"] == 300 and groups["chat:_b_big_/b_"]["tokens_out"] == 200
    assert r.json()["total"]["events"] == 4 and r.json()["total"]["tokens_in"] == 1300
    day = (await client.get("/api/observability/usage", params={"group_by": "day"})).json()
    assert len(day["groups"]) == 1 and day["groups"][0]["events"] == 4
    assert (await client.get("/api/observability/usage", params={"group_by": "hour", "days": 1})).status_code == 200
    bad = await client.get("/api/observability/usage", params={"group_by": "handle"})
    assert bad.status_code == 422 and bad.json()["error"] == "bad_group"
    assert (await client.get("/api/observability/usage", params={"days": 0})).status_code in (400, 422)
    page = await client.get("/metrics?days=7")
    assert page.status_code == 200 and page.text.count("<svg") == 6 and "<b>" not in page.text
    assert "Model calls by model" in page.text and ">chat:small</text>" in page.text
    assert "<strong>4</strong> usage events" in page.text and ">persona</text>" in page.text
