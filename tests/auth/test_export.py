"""The compliance export: a room's history as a signed bundle, verified offline with the public key
alone; a single changed byte is reported with its file and record."""

from __future__ import annotations

import io
import json
import subprocess
import zipfile

from mycelium.export.verify import verify
from tests.ledger.conftest import claim
from tests.support.cli import mycelium


async def _history(client, admin_conn) -> None:
    assert (await client.post("/api/rooms", json={"name": "atlas"})).status_code == 201
    items = [{"key": "plans/q3", "value": "Ship it", "created_by": "ana"}]
    assert (await client.post("/api/rooms/atlas/memory", json={"items": items})).status_code == 201
    items = [{"key": "plans/q3", "value": "Ship it in May", "created_by": "ana"}]
    assert (await client.post("/api/rooms/atlas/memory", json={"items": items})).status_code == 201
    assert (await client.post("/api/rooms/atlas/messages",
                              json={"sender_handle": "ana", "content": "done @bo"})).status_code == 201
    r = await client.post("/api/rooms/atlas/tasks", json={"title": "Review", "handle": "ana"})
    assert r.status_code == 201
    await client.post("/api/rooms/atlas/assignments/claim", json={"key": r.json()["key"], "handle": "bo"})
    for rid in ("pay-1", "pay-2"):
        await claim(admin_conn, rid)
        await admin_conn.execute("SELECT 1 FROM mycelium.complete($1, 'w:1', 1, '{\"ok\": true}')", rid)
    await admin_conn.execute("SELECT * FROM mycelium.write_setting('board.dependency_gate', 'true', 'atlas', 'ops')")


def _rewrite(data: bytes, name: str, change) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for item in source.namelist():
            content = source.read(item)
            z.writestr(item, change(content) if item == name else content)
    return out.getvalue()


async def test_a_bundle_verifies_offline_and_every_tampering_is_named(client, admin_conn, tmp_path):
    await _history(client, admin_conn)
    r = await client.get("/api/rooms/atlas/export")
    assert r.status_code == 200 and r.headers["content-type"] == "application/zip"
    data = r.content
    summary, problems = verify(data)
    assert problems == [], problems
    records = summary["records"]
    versions = [json.loads(x) for x in zipfile.ZipFile(io.BytesIO(data)).read("memory_versions.jsonl").splitlines()]
    assert [v["version"] for v in versions if v["key"] == "plans/q3"] == [1, 2]
    assert records["memories.jsonl"] == 2  # the memory and the task's row
    assert records["messages.jsonl"] >= 2  # the message, and the notices of the task
    assert records["transitions.jsonl"] == 2 and records["receipts.jsonl"] >= 2 and summary["receipts_checked"]
    assert records["audit.jsonl"] >= 1 and records["leases.jsonl"] == 1

    # the hub's receipt key, as mycelium receipts public-key shows it, is the trust anchor
    manifest = json.loads(zipfile.ZipFile(io.BytesIO(data)).read("manifest.json"))
    key = bytes.fromhex(manifest["public_key"])
    assert verify(data, key)[1] == []
    assert "signed by a key other than the one trusted" in " ".join(verify(data, b"\x00" * 32)[1])

    # one changed byte in a memory's old version: the file and the record are named
    def edit_version(content: bytes) -> bytes:
        return content.replace(b"Ship it\"", b"Ship It\"", 1)

    _, problems = verify(_rewrite(data, "memory_versions.jsonl", edit_version))
    assert any(p.startswith("memory_versions.jsonl: does not match") for p in problems), problems
    assert any(p.startswith("memory_versions.jsonl line 1 (id ") for p in problems), problems

    # a record rewritten with a fresh digest still breaks the file's hash, and the manifest's
    def forge_message(content: bytes) -> bytes:
        rows = [json.loads(line) for line in content.decode().splitlines()]
        from mycelium.export.bundle import record_digest

        rows[0]["content"] = "never said"
        rows[0]["_sha256"] = record_digest(rows[0])
        return ("\n".join(json.dumps(x, sort_keys=True) for x in rows) + "\n").encode()

    _, problems = verify(_rewrite(data, "messages.jsonl", forge_message))
    assert problems == ["messages.jsonl: does not match its SHA-256 in the manifest"]

    # a forged manifest (the file's new hash written in) fails its signature
    forged = _rewrite(data, "messages.jsonl", forge_message)
    new_hash = __import__("hashlib").sha256(zipfile.ZipFile(io.BytesIO(forged)).read("messages.jsonl")).hexdigest()

    def forge_manifest(content: bytes) -> bytes:
        m = json.loads(content)
        m["files"]["messages.jsonl"]["sha256"] = new_hash
        return json.dumps(m).encode()

    assert verify(_rewrite(forged, "manifest.json", forge_manifest))[1] == ["manifest: the signature does not verify"]

    # an audit entry changed inside a re-signed-looking file is caught by the chain
    def edit_audit(content: bytes) -> bytes:
        rows = [json.loads(line) for line in content.decode().splitlines()]
        from mycelium.export.bundle import record_digest

        rows[0]["actor"] = "someone else"
        rows[0]["_sha256"] = record_digest(rows[0])
        return ("\n".join(json.dumps(x, sort_keys=True) for x in rows) + "\n").encode()

    _, problems = verify(_rewrite(data, "audit.jsonl", edit_audit))
    assert any("audit.jsonl id" in p and "content does not match its hash" in p for p in problems), problems


async def test_the_cli_verifies_a_bundle_and_exits_1_on_a_changed_byte(client, admin_conn, tmp_path):
    await _history(client, admin_conn)
    data = (await client.get("/api/rooms/atlas/export")).content
    good = tmp_path / "good.zip"
    good.write_bytes(data)
    bad = tmp_path / "bad.zip"
    bad.write_bytes(_rewrite(data, "memories.jsonl", lambda c: c.replace(b"May", b"Jun")))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return mycelium("export", "verify", *args)

    ok = cli(str(good))
    assert ok.returncode == 0 and "verified: intact and signed" in ok.stdout, ok.stderr
    broken = cli(str(bad))
    assert broken.returncode == 1 and "memories.jsonl line 1 (key plans/q3)" in broken.stderr, broken.stderr
