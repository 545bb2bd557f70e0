"""The wake digest: what `await --digest` delivers beside the message (why it woke, what changed
since the handle's last turn, its tasks and the board, who asked, "await first", the reply line),
from the database's state, over real HTTP and from the CLI as a process."""

from __future__ import annotations

import asyncpg

from tests.conversations.conftest import served  # noqa: F401 (a hub served over real HTTP)
from tests.conversations.test_cli import mycelium
from tests.engines.conftest import coordinate, eventually, make_task, run_of, setup_room


async def test_a_mention_wakes_with_what_changed_since_the_last_turn_and_who_asked(
    admin_conn: asyncpg.Connection, served  # noqa: F811
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Ship passkey login")
    await admin_conn.execute("SELECT * FROM mycelium.claim_task('atlas', $1, 'nova')", key)
    other = await admin_conn.fetchval(
        "SELECT key FROM mycelium.create_task('atlas', 'Write the docs', 'julia', NULL, 'nova')"
    )
    # nova's last turn: everything before it is old news
    await admin_conn.execute("SELECT * FROM mycelium.reply('atlas', 'nova', 'On it.', NULL, $1)", episode)
    await admin_conn.execute("SELECT * FROM mycelium.create_task('atlas', 'Review login', 'julia')")
    await admin_conn.execute("SELECT * FROM mycelium.hold_floor('atlas', $1, 'julia', '{}', 'julia')", episode)
    await admin_conn.execute("SELECT * FROM mycelium.release_floor('atlas', $1, 'julia')", episode)
    long = "x" * 400
    await admin_conn.execute("SELECT * FROM mycelium.post_message('atlas', 'julia', $1, $2)", f"@nova {long}", episode)
    async with served.client() as http:
        first = (await http.get("/api/rooms/atlas/await", params={"handle": "nova", "timeout": 2})).json()
        assert "digest" not in first and first["prompt"].startswith("@nova x")  # the contract as it was
        await admin_conn.execute(
            "SELECT * FROM mycelium.post_message('atlas', 'julia', '@nova can you look now?', $1)", episode
        )
        await admin_conn.execute("SELECT * FROM mycelium.post_message('atlas', 'bob', '@nova and this')")
        got = (
            await http.get("/api/rooms/atlas/await", params={"handle": "nova", "timeout": 2, "digest": "true"})
        ).json()
    assert got["prompt"] == "@nova can you look now?"
    wake = got["wake"]
    assert wake["why"] == "mention" and wake["from"] == "julia" and wake["since"] is not None
    assert wake["thread"]["key"] == key and wake["thread"]["title"] == "Ship passkey login"
    # the filed notice after her turn, and no floor moves
    assert [(c["subkind"], c["key"]) for c in wake["changes"]] == [("filed", "work/review-login")]
    assert {t["key"]: t["holding"] for t in wake["tasks"]} == {key: True, other: False}
    assert {b["key"] for b in wake["board"]} == {key, other, "work/review-login"}
    # the message delivered before this one, cut
    (asked,) = wake["asked"]
    assert asked["sender"] == "julia" and asked["here"] and len(asked["text"]) == 240
    assert wake["waiting"] == 1  # bob's mention still waits
    text = got["digest"]
    assert text.startswith("Woken in atlas, in work/ship-passkey-login (Ship passkey login). @julia mentioned you.")
    assert "Changed since your last turn:\n- @julia filed work/review-login (Review login)" in text
    assert "floor" not in text
    assert f"- {key}: Ship passkey login [open, you hold it]" in text
    assert "Asked for you before this:\n- @julia: @nova xxx" in text
    assert "Await first: 1 more message(s) wait for you (`mycelium await --handle nova`)." in text
    assert text.endswith(f'Reply in {key} (Ship passkey login): `mycelium respond --handle nova --task {key} "…"`')


async def test_an_engines_turn_wakes_with_the_flow_step_and_the_reply_line_from_the_cli(
    admin_conn: asyncpg.Connection,
    served,  # noqa: F811
    engines_hub,
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Review login")
    await engines_hub()
    await coordinate(admin_conn, "atlas", key, "review @nova @julia: the login page")

    async def asked():
        r = await run_of(admin_conn, "atlas", episode)
        return r if r is not None and r["asked_position"] else None

    await eventually(asked)
    # the summon named her: that wakes her first, with the conductor's question waiting behind it
    summon = (await mycelium(served.url, "await", "--handle", "nova", "--timeout", "5", "--digest")).stdout
    assert summon.startswith("@julia [thread ") and "@julia mentioned you." in summon
    assert "Await first: 1 more message(s) wait for you (`mycelium await --handle nova`)." in summon
    done = await mycelium(served.url, "await", "--handle", "nova", "--timeout", "5", "--digest")
    out = done.stdout
    assert out.startswith("@conductor [thread ") and "review · draft · turn 1 of 6 · nova" in out
    assert "It is your turn: @conductor runs review, step draft (turn 1 of 6)." in out
    assert "Await first: nothing else waits for you now." in out
    assert out.rstrip().endswith(f'`mycelium respond --handle nova --task {key} "…"`')
    # without --digest the CLI prints the message alone, as before
    await admin_conn.execute("SELECT * FROM mycelium.post_message('atlas', 'julia', '@nova ping')")
    plain = await mycelium(served.url, "await", "--handle", "nova", "--timeout", "5")
    assert plain.stdout.strip() == "@julia: @nova ping"
