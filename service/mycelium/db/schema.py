"""The database's code as shipped in ``sql/``, and how it reaches a database (asyncpg only).

``sql/*.sql`` hold the current definitions. Their statements are of two kinds:

* **schema** — tables, columns, domains, types, sequences, indexes, data (INSERT, a backfilling
  SELECT): what holds rows. On a
  live database these change only through a numbered, frozen revision in ``migrations/versions``.
* **code** — functions, views, triggers (``CREATE OR REPLACE``) and idempotent ``DO`` blocks. They
  are re-applied from ``sql/`` at the end of every upgrade, and whatever function, view or trigger
  in schema ``mycelium`` the re-application did not (re)define is dropped (it left ``sql/``), even
  one an older revision created earlier in the same transaction.

A fresh database can be built from ``sql/`` alone (:func:`install`, what the ledger SDK does on an
empty database, and the reference the tests compare every migrated database with); Alembic moves
an existing one through the revisions and then re-applies the code (``migrations/env.py``). A test
proves both roads give the same catalogue.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import asyncpg

from mycelium.paths import migrations_dir, sql_dir

# The order the definitions are applied in (a file may use what an earlier one defines).
SQL_FILES = (
    "base.sql", "rooms.sql", "memories.sql", "links.sql",
    "transitions.sql", "receipts.sql",
    "messages.sql", "board.sql", "assignments.sql",
    "handles.sql", "conversations.sql", "floors.sql", "participation.sql", "message_search.sql",
    "engines.sql", "runs.sql", "flows.sql",
    "digest.sql",
    "negotiations.sql",
    "compiler.sql", "synthesis.sql",
    "settings.sql",
    "workers.sql",
    "joins.sql",
    "slim.sql",
    "runners.sql",
    "swarms.sql",
    "worker_engine.sql",
    "files.sql",
    "patterns.sql",
    "usage.sql",
    "events.sql",
    "audit.sql",
    "privacy.sql",
    "catalogue.sql",
)

# Extensions the schema uses; created by the migrating user (they live outside schema mycelium and
# are never dropped: other schemas may use them).
EXTENSIONS = ("vector", "pg_trgm")

_SCHEMA_KINDS = (
    "CREATE TABLE", "CREATE DOMAIN", "CREATE TYPE", "CREATE SEQUENCE", "CREATE INDEX",
    "CREATE UNIQUE INDEX", "CREATE SCHEMA", "ALTER TABLE", "ALTER DOMAIN", "ALTER TYPE",
    "ALTER SEQUENCE", "COMMENT ON TABLE", "COMMENT ON COLUMN", "COMMENT ON DOMAIN", "COMMENT ON TYPE",
    "COMMENT ON INDEX", "COMMENT ON SCHEMA", "INSERT", "UPDATE", "DELETE", "SELECT",
)
_CODE_KINDS = (
    "CREATE OR REPLACE FUNCTION", "CREATE OR REPLACE PROCEDURE", "CREATE OR REPLACE VIEW",
    "CREATE OR REPLACE TRIGGER", "COMMENT ON FUNCTION", "COMMENT ON PROCEDURE", "COMMENT ON VIEW",
    "COMMENT ON TRIGGER", "DO",
)

_AS_OWNER = (
    "DO $$ BEGIN IF pg_has_role(current_user, 'mycelium_admin', 'MEMBER') THEN "
    "SET LOCAL ROLE mycelium_admin; END IF; END $$;\n"
)

# Each function (its pg_proc row), trigger (pg_trigger) and view (its _RETURN rule, pg_rewrite) of
# schema mycelium as its catalogue row's identity and physical address. CREATE OR REPLACE writes a
# new version of an object's row, at a new address; a row still at the address it had before the
# code ran was not (re)defined by it.
_CODE_ROWS = """
  SELECT 'f' || p.oid || p.ctid AS r FROM pg_proc p WHERE p.pronamespace = 'mycelium'::regnamespace
  UNION ALL
  SELECT 't' || t.oid || t.ctid FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
  WHERE c.relnamespace = 'mycelium'::regnamespace AND NOT t.tgisinternal
  UNION ALL
  SELECT 'v' || c.oid || w.ctid
  FROM pg_class c JOIN pg_rewrite w ON w.ev_class = c.oid AND w.rulename = '_RETURN'
  WHERE c.relnamespace = 'mycelium'::regnamespace AND c.relkind = 'v'
