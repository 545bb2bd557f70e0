"""Notices store no search document (two are appended on every claim and resolve while the room's
position lock is held); a search naming ``type:notice`` reads them through ``message_documents``,
which derives the fields index_message would have stored."""

from __future__ import annotations

NOTICES = [
    # (in the task's thread?, recipients, content, payload)
    (False, [], "", {"subkind": "claimed", "key": "t1", "assignee": "bob"}),
    (False, ["Bob", "bob", "", "system"], "@carol see https://x.example `code` [[mycelium: stance=no A=7]]",
     {"action": "accept", "step": "Review", "scores": {"a": 1},
      "metadata": {"kind": "status", "status": "open", "ttl_seconds": 60}}),
    (True, ["dana"], "@~erin quietly [[some-memory]]", {"metadata": {"kind": ""}}),
]


async def test_a_notice_gets_no_stored_document_and_its_derived_one_is_what_index_message_stores(
        admin_conn, task):
    await admin_conn.execute("SELECT mycelium.post_notice('atlas', 'filed', 'k', '{\"title\": \"T\"}')")
    for in_thread, recipients, content, payload in NOTICES:
        await admin_conn.execute(
            "INSERT INTO mycelium.messages (room, episode, payload_type, sender, recipients, content, payload)"
            " VALUES ('atlas', $1, 'notice', 'System', $2, $3, $4)",
            task.episode if in_thread else "", recipients, content, payload)
    notices = await admin_conn.fetchval(
        "SELECT count(*) FROM mycelium.messages WHERE room = 'atlas' AND payload_type = 'notice'")
    assert notices >= 1 + len(NOTICES)
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.message_search") == 0
    derived = [dict(r) for r in await admin_conn.fetch(
        "SELECT * FROM mycelium.message_documents WHERE room = 'atlas' ORDER BY position")]
    assert len(derived) == notices
    assert any(r["has_values"] for r in derived) and any(r["stance"] for r in derived)
    assert any(r["to_handles"] for r in derived) and any(r["mention_handles"] for r in derived)
    assert any(r["in_value"] == "thread" for r in derived) and any(r["expires_at"] for r in derived)
    await admin_conn.execute(
        "SELECT mycelium.index_message(m, m.content, NULL, CASE WHEN cardinality(m.mentions)"
        " + cardinality(m.silent_mentions) = 0 THEN '{}' ELSE mycelium.named_handles(m.content) END)"
        " FROM mycelium.messages m WHERE m.room = 'atlas'")
    stored = [dict(r) for r in await admin_conn.fetch("SELECT * FROM mycelium.message_search ORDER BY position")]
    assert stored == derived
    # a stored document replaces the derived one: nothing is read twice
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.message_documents") == notices


async def test_an_amended_notice_is_found_once_by_its_newest_text(client, admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    notice = await admin_conn.fetchrow("SELECT id FROM mycelium.post_notice('atlas', 'filed', 'k')")
    await admin_conn.execute(
        "INSERT INTO mycelium.messages (room, episode, subkind, sender, parents, content)"
        " VALUES ('atlas', '', 'amend', 'avery', ARRAY[$1::uuid], 'now about refunds')", notice["id"])
    r = await client.get("/api/rooms/atlas/messages/search", params={"q": "type:notice refunds"})
    assert r.status_code == 200, r.text
    assert [h["message"]["id"] for h in r.json()["hits"]] == [str(notice["id"])]
    r = await client.get("/api/rooms/atlas/messages/search", params={"q": "type:notice is:edited"})
    assert [h["message"]["id"] for h in r.json()["hits"]] == [str(notice["id"])]
    r = await client.get("/api/rooms/atlas/messages/search", params={"q": "refunds"})
    assert r.json()["hits"] == []  # a notice stays out of the default scope
