"""``contracts/refusals.json`` is the list of the database's refusals: every code the SQL raises, with
every HTTP status it raises it with, and no other; and :mod:`mycelium.errors` maps the plain
PostgreSQL SQLSTATEs as its ``database_errors`` say, on real errors of a real database.

The SQL is scanned, not listed: every ``sql/*.sql`` and ``sql/queries/*.sql`` there is. A raise is
``mycelium.refuse(<status>, '<code>', …)``, ``mycelium.refuse_missing(<room>, '<code>', …)`` (always
404) or a hand-written ``RAISE … USING ERRCODE = 'MY<status>'`` whose DETAIL is
``jsonb_build_object('error', '<code>', …)``. A raise the scan cannot read (a status or a code that is
not a literal) fails the test, but for the pass-throughs inside ``refuse`` and ``refuse_missing``.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from mycelium.errors import Refusal, refusal_from_db

REPO_ROOT = Path(__file__).resolve().parents[2]
SQL = REPO_ROOT / "sql"
CONTRACT = REPO_ROOT / "contracts" / "refusals.json"

CODE = re.compile(r"[a-z][a-z0-9_]*")
STATUS = re.compile(r"[1-5][0-9]{2}")


def contract() -> dict[str, Any]:
    return json.loads(CONTRACT.read_text(encoding="utf-8"))


def sql_files() -> list[Path]:
    return sorted([*SQL.glob("*.sql"), *(SQL / "queries").glob("*.sql")])


# ── the scan ────────────────────────────────────────────────────────────────


def string_end(text: str, i: int) -> int:
    """The index just past the string literal whose opening quote is at ``i`` ('' doubles a quote;
    an E'…' string also escapes with a backslash)."""
    escapes = i > 0 and text[i - 1] in "eE" and not (i > 1 and (text[i - 2].isalnum() or text[i - 2] == "_"))
    j = i + 1
    while j < len(text):
        if escapes and text[j] == "\\":
            j += 2
            continue
        if text[j] == "'":
            if text.startswith("''", j):
                j += 2
                continue
            return j + 1
        j += 1
    return len(text)


def without_comments(text: str) -> str:
    """The SQL with its -- and /* */ comments blanked (newlines kept, so line numbers hold); string
    literals are kept whole. Dollar quotes are left as they are: a body is SQL, with comments too."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("--", i):
            j = text.find("\n", i)
            j = len(text) if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = len(text) if j < 0 else j + 2
        elif text[i] == "'":
            j = string_end(text, i)
            out.append(text[i:j])
            i = j
            continue
        else:
            out.append(text[i])
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        i = j
    return "".join(out)


def call_args(text: str, open_paren: int, count: int) -> list[str]:
    """The first ``count`` top-level arguments of the call whose '(' is at ``open_paren``, stripped."""
    args: list[str] = []
    depth, start, i = 0, open_paren + 1, open_paren + 1
    while i < len(text) and len(args) < count:
        c = text[i]
        if c == "'":
            i = string_end(text, i)
            continue
        if c in "([":
            depth += 1
        elif c in ")]":
            if depth == 0:
                args.append(text[start:i].strip())
                break
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
        i += 1
    return args


def statement_end(text: str, i: int) -> int:
    """The index of the ';' that ends the statement running through ``i``."""
    while i < len(text):
        if text[i] == "'":
            i = string_end(text, i)
            continue
        if text[i] == ";":
            return i
        i += 1
    return len(text)


def function_bodies(text: str, name: str) -> list[tuple[int, int]]:
    """The spans of the bodies of every ``CREATE FUNCTION mycelium.<name>(…)`` in ``text``."""
    spans = []
    for m in re.finditer(rf"\bCREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+mycelium\.{name}\s*\(", text, re.I):
        opening = re.compile(r"\$(\w*)\$").search(text, m.end())
        if opening:
            closing = text.find(opening.group(0), opening.end())
            spans.append((opening.end(), len(text) if closing < 0 else closing))
    return spans


def literal_code(arg: str) -> str | None:
    m = re.fullmatch(r"'([a-z][a-z0-9_]*)'", arg)
    return m.group(1) if m else None


@dataclass
class Scan:
    raised: dict[tuple[str, int], list[str]] = field(default_factory=lambda: defaultdict(list))
    unreadable: list[str] = field(default_factory=list)
    pass_throughs: list[str] = field(default_factory=list)

    def pairs(self) -> set[tuple[str, int]]:
        return set(self.raised)


