"""Files over HTTP and plain SQL: uploads of 0 B, 1 B and a few MiB stored whole with their SHA-256
and sniffed type, ranges read as asked, path tricks and over-limit bodies refused with nothing
stored, a file's blocks gone with its row, and the blocks' own rules held against plain SQL."""

from __future__ import annotations

import hashlib
import os

import asyncpg
import pytest


@pytest.fixture
async def lab(client):
    r = await client.post("/api/rooms", json={"name": "lab"})
    assert r.status_code == 201, r.text
    return client


async def put(client, name: str, body: bytes, **params):
    return await client.post("/api/rooms/lab/files", params={"name": name, "created_by": "ana", **params},
                             content=body)


async def objects(admin_conn) -> int:
    return await admin_conn.fetchval("SELECT count(*) FROM mycelium.file_blocks")


@pytest.mark.parametrize("body", [b"", b"x", os.urandom(3 * (1 << 20) + 17)], ids=["0B", "1B", "3MiB"])
async def test_an_upload_is_stored_whole_with_its_sha256_and_read_back(lab, body):
    r = await put(lab, "notes/data.bin", body)
    assert r.status_code == 201, r.text
    got = r.json()
    assert (got["name"], got["size"], got["sha256"], got["created_by"]) == (
        "notes/data.bin", len(body), hashlib.sha256(body).hexdigest(), "ana")
    back = await lab.get("/api/rooms/lab/files/notes/data.bin")
    assert back.status_code == 200 and back.content == body
    assert back.headers["etag"] == f'"{got["sha256"]}"' and back.headers["accept-ranges"] == "bytes"
    assert back.headers["x-content-type-options"] == "nosniff"
    assert [f["name"] for f in (await lab.get("/api/rooms/lab/files")).json()] == ["notes/data.bin"]


async def test_ranges_are_read_as_asked_and_one_outside_the_file_is_a_416(lab):
    body = bytes(range(256)) * 10
    assert (await put(lab, "r.bin", body)).status_code == 201
    for header, part in (("bytes=0-0", body[:1]), ("bytes=10-19", body[10:20]), ("bytes=2550-", body[2550:]),
                         ("bytes=-5", body[-5:]), ("bytes=2500-99999", body[2500:])):
        r = await lab.get("/api/rooms/lab/files/r.bin", headers={"Range": header})
        assert r.status_code == 206 and r.content == part, header
        first = len(body) - 5 if header == "bytes=-5" else int(header[6:].split("-")[0])
        assert r.headers["content-range"] == f"bytes {first}-{first + len(part) - 1}/{len(body)}"
    for header in ("bytes=2560-", "bytes=9999-10000", "bytes=-0", "bytes=20-10"):
        r = await lab.get("/api/rooms/lab/files/r.bin", headers={"Range": header})
        assert r.status_code == 416 and r.headers["content-range"] == "bytes */2560", header
        assert r.json()["error"] == "range_not_satisfiable"
    whole = await lab.get("/api/rooms/lab/files/r.bin", headers={"Range": "bytes=0-1,5-6"})  # several: all
    assert whole.status_code == 200 and whole.content == body


@pytest.mark.parametrize(("name", "words"), [
    ("../etc/passwd", "no . or .. part"), ("a/../../b", "no . or .. part"), ("/abs", "no leading /"),
    ("a//b", "no empty part"), ("dir/", "no empty part"), ("a\\b", "no backslash"), ("a\nb", "no control"),
    ("./x", "no . or .. part"),
])
async def test_path_tricks_are_refused_before_the_body_is_read_and_nothing_is_stored(lab, admin_conn, name, words):
    before = await objects(admin_conn)
    r = await put(lab, name, b"payload")
    assert r.status_code == 422 and r.json()["error"] == "bad_file_name" and words in r.json()["message"], r.text
    assert (await lab.get("/api/rooms/lab/files")).json() == []
    assert await objects(admin_conn) == before


async def test_a_body_over_the_limit_is_a_413_and_leaves_nothing(lab, admin_conn):
    await admin_conn.execute("SELECT mycelium.write_setting('files.max_bytes', '1000', 'lab', 'ops')")
    before = await objects(admin_conn)
    declared = await put(lab, "big.bin", b"x" * 1001)
    assert declared.status_code == 413 and declared.json()["error"] == "file_too_large", declared.text

    assert (await lab.get("/api/rooms/lab/files")).json() == []
    assert await objects(admin_conn) == before
    assert (await put(lab, "fits.bin", b"z" * 1000)).status_code == 201


async def test_a_taken_name_is_a_409_unless_replaced_and_a_removed_file_takes_its_object(lab, admin_conn):
    before = await objects(admin_conn)
    assert (await put(lab, "a.txt", b"first\n")).json()["content_type"] == "text/plain; charset=utf-8"
    again = await put(lab, "a.txt", b"second")
    assert again.status_code == 409 and again.json()["error"] == "file_exists"
    replaced = await put(lab, "a.txt", b"\x89PNG\r\n\x1a\n....", replace="true")
    assert replaced.status_code == 201 and replaced.json()["content_type"] == "image/png"
    assert await objects(admin_conn) == before + 1  # the first file's block went with the row it was replaced in
    gone = await lab.delete("/api/rooms/lab/files/a.txt")
    assert gone.status_code == 200 and gone.json()["name"] == "a.txt"
    assert await objects(admin_conn) == before
    missing = await lab.get("/api/rooms/lab/files/a.txt")
    assert missing.status_code == 404 and missing.json()["error"] == "file_not_found"
    assert (await lab.get("/api/rooms/nowhere/files")).status_code == 404


