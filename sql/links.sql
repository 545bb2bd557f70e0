-- Links between memories: myc:// URIs, [[wikilinks]], ![[transclusions]] and typed relations in
-- frontmatter, parsed by the database on every write (trigger), so a link index can never drift
-- from the memories it describes, whoever wrote them.
--
--   myc://decisions/db                a URI, bare in prose or as [label](myc://decisions/db)
--   [[decisions/db]]                  the same edge, shorter
--   [[decisions/db#trade-offs|why]]   a section anchor and a label
--   ![[glossary/vector-store]]        transclusion: the target's text pulled in on /links/expand
--   supersedes: decisions/db-v1       frontmatter relations (supersedes, superseded-by, depends-on,
--                                     part-of, relates-to): a key, a myc:// URI, or a list of them
--
-- What is stored is only what the text says (memory_links, memory_anchors). Whether a link resolves
-- is decided when it is read (view link_edges), so a target written later resolves the link with no
-- rewrite of the source. Errors: cross_room, not_found, no_anchor, not_expandable.
--
-- One parser, used for both the index and the expansion: the stored `pos` of a transclusion is where
-- /links/expand splices the target's text in, so what counts as a marker is defined once, here.

-- ---------------------------------------------------------------------------------------------
-- Derived tables (written only by derive_links; a direct write is refused).

-- The relation keys of frontmatter, in the order their edges are listed.
CREATE OR REPLACE FUNCTION mycelium.link_relations() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ARRAY['supersedes', 'superseded-by', 'depends-on', 'part-of', 'relates-to']
$$;
COMMENT ON FUNCTION mycelium.link_relations IS 'public inlined';

CREATE TABLE mycelium.memory_links (
  room text NOT NULL,
  source_key text NOT NULL,
  ord integer NOT NULL,
  target text NOT NULL CHECK (target <> ''),
  kind text NOT NULL CHECK (kind IN ('uri', 'wikilink', 'transclusion', 'relation')),
  anchor text CHECK (anchor <> ''),
  label text,
  relation text CHECK (relation = ANY (mycelium.link_relations())),
  raw text NOT NULL,
  cross_room text,
  pos integer CHECK (pos >= 1),
  PRIMARY KEY (room, source_key, ord),
  FOREIGN KEY (room, source_key) REFERENCES mycelium.memories (room, key) ON DELETE CASCADE,
  CHECK ((kind = 'relation') = (relation IS NOT NULL)),
  CHECK ((kind = 'relation') = (pos IS NULL))
);
CREATE INDEX memory_links_backlinks ON mycelium.memory_links (room, target);
COMMENT ON TABLE mycelium.memory_links IS
  'Every link a memory''s text makes, in text order; derived by trigger from memories, never written directly.';
COMMENT ON COLUMN mycelium.memory_links.pos IS
  'Where raw starts in the memory''s body (characters, from 1); NULL for frontmatter relations.';
COMMENT ON COLUMN mycelium.memory_links.cross_room IS
  'The other room a myc://rooms/<room>/... link names; such a link never resolves here.';

-- The section anchors of a memory (slugs of its headings), for #anchor checks.
CREATE TABLE mycelium.memory_anchors (
  room text NOT NULL,
  key text NOT NULL,
  anchor text NOT NULL CHECK (anchor <> ''),
  level smallint NOT NULL CHECK (level BETWEEN 1 AND 6),
  line integer NOT NULL,
  PRIMARY KEY (room, key, anchor),
  FOREIGN KEY (room, key) REFERENCES mycelium.memories (room, key) ON DELETE CASCADE
);

-- ---------------------------------------------------------------------------------------------
-- The parser (pure functions: callable from psql to see what a text would link to).

-- A heading or an anchor as a URL fragment, GitHub-style: lower case, punctuation dropped, runs of
-- spaces become one hyphen ("Trade Offs" -> "trade-offs", "Why? (v2)" -> "why-v2", "Über" -> "über").
-- ASCII text (the common case) takes string functions; other text takes regular expressions with
-- the first Unicode-aware collation the server has (builtin pg_c_utf8 from PostgreSQL 17, else libc
-- C.utf8), so letters are Unicode letters whatever the database's locale; without one, non-ASCII
-- letters are dropped like punctuation. Both ways give the same slug for ASCII text.
DO $slug$
DECLARE
  coll text;
BEGIN
  SELECT format('COLLATE %I.%I', n.nspname, c.collname) INTO coll
  FROM pg_collation c JOIN pg_namespace n ON n.oid = c.collnamespace
  WHERE c.collname IN ('pg_c_utf8', 'C.utf8', 'C.UTF-8')
    AND c.collencoding IN (-1, (SELECT encoding FROM pg_database WHERE datname = current_database()))
  ORDER BY array_position(ARRAY['pg_c_utf8', 'C.utf8', 'C.UTF-8'], c.collname::text)
  LIMIT 1;
  EXECUTE format($fn$
    CREATE OR REPLACE FUNCTION mycelium.link_slug(p_text text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
      SELECT CASE WHEN octet_length(p_text) = length(p_text) THEN
        -- whitespace becomes a space, other punctuation and control characters go, spaces join by "-"
        btrim(array_to_string(array_remove(string_to_array(translate(lower(p_text),
          E'\t\n\v\f\r!"#$%%&''()*+,./:;<=>?@[\\]^`{|}~' || %L, '     '), ' '), ''), '-'), '-')
      ELSE
        btrim(regexp_replace(regexp_replace(lower(btrim(p_text) %s), '[^[:alnum:][:space:]_-]', '', 'g'),
                             '[[:space:]]+', '-', 'g'), '-')
      END
    $$ $fn$,
    (SELECT string_agg(chr(c), '') FROM generate_series(1, 31) c WHERE c NOT BETWEEN 9 AND 13) || chr(127),
    coalesce(coll, ''));
END
$slug$;
COMMENT ON FUNCTION mycelium.link_slug IS 'public inlined';

-- A link target as a memory key: no myc:// scheme, no leading "/" or "./", no trailing ".md" or "/".
-- (String functions, not regular expressions: this runs for every link of every write.)
CREATE OR REPLACE FUNCTION mycelium.link_key(p_ref text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  k text := btrim(p_ref);
BEGIN
  IF starts_with(k, 'myc://') THEN
    k := substr(k, 7);
  END IF;
  WHILE starts_with(k, '/') OR starts_with(k, './') LOOP
    k := ltrim(substr(k, 2), '/');
  END LOOP;
  k := rtrim(k, '/');
  IF right(k, 3) = '.md' THEN
    k := rtrim(left(k, -3), '/');
  END IF;
  RETURN k;
END
$$;
COMMENT ON FUNCTION mycelium.link_key IS 'public inlined';

-- The text with every code region blanked (same length, newlines kept) so that links and headings
-- inside code are not seen, and every position still points into the original text. The blank is
-- U+0001, a character no link can contain, so a link found in the blanked text reads the same in the
-- original. Fences: a line of ``` or ~~~ (3 or more, up to 3 spaces in) opens a block that a line of
-- at least as many of the same character closes (an unclosed fence runs to the end). Inline code: a
-- run of N backticks up to the next run of exactly N on the same line. Linear in the text's length:
-- each line is cut once into its backtick runs, and each run's partner is found by one backward scan.
-- String functions only: a regular expression per line would cost more than the rest together.
CREATE OR REPLACE FUNCTION mycelium.link_code_mask(p_body text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  blank constant text := chr(1);
  lines text[];
  line text;
  t text;
  fence_char text;
  fence_len integer;
  run integer;
  pieces text[];
  runs integer[];
  gaps text[];
  partner integer[];
  last_at integer[];
  parts text[];
  k integer;
  j integer;
  c integer;
  span integer;
BEGIN
  IF p_body IS NULL OR (strpos(p_body, '`') = 0 AND strpos(p_body, '~~~') = 0) THEN
    RETURN p_body;
  END IF;
  lines := string_to_array(p_body, E'\n');
  FOR i IN 1 .. coalesce(array_length(lines, 1), 0) LOOP
    line := lines[i];
    CONTINUE WHEN fence_char IS NULL AND strpos(line, '`') = 0 AND strpos(line, '~~~') = 0;
    t := ltrim(line, ' ');
    run := CASE WHEN length(line) - length(t) <= 3 AND left(t, 1) IN ('`', '~')
                THEN length(t) - length(ltrim(t, left(t, 1))) ELSE 0 END;
    IF fence_char IS NOT NULL THEN  -- inside a block: blank it; a long enough bare fence closes it
      lines[i] := repeat(blank, length(line));
      IF left(t, 1) = fence_char AND run >= fence_len AND btrim(substr(t, run + 1), E' \t\r') = '' THEN
        fence_char := NULL;
      END IF;
      CONTINUE;
    END IF;
    IF run >= 3 AND NOT (left(t, 1) = '`' AND strpos(substr(t, run + 1), '`') > 0) THEN
      fence_char := left(t, 1);  -- an opening fence (a backtick fence's info string has no backtick)
      fence_len := run;
      lines[i] := repeat(blank, length(line));
      CONTINUE;
    END IF;
    CONTINUE WHEN strpos(line, '`') = 0;
    -- the line as gaps and maximal backtick runs: gaps[1] runs[1] gaps[2] ... runs[k] gaps[k+1]
    pieces := string_to_array(line, '`');
    gaps := ARRAY[pieces[1]];
    runs := '{}';
    run := 0;
    FOR x IN 2 .. array_length(pieces, 1) LOOP
      run := run + 1;
      IF pieces[x] <> '' OR x = array_length(pieces, 1) THEN
        runs := array_append(runs, run);
        gaps := array_append(gaps, pieces[x]);
        run := 0;
      END IF;
    END LOOP;
    k := array_length(runs, 1);
    partner := array_fill(NULL::integer, ARRAY[k]);
    last_at := '{}';
    FOR x IN REVERSE k .. 1 LOOP  -- partner[x]: the next run as long as run x
      partner[x] := last_at[runs[x]];
      last_at[runs[x]] := x;
    END LOOP;
    parts := ARRAY[gaps[1]];
    j := 1;
    WHILE j <= k LOOP
      c := partner[j];
      IF c IS NULL THEN  -- no closing run: the backticks are literal
        parts := array_append(parts, repeat('`', runs[j]));
        parts := array_append(parts, gaps[j + 1]);
        j := j + 1;
      ELSE
        span := 0;
        FOR x IN j .. c LOOP
          span := span + runs[x] + CASE WHEN x > j THEN length(gaps[x]) ELSE 0 END;
        END LOOP;
        parts := array_append(parts, repeat(blank, span));
        parts := array_append(parts, gaps[c + 1]);
        j := c + 1;
      END IF;
    END LOOP;
    lines[i] := array_to_string(parts, '');
  END LOOP;
  RETURN array_to_string(lines, E'\n');
END
$$;
COMMENT ON FUNCTION mycelium.link_code_mask IS 'public inlined';

-- What a link body (the inside of [[...]], a URI, a relation value) points at, or NULL target when
-- it is not a link: blank, a directive ("[[word: ...]]" - a word, a colon and a space, as in
-- "[[mycelium: stance=accept]]"), a room's file ("[[file:report.pdf]]", sql/files.sql), or nothing
-- left after normalising. "key#anchor|label".
-- myc://rooms/<room>/<key> names another room (cross_room); naming this room is a plain edge.
CREATE OR REPLACE FUNCTION mycelium.link_ref(
  p_room text, p_ref text,
  OUT target text, OUT anchor text, OUT label text, OUT cross_room text
) LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  inner_text text := btrim(coalesce(p_ref, ''), E' \t\r\n');
  bar integer;
  hash integer;
  m text[];
BEGIN
  IF inner_text = '' OR (strpos(inner_text, ':') > 0 AND (inner_text ~ '^[A-Za-z][A-Za-z0-9_-]*:[[:space:]]'
                                                           OR inner_text ~* '^(mycelium[[:space:]]*|file):')) THEN
    RETURN;
  END IF;
  bar := strpos(inner_text, '|');
  IF bar > 0 THEN
    label := nullif(btrim(substr(inner_text, bar + 1)), '');
    inner_text := left(inner_text, bar - 1);
  END IF;
  hash := strpos(inner_text, '#');
  IF hash > 0 THEN
    anchor := nullif(mycelium.link_slug(substr(inner_text, hash + 1)), '');
    inner_text := left(inner_text, hash - 1);
  END IF;
  target := nullif(mycelium.link_key(inner_text), '');
  IF target IS NULL THEN
    anchor := NULL;
    label := NULL;
    RETURN;
  END IF;
  m := CASE WHEN starts_with(target, 'rooms/') THEN regexp_match(target, '^rooms/([^/]+)(/(.+))?$') END;
  IF m IS NOT NULL THEN
    IF m[1] = p_room AND m[3] IS NOT NULL THEN
      target := m[3];
    ELSE
      cross_room := m[1];
    END IF;
  END IF;
END
$$;
COMMENT ON FUNCTION mycelium.link_ref IS 'public inlined';

-- The one pattern for a link in text, tried left to right (leftmost match wins, so a URI inside a
-- wikilink or a markdown link is part of that one edge):
--   ![[...]] or [[...]]            (no brackets, newline or code inside)
--   [label](myc://...)
--   myc://...                      (a bare URI: runs to whitespace or a bracket or quote)
CREATE OR REPLACE FUNCTION mycelium.link_pattern() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $re$
  SELECT '!?\[\[[^][\n\u0001]*\]\]'
      || '|\[[^][\n\u0001]*\]\(myc://[^()[:space:]\u0001]*\)'
      || '|myc://[^][()<>"''`[:space:]\u0001]*'
$re$;
COMMENT ON FUNCTION mycelium.link_pattern IS 'public inlined';

-- The links of a text whose code is already blanked (p_masked = link_code_mask(body)): body links
-- in text order, then frontmatter relations. One regex pass finds the matches; splitting on the same
-- pattern gives the text between them, and the running length of both is where each match starts.
-- A match holds no blanked character, so it is also the original text at that place.
CREATE OR REPLACE FUNCTION mycelium.parse_masked_links(p_room text, p_masked text, p_meta jsonb)
RETURNS TABLE (ord integer, target text, kind text, anchor text, label text, relation text,
               raw text, cross_room text, pos integer)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  WITH tokens AS (
    SELECT m[1] AS tok, n FROM regexp_matches(p_masked, mycelium.link_pattern(), 'g') WITH ORDINALITY AS t(m, n)
  ), gaps AS (
    SELECT g, n FROM regexp_split_to_table(p_masked, mycelium.link_pattern()) WITH ORDINALITY AS s(g, n)
  ), placed AS (
    SELECT t.n, t.tok,
           (sum(length(g.g) + length(t.tok)) OVER (ORDER BY t.n) - length(t.tok) + 1)::integer AS pos
    FROM tokens t JOIN gaps g ON g.n = t.n
  ), read AS (
    SELECT p.n, p.pos, c.kind, c.ref, c.md_label,
           CASE WHEN c.kind = 'uri' AND NOT starts_with(p.tok, '[') THEN c.ref ELSE p.tok END AS raw
    FROM placed p CROSS JOIN LATERAL (
      SELECT CASE WHEN starts_with(p.tok, '![[') THEN 'transclusion'
                  WHEN starts_with(p.tok, '[[') THEN 'wikilink' ELSE 'uri' END AS kind,
             CASE WHEN starts_with(p.tok, '![[') THEN substr(p.tok, 4, length(p.tok) - 5)
                  WHEN starts_with(p.tok, '[[') THEN substr(p.tok, 3, length(p.tok) - 4)
                  WHEN starts_with(p.tok, '[') THEN substring(p.tok FROM '\]\((.*)\)$')
                  ELSE rtrim(p.tok, '.,;:!?')  -- a sentence ends, and the URI with it
             END AS ref,
             CASE WHEN starts_with(p.tok, '[') AND NOT starts_with(p.tok, '[[')
                  THEN nullif(btrim(substring(p.tok FROM '^\[(.*)\]\(')), '') END AS md_label
    ) c
  ), links AS (
    SELECT 1 AS part, r.n AS n1, 0::bigint AS n2, r.kind, l.target, l.anchor,
           coalesce(l.label, r.md_label) AS label, NULL::text AS relation,
           r.raw, l.cross_room, r.pos
    FROM read r CROSS JOIN LATERAL mycelium.link_ref(p_room, r.ref) l
    WHERE l.target IS NOT NULL AND (r.kind <> 'uri' OR length(r.ref) > length('myc://'))
    UNION ALL
    SELECT 2, k.n, e.n, 'relation', l.target, l.anchor, l.label, k.rel, k.rel || ': ' || (e.v #>> '{}'),
           l.cross_room, NULL
    FROM unnest(mycelium.link_relations()) WITH ORDINALITY AS k(rel, n)
    CROSS JOIN LATERAL jsonb_array_elements(
      CASE jsonb_typeof(p_meta -> k.rel) WHEN 'array' THEN p_meta -> k.rel
                                         WHEN 'string' THEN jsonb_build_array(p_meta -> k.rel)
                                         ELSE '[]' END) WITH ORDINALITY AS e(v, n)
    CROSS JOIN LATERAL mycelium.link_ref(p_room, e.v #>> '{}') l
    WHERE jsonb_typeof(p_meta) = 'object' AND jsonb_typeof(e.v) = 'string' AND l.target IS NOT NULL
  )
  SELECT (row_number() OVER (ORDER BY part, n1, n2))::integer, target, kind, anchor, label, relation, raw,
         cross_room, pos
  FROM links
  ORDER BY part, n1, n2
$$;
COMMENT ON FUNCTION mycelium.parse_masked_links IS 'public inlined';

-- Every link a memory makes, in text order: body links first (pos = where raw starts in the body),
-- then frontmatter relations. Code (fenced or inline) is never parsed.
CREATE OR REPLACE FUNCTION mycelium.parse_links(p_room text, p_body text, p_meta jsonb DEFAULT '{}')
RETURNS TABLE (ord integer, target text, kind text, anchor text, label text, relation text,
               raw text, cross_room text, pos integer)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT * FROM mycelium.parse_masked_links(p_room, mycelium.link_code_mask(p_body), p_meta)
$$;
COMMENT ON FUNCTION mycelium.parse_links IS 'public inlined';

-- The headings of a text whose code is blanked, in order: line number, level and anchor slug
-- (the heading's own text, closing #s dropped). A repeated slug gets "-1", "-2", ... as on GitHub;
-- an empty heading has slug '' (it has no anchor, but it still ends a section). Slugs are unique: a
-- heading whose slug an earlier one already took (literally "Foo 1" and a second "Foo") has none.
CREATE OR REPLACE FUNCTION mycelium.masked_outline(p_body text, p_masked text)
RETURNS TABLE (line integer, level integer, slug text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  WITH candidates AS (  -- lines starting with "#" after at most 3 spaces (string functions only)
    SELECT x.n::integer AS line, x.orig, length(x.masked) - length(ltrim(x.masked, ' ')) AS indent,
           ltrim(x.masked, ' ') AS t
    FROM unnest(string_to_array(p_body, E'\n'), string_to_array(p_masked, E'\n'))
         WITH ORDINALITY AS x(orig, masked, n)
    WHERE strpos(p_body, '#') > 0 AND starts_with(ltrim(x.masked, ' '), '#')
  ), heads AS (  -- 1 to 6 "#" then a space, a tab or the end: the text after them, trimmed
    SELECT c.line, c.level, btrim(substr(c.orig, c.indent + c.level + 1), E' \t\r') AS text
    FROM (SELECT candidates.*, length(t) - length(ltrim(t, '#')) AS level FROM candidates) c
    WHERE c.indent <= 3 AND c.level <= 6 AND substr(c.t, c.level + 1, 1) IN ('', ' ', E'\t', E'\r')
  ), titled AS (  -- without a closing run of "#" (one preceded by a space, or the whole text)
    SELECT h.line, h.level,
           mycelium.link_slug(CASE WHEN rtrim(h.text, '#') = '' THEN ''
                                   WHEN right(rtrim(h.text, '#'), 1) IN (' ', E'\t')
                                     THEN rtrim(rtrim(h.text, '#'), E' \t')
                                   ELSE h.text END) AS base
    FROM heads h
  ), numbered AS (
    SELECT t.line, t.level,
           CASE WHEN t.base = '' OR t.dup = 0 THEN t.base ELSE t.base || '-' || t.dup END AS slug
    FROM (SELECT titled.*, row_number() OVER (PARTITION BY base ORDER BY line) - 1 AS dup FROM titled) t
  )
  SELECT line, level, CASE WHEN row_number() OVER (PARTITION BY slug ORDER BY line) = 1 THEN slug ELSE '' END
  FROM numbered
  ORDER BY line
$$;
COMMENT ON FUNCTION mycelium.masked_outline IS 'public inlined';

CREATE OR REPLACE FUNCTION mycelium.memory_outline(p_body text)
RETURNS TABLE (line integer, level integer, slug text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT * FROM mycelium.masked_outline(p_body, mycelium.link_code_mask(p_body))
$$;
COMMENT ON FUNCTION mycelium.memory_outline IS 'public inlined';

-- The text under a heading: from the line after it up to the next heading of the same or a higher
-- level, trimmed. NULL anchor: the whole text, trimmed. NULL when there is no such anchor.
CREATE OR REPLACE FUNCTION mycelium.memory_section(p_body text, p_anchor text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  start integer;
  stop integer;
  lines text[];
BEGIN
  IF p_anchor IS NULL THEN
    RETURN btrim(p_body, E' \t\r\n');
  END IF;
  WITH o AS MATERIALIZED (SELECT * FROM mycelium.memory_outline(p_body))
  SELECT h.line, (SELECT min(o.line) FROM o WHERE o.line > h.line AND o.level <= h.level)
  INTO start, stop
  FROM o h WHERE h.slug = p_anchor;
  IF start IS NULL THEN
    RETURN NULL;
  END IF;
  lines := string_to_array(p_body, E'\n');
  RETURN btrim(array_to_string(lines[start + 1 : coalesce(stop - 1, array_length(lines, 1))], E'\n'),
               E' \t\r\n');
END
$$;

-- Transclusion is opt-in on the target: frontmatter expandable: true (the boolean, nothing else).
CREATE OR REPLACE FUNCTION mycelium.is_expandable(p_meta jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(p_meta -> 'expandable' = 'true'::jsonb, false)
$$;
COMMENT ON FUNCTION mycelium.is_expandable IS 'public inlined';

-- ---------------------------------------------------------------------------------------------
-- Derivation: the trigger on memories, and a rebuild for when the parser itself changes.

-- Replace one memory's links and anchors with what its current text says. It reads the text itself,
-- so no caller (the hub's role may execute it) can make the index say anything else.
CREATE OR REPLACE FUNCTION mycelium.derive_links(p_room text, p_key text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  m record;
  masked text;
BEGIN
  SELECT room, key, body, meta INTO m FROM mycelium.memories WHERE room = p_room AND key = p_key;
  PERFORM set_config('mycelium.deriving_links', 'on', true);
  DELETE FROM mycelium.memory_links WHERE room = p_room AND source_key = p_key;
  DELETE FROM mycelium.memory_anchors WHERE room = p_room AND key = p_key;
  IF m.key IS NOT NULL THEN
    masked := mycelium.link_code_mask(m.body);
    INSERT INTO mycelium.memory_links (room, source_key, ord, target, kind, anchor, label, relation, raw,
                                       cross_room, pos)
    SELECT m.room, m.key, l.ord, l.target, l.kind, l.anchor, l.label, l.relation, l.raw, l.cross_room, l.pos
    FROM mycelium.parse_masked_links(m.room, masked, m.meta) l;
    INSERT INTO mycelium.memory_anchors (room, key, anchor, level, line)
    SELECT m.room, m.key, o.slug, o.level, o.line
    FROM mycelium.masked_outline(m.body, masked) o WHERE o.slug <> '';
  END IF;
  PERFORM set_config('mycelium.deriving_links', '', true);
END
$$;
COMMENT ON FUNCTION mycelium.derive_links IS 'public write';

-- Whether a text may hold a link or a heading at all: most writes are prose, and skip the parser.
CREATE OR REPLACE FUNCTION mycelium.may_link(p_body text, p_meta jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT strpos(p_body, '[[') > 0 OR strpos(p_body, 'myc://') > 0 OR strpos(p_body, '#') > 0
      OR coalesce(p_meta ?| mycelium.link_relations(), false)
$$;

-- Re-derive when what links are made of changed: the body, or a relation key of the frontmatter
-- (a status field written on a board row changes neither).
CREATE OR REPLACE FUNCTION mycelium.memories_derive_links() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' THEN
    IF NEW.body IS NOT DISTINCT FROM OLD.body
       AND NOT EXISTS (SELECT 1 FROM unnest(mycelium.link_relations()) r
                       WHERE NEW.meta -> r IS DISTINCT FROM OLD.meta -> r) THEN
      RETURN NULL;
    END IF;
    IF mycelium.may_link(NEW.body, NEW.meta) OR mycelium.may_link(OLD.body, OLD.meta) THEN
      PERFORM mycelium.derive_links(NEW.room, NEW.key);
    END IF;
  ELSIF mycelium.may_link(NEW.body, NEW.meta) THEN
    PERFORM mycelium.derive_links(NEW.room, NEW.key);
  END IF;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t80_memories_derive_links_on_insert AFTER INSERT ON mycelium.memories
  FOR EACH ROW EXECUTE FUNCTION mycelium.memories_derive_links();
CREATE OR REPLACE TRIGGER t85_memories_derive_links_on_update AFTER UPDATE ON mycelium.memories
  FOR EACH ROW WHEN (OLD.value IS DISTINCT FROM NEW.value OR OLD.meta IS DISTINCT FROM NEW.meta)
  EXECUTE FUNCTION mycelium.memories_derive_links();

-- The link tables say only what the memories say: rows arrive and leave through derive_links, or
-- leave with their memory (the foreign key's cascade, which runs inside the delete's own trigger).
-- Checked once per statement, so a write with many links pays for it once.
CREATE OR REPLACE FUNCTION mycelium.refuse_link_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('mycelium.deriving_links', true) = 'on'
     OR (TG_OP = 'DELETE' AND pg_trigger_depth() > 1) THEN
    RETURN NULL;
  END IF;
  PERFORM mycelium.refuse(409, 'derived_table',
    format('%s is derived from the memories'' text: write the memory instead (%s refused)',
           TG_TABLE_NAME, TG_OP));
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t05_memory_links_derived BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON mycelium.memory_links
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.refuse_link_write();
CREATE OR REPLACE TRIGGER t05_memory_anchors_derived BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON mycelium.memory_anchors
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.refuse_link_write();

-- Re-derive every memory's links (one room, or all): run it after a change to the parser.
CREATE OR REPLACE FUNCTION mycelium.rebuild_links(p_room text DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  m record;
  n integer := 0;
BEGIN
  FOR m IN SELECT room, key FROM mycelium.memories WHERE p_room IS NULL OR room = p_room LOOP
    PERFORM mycelium.derive_links(m.room, m.key);
    n := n + 1;
  END LOOP;
  RETURN n;
END
$$;
COMMENT ON FUNCTION mycelium.rebuild_links IS 'public write';

-- The auditor's check that the index says what the memories say: every memory (of one room, or
-- all) whose stored links or anchors differ from a fresh parse of its text. Always empty, unless
-- someone went around the triggers.
CREATE OR REPLACE FUNCTION mycelium.link_drift(p_room text DEFAULT NULL) RETURNS TABLE (room text, key text)
LANGUAGE sql STABLE AS $$
  SELECT m.room, m.key
  FROM mycelium.memories m
  WHERE (p_room IS NULL OR m.room = p_room)
    AND (ARRAY(SELECT row(l.ord, l.target, l.kind, l.anchor, l.label, l.relation, l.raw, l.cross_room, l.pos)::text
               FROM mycelium.memory_links l WHERE l.room = m.room AND l.source_key = m.key ORDER BY l.ord)
         IS DISTINCT FROM
         ARRAY(SELECT row(p.ord, p.target, p.kind, p.anchor, p.label, p.relation, p.raw, p.cross_room, p.pos)::text
               FROM mycelium.parse_links(m.room, m.body, m.meta) p ORDER BY p.ord)
      OR ARRAY(SELECT row(a.anchor, a.level, a.line)::text
               FROM mycelium.memory_anchors a WHERE a.room = m.room AND a.key = m.key ORDER BY a.line)
         IS DISTINCT FROM
         ARRAY(SELECT row(o.slug, o.level, o.line)::text
               FROM mycelium.memory_outline(m.body) o WHERE o.slug <> '' ORDER BY o.line))
  ORDER BY m.room, m.key
$$;
COMMENT ON FUNCTION mycelium.link_drift IS 'public read';

-- ---------------------------------------------------------------------------------------------
-- Reading: links resolved against the room as it is now.

CREATE OR REPLACE VIEW mycelium.link_edges AS
SELECT l.room, l.source_key, l.ord, l.target, l.kind, l.anchor, l.label, l.relation, l.raw,
       l.cross_room, l.pos, e.error, e.error IS NULL AS resolved
FROM mycelium.memory_links l
LEFT JOIN mycelium.memories t ON t.room = l.room AND t.key = l.target AND l.cross_room IS NULL
CROSS JOIN LATERAL (
  SELECT CASE
    WHEN l.cross_room IS NOT NULL THEN 'cross_room'
    WHEN t.key IS NULL THEN 'not_found'
    WHEN l.anchor IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM mycelium.memory_anchors a
      WHERE a.room = l.room AND a.key = l.target AND a.anchor = l.anchor) THEN 'no_anchor'
    WHEN l.kind = 'transclusion' AND NOT mycelium.is_expandable(t.meta) THEN 'not_expandable'
  END AS error
) e;
COMMENT ON VIEW mycelium.link_edges IS
  'memory_links resolved now: error is cross_room, not_found, no_anchor, not_expandable or NULL (resolved).';

CREATE OR REPLACE FUNCTION mycelium.link_json(e mycelium.link_edges, p_with_source boolean DEFAULT true) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object('target', e.target, 'kind', e.kind, 'anchor', e.anchor, 'label', e.label,
                            'relation', e.relation, 'raw', e.raw, 'cross_room', e.cross_room,
                            'resolved', e.resolved, 'error', e.error)
         || CASE WHEN p_with_source THEN jsonb_build_object('source', e.source_key) ELSE '{}' END
$$;

-- One memory's links both ways: what it points at (in text order) and what points at it from
-- other memories of the room (cross-room links never do).
CREATE OR REPLACE FUNCTION mycelium.memory_links_of(p_room text, p_key text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  RETURN jsonb_build_object(
    'key', p_key,
    'found', EXISTS (SELECT 1 FROM mycelium.memories WHERE room = p_room AND key = p_key),
    'outbound', coalesce((SELECT jsonb_agg(mycelium.link_json(e, false) ORDER BY e.ord)
                          FROM mycelium.link_edges e WHERE e.room = p_room AND e.source_key = p_key), '[]'),
    'backlinks', coalesce((SELECT jsonb_agg(mycelium.link_json(e) ORDER BY e.source_key, e.ord)
                           FROM mycelium.link_edges e
                           WHERE e.room = p_room AND e.target = p_key AND e.cross_room IS NULL
                             AND e.source_key <> p_key), '[]'));
END
$$;
COMMENT ON FUNCTION mycelium.memory_links_of IS 'public read';

-- The room's link graph: a node per memory (outbound = its links that stay in the room, inbound =
-- resolved links pointing at it), an edge per link. json, not jsonb: built once and sent as it is.
CREATE OR REPLACE FUNCTION mycelium.link_graph(p_room text) RETURNS json
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  RETURN (
    WITH edges AS MATERIALIZED (SELECT * FROM mycelium.link_edges WHERE room = p_room),
    outs AS (SELECT source_key AS key, count(*) FILTER (WHERE cross_room IS NULL) AS n
             FROM edges GROUP BY source_key),
    ins AS (SELECT target AS key, count(*) AS n FROM edges WHERE resolved GROUP BY target)
    SELECT json_build_object(
      'nodes', coalesce((
        SELECT json_agg(json_build_object('key', m.key, 'expandable', mycelium.is_expandable(m.meta),
                                          'outbound', coalesce(o.n, 0), 'inbound', coalesce(i.n, 0))
                        ORDER BY m.key)
        FROM mycelium.memories m
        LEFT JOIN outs o ON o.key = m.key LEFT JOIN ins i ON i.key = m.key
        WHERE m.room = p_room), '[]'),
      'edges', coalesce((
        SELECT json_agg(json_build_object('source', e.source_key, 'target', e.target, 'kind', e.kind,
                                          'anchor', e.anchor, 'relation', e.relation,
                                          'cross_room', e.cross_room, 'resolved', e.resolved,
                                          'error', e.error)
                        ORDER BY e.source_key, e.ord)
        FROM edges e), '[]'))
  );
END
$$;
COMMENT ON FUNCTION mycelium.link_graph IS 'public read';

-- Broken links, and the memories no resolved link reaches: orphans (nothing in, nothing out),
-- roots (nothing in, links out) and leaves (links in, nothing out).
CREATE OR REPLACE FUNCTION mycelium.link_integrity(p_room text) RETURNS json
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  RETURN (
    WITH edges AS MATERIALIZED (SELECT * FROM mycelium.link_edges WHERE room = p_room),
    degree AS (
      SELECT m.key,
             EXISTS (SELECT 1 FROM edges e WHERE e.target = m.key AND e.resolved) AS has_in,
             EXISTS (SELECT 1 FROM edges e WHERE e.source_key = m.key) AS has_out
      FROM mycelium.memories m WHERE m.room = p_room
    )
    SELECT json_build_object(
      'broken', coalesce((
        SELECT json_agg(json_build_object('source', e.source_key, 'target', e.target, 'kind', e.kind,
                                          'anchor', e.anchor, 'label', e.label, 'relation', e.relation,
                                          'raw', e.raw, 'cross_room', e.cross_room, 'resolved', e.resolved,
                                          'error', e.error)
                        ORDER BY e.source_key, e.ord)
        FROM edges e WHERE NOT e.resolved), '[]'),
      'orphans', coalesce((SELECT json_agg(key ORDER BY key) FROM degree WHERE NOT has_in AND NOT has_out), '[]'),
      'roots', coalesce((SELECT json_agg(key ORDER BY key) FROM degree WHERE NOT has_in AND has_out), '[]'),
      'leaves', coalesce((SELECT json_agg(key ORDER BY key) FROM degree WHERE has_in AND NOT has_out), '[]'),
      'total_memories', (SELECT count(*) FROM degree),
      'total_links', (SELECT count(*) FROM edges))
  );
END
$$;
COMMENT ON FUNCTION mycelium.link_integrity IS 'public read';

-- A memory's body with each ![[...]] replaced by the target's text (or the #anchor section of it).
-- Depth 1: pulled text goes in as it is, markers inside it stay literal, so cycles cannot happen.
-- A marker that cannot be expanded stays exactly as written and is reported with its error. The
-- text is cut once at every ![[...]]; the ones the index holds (by position) are the transclusions,
-- the others (in code, degenerate, directives) stay as they are.
CREATE OR REPLACE FUNCTION mycelium.expand_memory(p_room text, p_key text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
  marker constant text := '!\[\[[^][\n\u0001]*\]\]';
  src text;
  result jsonb;
BEGIN
  PERFORM mycelium.require_room(p_room);
  SELECT m.body INTO src FROM mycelium.memories m WHERE m.room = p_room AND m.key = p_key;
  IF NOT FOUND THEN
    RETURN jsonb_build_object('key', p_key, 'rendered', '', 'expansions', '[]'::jsonb, 'found', false);
  END IF;
  WITH cut AS (
    SELECT g.n, g.before, x.m[1] AS marker,
           (sum(length(g.before) + coalesce(length(x.m[1]), 0)) OVER (ORDER BY g.n)
            - coalesce(length(x.m[1]), 0) + 1)::integer AS pos
    FROM regexp_split_to_table(src, marker) WITH ORDINALITY AS g(before, n)
    LEFT JOIN regexp_matches(src, marker, 'g') WITH ORDINALITY AS x(m, n) ON x.n = g.n
  ), pieces AS (
    SELECT c.n, c.before, c.marker, l.target, l.anchor, l.error,
           CASE WHEN l.resolved THEN mycelium.memory_section(t.body, l.anchor) END AS pulled
    FROM cut c
    LEFT JOIN mycelium.link_edges l
      ON l.room = p_room AND l.source_key = p_key AND l.kind = 'transclusion' AND l.pos = c.pos
    LEFT JOIN mycelium.memories t ON t.room = p_room AND t.key = l.target AND l.resolved
  )
  SELECT jsonb_build_object(
    'key', p_key,
    'rendered', string_agg(p.before || coalesce(p.pulled, p.marker, ''), '' ORDER BY p.n),
    'expansions', coalesce(jsonb_agg(jsonb_build_object(
        'target', p.target, 'anchor', p.anchor, 'raw', p.marker, 'expanded', p.pulled IS NOT NULL,
        'error', CASE WHEN p.pulled IS NULL THEN coalesce(p.error, 'no_anchor') END) ORDER BY p.n)
      FILTER (WHERE p.target IS NOT NULL), '[]'),
    'found', true)
  INTO result
  FROM pieces p;
  RETURN result;
END
$$;
COMMENT ON FUNCTION mycelium.expand_memory IS 'public read';