def scan_text(text: str, name: str, scan: Scan) -> None:
    text = without_comments(text)

    def where(at: int) -> str:
        return f"{name}:{text.count(chr(10), 0, at) + 1}"

    def snippet(at: int) -> str:
        return " ".join(text[at:at + 90].split())

    def inside(spans: list[tuple[int, int]], at: int) -> bool:
        return any(a <= at < b for a, b in spans)

    refuse_bodies = function_bodies(text, "refuse")
    missing_bodies = function_bodies(text, "refuse_missing")
    naming_a_function = re.compile(r"FUNCTION\s+(?:mycelium\.)?$", re.I)

    for m in re.finditer(r"\b(refuse|refuse_missing)\s*\(", text):
        if naming_a_function.search(text[max(0, m.start() - 40):m.start()]):
            continue  # its definition, a COMMENT ON it, a grant on it
        args = call_args(text, m.end() - 1, 2)
        if m.group(1) == "refuse":
            status, code = [*args, "", ""][:2]
            code = literal_code(code)
            if STATUS.fullmatch(status) and code:
                scan.raised[(code, int(status))].append(where(m.start()))
            elif inside(missing_bodies, m.start()) and status == "404":
                scan.pass_throughs.append(where(m.start()))  # refuse_missing's own: 404, the code it is given
            else:
                scan.unreadable.append(f"{where(m.start())}: {snippet(m.start())}")
        else:
            code = literal_code([*args, "", ""][1])
            if code:
                scan.raised[(code, 404)].append(where(m.start()))
            else:
                scan.unreadable.append(f"{where(m.start())}: {snippet(m.start())}")

    for m in re.finditer(r"\bERRCODE\s*=\s*'MY", text, re.I):
        status = re.compile(r"'MY([0-9]{3})'").match(text, m.end() - 3)
        statement = text[m.start():statement_end(text, m.start())]
        codes = re.findall(r"jsonb_build_object\s*\(\s*'error'\s*,\s*'([a-z][a-z0-9_]*)'\s*[,)]", statement)
        if status and len(codes) == 1:
            scan.raised[(codes[0], int(status.group(1)))].append(where(m.start()))
        elif not (inside(refuse_bodies, m.start()) and not status):
            scan.unreadable.append(f"{where(m.start())}: {snippet(m.start())}")

    for m in re.finditer(r"\bRAISE\s+(?:EXCEPTION\s+)?SQLSTATE\s+'MY", text, re.I):
        scan.unreadable.append(f"{where(m.start())}: {snippet(m.start())} (raise it with mycelium.refuse)")


def scan_sql() -> Scan:
    scan = Scan()
    for path in sql_files():
        scan_text(path.read_text(encoding="utf-8"), str(path.relative_to(REPO_ROOT)), scan)
    return scan


def listed_pairs(spec: dict[str, Any]) -> set[tuple[str, int]]:
    return {(code, status) for code, entry in spec["refusals"].items() for status in entry["status"]}


# ── (a) the contract lists what the SQL raises ──────────────────────────────


def test_the_scan_reads_what_it_should_and_flags_what_it_cannot():
    sql = """
    CREATE OR REPLACE FUNCTION mycelium.refuse(status integer, error text, message text, extra jsonb DEFAULT '{}')
    RETURNS void LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'MY' || lpad(status::text, 3, '0'); END $$;
    COMMENT ON FUNCTION mycelium.refuse(integer,text,text,jsonb) IS 'a refusal';
    CREATE OR REPLACE FUNCTION mycelium.refuse_missing(p_room text, p_error text, p_message text, p_extra jsonb)
    RETURNS boolean LANGUAGE plpgsql STABLE AS $$ BEGIN PERFORM mycelium.refuse(404, p_error, p_message, p_extra); END $$;
    -- PERFORM mycelium.refuse(400, 'in_a_comment', 'never raised');
    /* PERFORM mycelium.refuse(400, 'in_a_block_comment', 'never raised'); */
    PERFORM mycelium.refuse(
      409,
      'spread_over_lines', format('%s, it''s (here)', x), jsonb_build_object('a', 1));
    PERFORM mycelium.refuse(422,'tight','m');
    SELECT CASE WHEN found THEN true ELSE mycelium.refuse_missing(coalesce(:room, ''), 'gone', 'm', '{}') END;
    RAISE EXCEPTION USING ERRCODE = 'MY403', MESSAGE = format('no; %s', x),
      DETAIL = jsonb_build_object('error', 'by_hand', 'k', 1)::text;
    PERFORM mycelium.refuse(CASE WHEN x THEN 404 ELSE 422 END, 'dynamic_status', 'm');
    PERFORM mycelium.refuse(422, p_code, 'm');
    SELECT mycelium.refuse_missing(:room, p_code, 'm', '{}');
    RAISE EXCEPTION USING ERRCODE = 'MY409', DETAIL = detail_made_elsewhere;
    """
    scan = Scan()
    scan_text(sql, "x.sql", scan)
    assert scan.pairs() == {("spread_over_lines", 409), ("tight", 422), ("gone", 404), ("by_hand", 403)}
    assert scan.raised[("spread_over_lines", 409)] == ["x.sql:9"]
    assert len(scan.pass_throughs) == 1
    assert [u.split(":")[1] for u in scan.unreadable] == ["16", "17", "18", "19"]