"""

# Before the code: where its rows are, kept for the transaction in a setting.
_MARK = f"""
DO $mark$
BEGIN
  PERFORM set_config('mycelium.code_rows_before',
                     coalesce((SELECT string_agg(r, ' ') FROM ({_CODE_ROWS}) s), ''), true);
END
$mark$;
"""

# After the code: drop every function, view and trigger whose row has not moved since the mark, one
# the code did not (re)define. Not "every row another transaction wrote": a migration from scratch
# runs the revisions and the code in one transaction, so what an older revision's frozen SQL created
# (transitions_receipt, once) is as new as what the current code re-created. A function a table still
# depends on (a default, a check, an index) is not dropped silently: the drop fails and so does the
# upgrade, until a revision deals with it.
_PRUNE = """
DO $prune$
DECLARE
  before text[] := string_to_array(current_setting('mycelium.code_rows_before'), ' ');
  r record;
BEGIN
  FOR r IN SELECT t.tgname, t.tgrelid::regclass AS tbl
           FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
           WHERE c.relnamespace = 'mycelium'::regnamespace AND NOT t.tgisinternal
             AND 't' || t.oid || t.ctid IN (SELECT unnest(before))
  LOOP
    RAISE NOTICE 'mycelium: dropping trigger % on %, which sql/ no longer defines', r.tgname, r.tbl;
    EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.tbl);
  END LOOP;
  FOR r IN SELECT c.oid::regclass AS v
           FROM pg_class c JOIN pg_rewrite w ON w.ev_class = c.oid AND w.rulename = '_RETURN'
           WHERE c.relnamespace = 'mycelium'::regnamespace AND c.relkind = 'v'
             AND 'v' || c.oid || w.ctid IN (SELECT unnest(before))
  LOOP
    RAISE NOTICE 'mycelium: dropping view %, which sql/ no longer defines', r.v;
    EXECUTE format('DROP VIEW IF EXISTS %s CASCADE', r.v);
  END LOOP;
  FOR r IN SELECT p.oid::regprocedure AS f FROM pg_proc p
           WHERE p.pronamespace = 'mycelium'::regnamespace
             AND 'f' || p.oid || p.ctid IN (SELECT unnest(before))
  LOOP
    RAISE NOTICE 'mycelium: dropping function %, which sql/ no longer defines', r.f;
    EXECUTE format('DROP FUNCTION %s', r.f);
  END LOOP;
END
$prune$;
"""

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS public.alembic_version (
  version_num varchar(32) NOT NULL,
  CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);
"""

# one lock for every process that builds or upgrades the schema of this database
INSTALL_LOCK = 0x6D7963656C69756D  # "mycelium"


class SchemaRefused(RuntimeError):
    """The database cannot be brought to this release's schema from here."""


# -- statements ------------------------------------------------------------------------------------

_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def split(text: str) -> list[str]:
    """The statements of a SQL script, each with the comments that precede it.

    Knows the lexical forms that may hide a ``;``: quoted strings (with ``''`` and, in ``E''``
    strings, backslash escapes), quoted identifiers, ``--`` and nested ``/* */`` comments, and
    dollar-quoted bodies (``$$`` or ``$tag$``; ``$1`` is a parameter, not a quote).
    """
    out: list[str] = []
    start = i = 0
    n = len(text)
    while i < n:
        c = text[i]
        after = _after_comment(text, i)
        if after is not None:
            i = after
        elif c == "'":
            escapes = i > 0 and text[i - 1] in "eE" and not _word_char(text, i - 2)
            i += 1
            while i < n:
                if escapes and text[i] == "\\":
                    i += 2
                elif text[i] == "'":
                    if text.startswith("''", i):
                        i += 2
                    else:
                        i += 1
                        break
                else:
                    i += 1
        elif c == '"':
            end = text.find('"', i + 1)
            i = n if end < 0 else end + 1
        elif c == "$" and not _word_char(text, i - 1):
            m = _DOLLAR.match(text, i)
            if m is None:
                i += 1
            else:
                end = text.find(m.group(0), m.end())
                i = n if end < 0 else end + len(m.group(0))
        elif c == ";":
            out.append(text[start:i + 1])
            start = i = i + 1
        else:
            i += 1
    rest = text[start:]
    if _bare(rest):
        out.append(rest)
    return out


def _word_char(text: str, i: int) -> bool:
    return i >= 0 and (text[i].isalnum() or text[i] == "_")


