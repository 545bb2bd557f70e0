"""The runners pages over plain HTTP: a room's runners with the jobs a mention queued, one job with
its state and its output's tails escaped, an unknown job a 404 page, a bad state filter a 422."""

from __future__ import annotations

import asyncpg
import pytest


@pytest.fixture
async def woken(client) -> int:
    """Room ``lab`` with runner @bob and the job a message mentioning @bob queued: its id."""
    assert (await client.post("/api/rooms", json={"name": "lab", "created_by": "ana"})).status_code == 201
    r = await client.post("/api/rooms/lab/runners",
                          json={"handle": "bob", "command": ["agent", "{room}", "a b"], "created_by": "ops"})
    assert r.status_code == 201, r.text
    r = await client.post("/api/rooms/lab/messages",
                          json={"sender_handle": "ana", "content": "@bob over to you"})
    assert r.status_code == 201, r.text
    (job,) = (await client.get("/api/rooms/lab/jobs")).json()
    assert job["handle"] == "bob"
    return job["id"]


async def test_the_runners_page_lists_the_runner_and_its_jobs_and_filters_by_state(client, woken):
    room = await client.get("/room/lab")
    assert 'href="/room/lab/runners"' in room.text
    r = await client.get("/room/lab/runners")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert 'data-runner="bob"' in r.text and "@bob" in r.text
    assert "<title>Runners · lab · Mycelium</title>" in r.text and r.text.count('id="swarms-title"') == 1
    assert "agent &#39;{room}&#39; &#39;a b&#39;" in r.text  # shlex.join, escaped
    assert "600 s timeout" in r.text
    assert f'href="/room/lab/jobs/{woken}"' in r.text and f'data-job="{woken}"' in r.text
    state = (await client.get(f"/api/rooms/lab/jobs/{woken}")).json()["state"]
    assert f'data-job="{woken}"' in (await client.get("/room/lab/runners", params={"state": state})).text
    other = "denied" if state != "denied" else "done"
    filtered = await client.get("/room/lab/runners", params={"state": other})
    assert filtered.status_code == 200 and f'data-job="{woken}"' not in filtered.text
    assert f"No job {other} yet." in filtered.text


async def test_a_job_page_shows_its_state_and_its_output_escaped(client, admin_conn: asyncpg.Connection,
                                                                  woken):
    r = await client.get(f"/room/lab/jobs/{woken}")
    assert r.status_code == 200 and f"Job #{woken}" in r.text and "@bob" in r.text
    await admin_conn.execute(
        "UPDATE mycelium.runner_jobs SET state = 'failed', exit_code = 2, reason = 'exit 2', pid = 4242,"
        " worker = 'w1', command = ARRAY['agent', 'lab'], started_at = now(), ended_at = now(),"
        " duration_ms = 1500, stdout_tail = 'hello', stderr_tail = '<b>boom</b>' WHERE id = $1", woken)
    page = (await client.get(f"/room/lab/jobs/{woken}")).text
    assert 'state-failed">failed' in page and "exit 2" in page and "4242" in page and "1.5 s" in page
    assert "<pre" in page and "hello" in page
    assert "&lt;b&gt;boom&lt;/b&gt;" in page and "<b>boom</b>" not in page


async def test_an_unknown_job_is_a_404_page_and_a_bad_state_a_422(client, woken):
    r = await client.get(f"/room/lab/jobs/{woken + 1000}")
    assert r.status_code == 404 and "text/html" in r.headers["content-type"]
    assert "No runner job" in r.text
    assert (await client.get("/room/nowhere/runners")).status_code == 404
    bad = await client.get("/room/lab/runners", params={"state": "sleeping"})
    assert bad.status_code == 422 and "text/html" in bad.headers["content-type"]
    assert "is not one of" in bad.text


async def test_the_runners_page_shows_the_rooms_swarms_and_its_workers_turns(client):
    assert (await client.post("/api/rooms", json={"name": "lab", "created_by": "ana"})).status_code == 201
    empty = await client.get("/room/lab/runners")
    assert "No swarm yet" in empty.text and "No worker turn yet." in empty.text
    made = await client.post("/api/rooms/lab/swarms", json={"goal": "Ship <it>", "team": ["ann", "bob"],
                                                            "created_by": "ana"})
    assert made.status_code == 201, made.text
    r = await client.post("/api/rooms/lab/messages", json={"sender_handle": "ana", "content": "@bob a word?"})
    assert r.status_code == 201, r.text
    page = await client.get("/room/lab/runners")
    assert page.status_code == 200
    key = made.json()["key"]
    assert f'data-swarm="{key}"' in page.text and "Ship &lt;it&gt;" in page.text
    assert "@ann <span class=\"muted\">(lead)</span>, @bob" in page.text and "0 of 0 settled" in page.text
    assert 'data-turn="' in page.text and "mention" in page.text and "pending" in page.text