def test_every_raise_in_the_sql_is_one_the_scan_can_read():
    scan = scan_sql()
    assert sql_files(), "no SQL found under sql/"
    assert not scan.unreadable, (
        "a refusal whose status or code is not a literal: the contract cannot be checked against it "
        "(write the code and status out, or list a pass-through here):\n  " + "\n  ".join(scan.unreadable))
    assert scan.pass_throughs, "mycelium.refuse_missing no longer passes its code through as a 404"


def test_the_contract_lists_every_refusal_the_sql_raises_and_no_other():
    scan = scan_sql()
    raised, listed = scan.pairs(), listed_pairs(contract())
    missing = sorted(raised - listed)
    unused = sorted(listed - raised)
    problems = [f"{code} {status} is raised but not in contracts/refusals.json (at {', '.join(scan.raised[(code, status)])})"
                for code, status in missing]
    problems += [f"{code} {status} is in contracts/refusals.json but no SQL raises it" for code, status in unused]
    assert not problems, "\n".join(problems)


def test_the_contract_is_well_formed():
    spec = contract()
    refusals = spec["refusals"]
    assert list(refusals) == sorted(refusals), "refusals are sorted by code"
    for code, entry in refusals.items():
        assert CODE.fullmatch(code), code
        assert set(entry) == {"status", "meaning"}, code
        assert entry["status"] and entry["status"] == sorted(set(entry["status"])), code
        assert all(isinstance(s, int) and 400 <= s < 500 for s in entry["status"]), code
        meaning = entry["meaning"]
        assert isinstance(meaning, str) and meaning.strip() and meaning.endswith("."), code
    errors = spec["database_errors"]
    assert list(errors) == sorted(errors)
    for state, entry in [*errors.items(), *spec["database_error_classes"].items()]:
        assert re.fullmatch(r"[0-9A-Z]{2}([0-9A-Z]{3})?", state), state
        assert 400 <= entry["status"] < 500 and CODE.fullmatch(entry["error"]), state
        assert not state.startswith("MY"), state


# ── (b) the plain SQLSTATEs, on real errors ─────────────────────────────────

# What provokes each SQLSTATE of database_errors in a migrated database. A constraint is broken on
# the hub's own tables where one is at hand, else on this test's temporary tables; a state no
# statement here reaches without a race (a serialization failure, a deadlock) is raised as itself.
SETUP = """
CREATE TEMP TABLE parent (id integer PRIMARY KEY, short varchar(2), n integer NOT NULL DEFAULT 0);
CREATE TEMP TABLE child (parent integer REFERENCES parent (id));
CREATE TEMP TABLE spans (during int4range, EXCLUDE USING gist (during WITH &&));
INSERT INTO spans VALUES ('[1,10)');
"""


def raise_as(state: str) -> str:
    return f"DO $$ BEGIN RAISE EXCEPTION 'provoked %', '{state}' USING ERRCODE = '{state}'; END $$"


PROVOKE = {
    "22000": raise_as("22000"),
    "22001": "INSERT INTO parent (id, short) VALUES (1, 'too long')",
    "22003": "SELECT 2147483647::integer + 1",
    "22007": "SELECT 'not a date'::date",
    "22008": "SELECT '2024-13-45'::date",
    "22023": "SELECT generate_series(1, 3, 0)",
    "22P02": "SELECT 'x'::integer",
    "23502": "INSERT INTO parent (id, n) VALUES (2, NULL)",
    "23503": "INSERT INTO child VALUES (404)",
    "23505": "INSERT INTO mycelium.store DEFAULT VALUES",
    "23514": "INSERT INTO mycelium.store (singleton) VALUES (false)",
    "23P01": "INSERT INTO spans VALUES ('[5,15)')",
    "40001": raise_as("40001"),
    "40P01": raise_as("40P01"),
}