def _after_comment(text: str, i: int) -> int | None:
    """Where the comment starting at ``i`` ends (None: no comment starts there)."""
    if text.startswith("--", i):
        end = text.find("\n", i)
        return len(text) if end < 0 else end + 1
    if not text.startswith("/*", i):
        return None
    depth, i = 1, i + 2
    while i < len(text) and depth:
        if text.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif text.startswith("*/", i):
            depth, i = depth - 1, i + 2
        else:
            i += 1
    return i


def _bare(statement: str) -> str:
    """The statement without its leading comments and white space."""
    i = 0
    while True:
        while i < len(statement) and statement[i].isspace():
            i += 1
        after = _after_comment(statement, i)
        if after is None:
            return statement[i:]
        i = after


def kind(statement: str) -> str:
    """``"schema"`` or ``"code"`` (see the module docstring); anything else is refused, so every
    statement in ``sql/`` is one or the other on purpose."""
    head = " ".join(_bare(statement).split()[:5]).upper()
    if any(head == k or head.startswith(k + " ") for k in _CODE_KINDS):
        return "code"
    if any(head == k or head.startswith(k + " ") for k in _SCHEMA_KINDS):
        return "schema"
    if head.startswith("CREATE "):
        raise ValueError(f"sql/ defines code with CREATE OR REPLACE only: {head[:60]!r}")
    raise ValueError(f"a statement of unknown kind in sql/: {head[:60]!r}")


def code_of(text: str) -> str:
    """The code statements of a script (what an upgrade re-applies)."""
    return "\n".join(s for s in split(text) if kind(s) == "code")


# -- the shipped scripts ----------------------------------------------------------------------------

_CONTRACT = re.compile(r"\{\{contract ([a-z0-9-]+\.json) ([a-z_]+)\}\}")


def inline_contracts(text: str, contract: Callable[[str], Any]) -> str:
    """``text`` with each ``{{contract <file> <key>}}`` replaced by that entry of the contract file
    (``contract(file)`` reads it) as a dollar-quoted JSON literal: a closed set the SQL and the Python
    side share is written once, in ``contracts/`` (see :mod:`mycelium.contracts`)."""
    def literal(m: re.Match[str]) -> str:
        data = contract(m.group(1))
        if not isinstance(data, dict) or m.group(2) not in data:
            raise RuntimeError(f"sql/ names {m.group(0)}, which contracts/{m.group(1)} does not hold")
        value = json.dumps(data[m.group(2)], ensure_ascii=False, separators=(", ", ": "))
        return f"$contract${value}$contract$"

    return _CONTRACT.sub(literal, text)


def _read(name: str) -> str:
    from mycelium.contracts import load

    return inline_contracts((sql_dir() / name).read_text(), load)


def as_owner(script: str) -> str:
    """Run ``script`` as the owner role ``mycelium_admin`` where the migrating user may."""
    return _AS_OWNER + script + "\n;\nRESET ROLE;\n"


def preamble() -> str:
    """Roles and extensions, before anything else (as the migrating user; idempotent)."""
    extensions = "".join(f"CREATE EXTENSION IF NOT EXISTS {e};\n" for e in EXTENSIONS)
    return _read("roles.sql") + "\n" + extensions


def grants() -> str:
    """The privilege policy, re-applied after every change (as the migrating user)."""
    return _read("grants.sql")


@cache
def current_code() -> str:
    """Every code statement of ``sql/``, in order."""
    return "\n".join(code_of(_read(name)) for name in SQL_FILES)


@cache
def code_digest() -> str:
    """The digest of the code and privileges this package applies (``sql/`` and ``grants.sql``)."""
    return hashlib.sha256((current_code() + "\n" + grants()).encode()).hexdigest()


def stamp(applied: bool) -> str:
    """After the code: record that this package's code is applied (``applied``), or that the code
    is some other release's (a downgrade), in ``mycelium.code_applied`` where the table exists."""
    write = (f"INSERT INTO mycelium.code_applied (code_digest, fingerprint) "
             f"VALUES ('{code_digest()}', mycelium.code_fingerprint()) "
             "ON CONFLICT (only_row) DO UPDATE SET code_digest = EXCLUDED.code_digest, "
             "fingerprint = EXCLUDED.fingerprint, applied_at = now();") if applied else \
        "DELETE FROM mycelium.code_applied;"
    return as_owner(f"""
DO $stamp$
BEGIN
  IF to_regclass('mycelium.code_applied') IS NOT NULL THEN
    {write}
  END IF;
END
$stamp$;
""")