async def test_files_go_with_their_room_and_a_forged_row_is_refused(lab, admin_conn):
    assert (await put(lab, "x.html", b"<!doctype html><script>alert(1)</script>")).status_code == 201
    served = await lab.get("/api/rooms/lab/files/x.html")
    assert served.headers["content-type"].startswith("text/html")
    assert served.headers["content-disposition"].startswith("attachment;")  # never the hub's own page
    before = await objects(admin_conn)
    await admin_conn.execute("SELECT mycelium.delete_room('lab')") if await admin_conn.fetchval(
        "SELECT to_regproc('mycelium.delete_room') IS NOT NULL") else await admin_conn.execute(
        "DELETE FROM mycelium.rooms WHERE name = 'lab'")
    assert await objects(admin_conn) == before - 1
    with pytest.raises(Exception) as caught:
        await admin_conn.execute("INSERT INTO mycelium.files (room, name, size, sha256, content_type, data, created_by) "
                                 "SELECT 'lab2', '../x', 0, repeat('0', 64), 'x', 1, 'psql'")
    assert "file_name_safe" in str(caught.value) or "violates" in str(caught.value)


async def test_the_room_page_lists_its_files_and_a_memory_links_one(lab, admin_conn):
    assert "No files." in (await lab.get("/room/lab")).text
    body = b"%PDF-1.7 the deck"
    assert (await put(lab, "decks/q3.pdf", body)).status_code == 201
    page = (await lab.get("/room/lab")).text
    assert 'href="/api/rooms/lab/files/decks/q3.pdf"' in page and "application/pdf" in page
    assert hashlib.sha256(body).hexdigest()[:12] in page
    r = await lab.post("/api/rooms/lab/memory", json={"items": [
        {"key": "notes/plan", "value": "The deck: [[file:decks/q3.pdf|Q3 deck]]", "created_by": "ana"}]})
    assert r.status_code in (200, 201), r.text
    shown = (await lab.get("/room/lab/memory/notes/plan")).text
    assert '<a href="/api/rooms/lab/files/decks/q3.pdf">📎 Q3 deck</a>' in shown
    # a file link is no memory link: nothing dangles in the links table
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.memory_links WHERE room = 'lab'") == 0
    assert (await lab.get("/api/rooms/lab/files/decks/q3.pdf")).content == body


async def test_ranges_across_blocks_read_the_right_bytes(lab, admin_conn):
    mib = 1 << 20
    body = os.urandom(2 * mib + 5)
    assert (await put(lab, "span.bin", body)).status_code == 201
    starts = [r["start"] for r in await admin_conn.fetch(
        "SELECT b.start, octet_length(b.bytes) AS n FROM mycelium.file_blocks b JOIN mycelium.files f USING (data)"
        " WHERE f.room = 'lab' AND f.name = 'span.bin' ORDER BY b.start")]
    assert starts == [0, mib, 2 * mib]
    for first, last in ((mib - 3, mib + 2), (mib - 1, 2 * mib), (0, 2 * mib + 4), (2 * mib + 4, 2 * mib + 4),
                        (10, mib - 10)):
        r = await lab.get("/api/rooms/lab/files/span.bin", headers={"Range": f"bytes={first}-{last}"})
        assert r.status_code == 206 and r.content == body[first:last + 1], (first, last)
    # the SQL read alone: past the end it gives what there is, and nothing beyond it
    got = await admin_conn.fetchval("SELECT mycelium.read_file_chunk('lab', 'span.bin', $1, 100)", 2 * mib)
    assert got == body[2 * mib:]
    assert await admin_conn.fetchval("SELECT mycelium.read_file_chunk('lab', 'span.bin', $1, 10)", 3 * mib) == b""


async def test_blocks_belong_to_a_file_by_commit_and_are_never_written_again(lab, admin_conn):
    # a block with no file row by the end of its transaction is refused, and nothing of it stays
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        async with admin_conn.transaction():
            up = await admin_conn.fetchval("SELECT mycelium.new_file_upload()")
            await admin_conn.execute("SELECT mycelium.append_file_bytes('lab', $1, 'orphan')", up)
    assert await objects(admin_conn) == 0
    # a block of more than 1 MiB, or of nothing, is no block
    for size in (0, (1 << 20) + 1):
        with pytest.raises(asyncpg.CheckViolationError):
            await admin_conn.execute("INSERT INTO mycelium.file_blocks (room, data, start, bytes) "
                                     "VALUES ('lab', 1, 0, $1)", b"x" * size)
    # one upload in SQL, as the hub does it: its bytes in blocks, then the row; then it is closed
    async with admin_conn.transaction():
        up = await admin_conn.fetchval("SELECT mycelium.new_file_upload()")
        assert await admin_conn.fetchval("SELECT mycelium.append_file_bytes('lab', $1, $2)", up,
                                         b"a" * ((1 << 20) + 3)) == (1 << 20) + 3
        assert await admin_conn.fetchval("SELECT mycelium.append_file_bytes('lab', $1, 'bc')", up) == (1 << 20) + 5
        size = await admin_conn.fetchval(
            "SELECT size FROM mycelium.add_file('lab', 'sql.bin', $1, repeat('0', 64), NULL, 'psql')", up)
    assert size == (1 << 20) + 5 and await objects(admin_conn) == 3
    with pytest.raises(asyncpg.PostgresError) as caught:
        await admin_conn.execute("SELECT mycelium.append_file_bytes('lab', $1, 'more')", up)
    assert caught.value.sqlstate == "MY409" and "not written again" in str(caught.value)
    got = await admin_conn.fetchval("SELECT mycelium.read_file_chunk('lab', 'sql.bin', $1, 10)", (1 << 20) - 2)
    assert got == b"aaaaabc"