async def provoke(conn: asyncpg.Connection, sql: str) -> asyncpg.PostgresError:
    with pytest.raises(asyncpg.PostgresError) as caught:
        await conn.execute(sql)
    return caught.value


def test_every_database_error_of_the_contract_is_provoked_here():
    assert set(PROVOKE) == set(contract()["database_errors"])


async def test_refusal_from_db_maps_real_database_errors_as_the_contract_says(admin_conn):
    await admin_conn.execute(SETUP)
    wrong = []
    for state, entry in contract()["database_errors"].items():
        exc = await provoke(admin_conn, PROVOKE[state])
        assert exc.sqlstate == state, f"{PROVOKE[state]!r} raised {exc.sqlstate}, not {state}"
        refusal = refusal_from_db(exc)
        got = None if refusal is None else (refusal.status, refusal.error)
        if got != (entry["status"], entry["error"]):
            wrong.append(f"{state} ({entry['condition']}): {got}, not {(entry['status'], entry['error'])}")
        elif refusal is not None and getattr(exc, "constraint_name", None):
            assert refusal.extra == {"constraint": exc.constraint_name}
            assert refusal.body()["constraint"] == exc.constraint_name
    assert not wrong, "\n".join(wrong)

    unique = refusal_from_db(await provoke(admin_conn, PROVOKE["23505"]))
    assert unique is not None and unique.extra == {"constraint": "store_pkey"}
    assert unique.body()["error"] == "conflict" and unique.body()["message"]


async def test_the_catch_all_and_what_is_no_refusal(admin_conn):
    classes = contract()["database_error_classes"]
    assert set(classes) == {"22"}
    # division_by_zero (22012) is of class 22 and in no row of database_errors
    exc = await provoke(admin_conn, "SELECT 1 / 0")
    assert exc.sqlstate == "22012" and exc.sqlstate not in contract()["database_errors"]
    refusal = refusal_from_db(exc)
    assert refusal is not None
    assert (refusal.status, refusal.error, refusal.extra) == (classes["22"]["status"], classes["22"]["error"], {})
    # a bug (an undefined table, 42P01) is no refusal
    assert refusal_from_db(await provoke(admin_conn, "SELECT * FROM no_such_table")) is None


# ── (c) refusals of the contract, through real verbs ───────────────────────


async def refused(conn: asyncpg.Connection, sql: str) -> Refusal:
    with pytest.raises(asyncpg.PostgresError) as caught:
        await conn.execute(sql)
    refusal = refusal_from_db(caught.value)
    assert refusal is not None, f"{sql!r} raised {caught.value.sqlstate}, no refusal"
    assert caught.value.sqlstate == f"MY{refusal.status:03d}"
    return refusal


async def test_real_verbs_refuse_with_the_contract_status_and_code(admin_conn):
    refusals = contract()["refusals"]
    await admin_conn.execute("SELECT mycelium.create_room('plaza')")
    cases = [
        ("SELECT mycelium.create_room('')", "invalid_room_name", {}),
        ("SELECT mycelium.create_room('plaza')", "room_exists", {"name": "plaza"}),
        ("SELECT mycelium.write_memory('no-such-room', 'notes/a', '\"hi\"'::jsonb, 'alice')",
         "room_not_found", {"room": "no-such-room"}),
        ("SELECT mycelium.delete_memory('plaza', 'notes/never')", "memory_not_found",
         {"room": "plaza", "key": "notes/never"}),
        ("SELECT mycelium.acting(NULL, 'alice', 'robot')", "invalid_actor_kind", {"kind": "robot"}),
    ]
    for sql, code, extra in cases:
        refusal = await refused(admin_conn, sql)
        assert refusal.error == code, f"{sql}: {refusal}"
        assert refusal.status in refusals[code]["status"], f"{sql}: {refusal.status} is not {code}'s"
        assert refusal.message
        assert extra.items() <= refusal.extra.items(), f"{sql}: {refusal.extra}"
        body = refusal.body()
        assert body["error"] == code and body["message"] == refusal.message