async def code_is_current(conn: asyncpg.Connection) -> bool:
    """The database is at the head and runs exactly this package's code and privileges, unchanged
    since they were applied: a hub starting on it has nothing to migrate."""
    if await installed_revision(conn) != head():
        return False
    return bool(await conn.fetchval(CODE_IS_CURRENT, code_digest()))


# at the head: whether the code applied last is this package's ($1: code_digest()), unchanged since
CODE_IS_CURRENT = """
  SELECT coalesce((SELECT code_digest = $1 AND fingerprint = mycelium.code_fingerprint()
                   FROM mycelium.code_applied), false)
"""


def reapply(code: str) -> str:
    """The script that re-creates the given code on a live database and drops what it leaves out."""
    return as_owner(_MARK + code + "\n" + _PRUNE)


def fresh() -> str:
    """The whole current schema, from ``sql/``, for an empty database."""
    return preamble() + as_owner("\n".join(_read(name) for name in SQL_FILES)) + grants()


# -- revisions, without Alembic ---------------------------------------------------------------------

_REVISION = re.compile(r'^revision\s*=\s*"([^"]+)"', re.MULTILINE)
_DOWN = re.compile(r'^down_revision\s*=\s*(?:"([^"]+)"|None)', re.MULTILINE)


@cache
def revisions() -> tuple[str, ...]:
    """The revision ids from the first to the head (one line of history; Alembic agrees, tested)."""
    versions = sorted(Path(migrations_dir(), "versions").glob("*.py"))
    return revision_chain({path.name: path.read_text() for path in versions})


def revision_chain(files: dict[str, str]) -> tuple[str, ...]:
    """The revision ids, first to head, of revision files given as {file name: text}."""
    parent: dict[str | None, str] = {}
    for name, text in sorted(files.items()):
        rev, down = _REVISION.search(text), _DOWN.search(text)
        if rev is None or down is None:
            raise RuntimeError(f"{name} declares no revision/down_revision")
        if down.group(1) in parent:
            raise RuntimeError(f"two revisions follow {down.group(1)!r}: history must be one line")
        parent[down.group(1)] = rev.group(1)
    chain: list[str] = []
    at: str | None = None
    while at in parent:
        at = parent[at]
        chain.append(at)
    return tuple(chain)


def head() -> str:
    return revisions()[-1]


async def installed_revision(conn: asyncpg.Connection) -> str | None:
    """The revision the database is at, or None when the hub's schema was never installed."""
    if await conn.fetchval("SELECT to_regclass('public.alembic_version') IS NULL"):
        return None
    return await conn.fetchval("SELECT version_num FROM public.alembic_version")


async def install(conn: asyncpg.Connection) -> str:
    """Bring an empty database to this release's schema, or find it there; the revision it is at.

    Builds ``sql/`` in one transaction and records the head revision where Alembic keeps it, so
    ``mycelium db upgrade`` carries on from here. A database at another revision is left alone
    (moving it is Alembic's: ``mycelium db upgrade``), and so is one the role may not build on.
    """
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", INSTALL_LOCK)
        at = await installed_revision(conn)
        if at == head():
            return at
        if at is not None:
            raise SchemaRefused(
                f"the database is at schema revision {at}, this release needs {head()}: "
                "run `mycelium db upgrade` (it needs the hub: pip install 'mycelium-hub[hub]')"
            )
        if await conn.fetchval("SELECT to_regnamespace('mycelium') IS NOT NULL"):
            raise SchemaRefused(
                "the database has a mycelium schema but no record of its revision; "
                "run `mycelium db upgrade` or drop the schema"
            )
        user = await conn.fetchval("SELECT current_user")
        try:
            await conn.execute(fresh())
        except asyncpg.InsufficientPrivilegeError as e:
            raise SchemaRefused(
                f"the hub's schema is not installed in this database and {user} may not install it "
                f"({e}): run `mycelium db upgrade` as a user who may"
            ) from None
        await conn.execute(_VERSION_TABLE)
        await conn.execute("INSERT INTO public.alembic_version (version_num) VALUES ($1)", head())
        await conn.execute(grants())  # the version table is readable by the hub's roles too
        await conn.execute(stamp(applied=True))
    return head()
