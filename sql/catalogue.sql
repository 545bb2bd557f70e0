-- The schema as a catalogue of named definitions, and its fingerprint.
--
-- One row per object of schema mycelium that decides behaviour: relations with their privileges
-- (each access list in a stable order: the order grants were made in changes nothing),
-- columns (position, type, nullability, default, generation), constraints, indexes, functions (the
-- full definition with its attributes, digested, and privileges), triggers, views, policies,
-- domains, types and sequences, and comments. Two databases with the same catalogue behave the
-- same; the tests compare a database migrated from an earlier release with a fresh one this way, and
-- /health reports the fingerprint, so replicas can tell they are on the same schema.

CREATE OR REPLACE FUNCTION mycelium.schema_catalogue()
RETURNS TABLE (kind text, name text, definition text) LANGUAGE sql STABLE AS $$
  SELECT 'relation', c.relname, c.relkind::text || ' ' || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(c.relacl) a), '')
                                || CASE WHEN c.relrowsecurity THEN ' rls' ELSE '' END
  FROM pg_class c
  WHERE c.relnamespace = 'mycelium'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
  UNION ALL
  SELECT 'column', c.relname || '.' || a.attname,
         row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum) || ' '
         || format_type(a.atttypid, a.atttypmod)
         || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
         || CASE a.attgenerated WHEN 's' THEN ' generated ' ELSE ' default ' END
         || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
         || CASE WHEN a.attidentity <> '' THEN ' identity ' || a.attidentity::text ELSE '' END
         || coalesce(' ' || (SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(a.attacl) a), '')
  FROM pg_class c
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
  WHERE c.relnamespace = 'mycelium'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'c', 'f')
  UNION ALL
  SELECT 'constraint', coalesce(c.relname, t.typname) || '.' || k.conname, pg_get_constraintdef(k.oid)
  FROM pg_constraint k
  LEFT JOIN pg_class c ON c.oid = k.conrelid
  LEFT JOIN pg_type t ON t.oid = k.contypid
  WHERE k.connamespace = 'mycelium'::regnamespace
  UNION ALL
  SELECT 'index', c.relname, pg_get_indexdef(c.oid)
  FROM pg_class c WHERE c.relnamespace = 'mycelium'::regnamespace AND c.relkind IN ('i', 'I')
  UNION ALL
  SELECT 'function', p.oid::regprocedure::text,
         md5(pg_get_functiondef(p.oid)) || ' ' || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(p.proacl) a), '')
  FROM pg_proc p WHERE p.pronamespace = 'mycelium'::regnamespace AND p.prokind IN ('f', 'p', 'w')
  UNION ALL
  SELECT 'function', p.oid::regprocedure::text, 'aggregate ' || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(p.proacl) a), '')
  FROM pg_proc p WHERE p.pronamespace = 'mycelium'::regnamespace AND p.prokind = 'a'
  UNION ALL
  SELECT 'trigger', c.relname || '.' || g.tgname, pg_get_triggerdef(g.oid)
         || CASE g.tgenabled WHEN 'D' THEN ' disabled' ELSE '' END
  FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
  WHERE c.relnamespace = 'mycelium'::regnamespace AND NOT g.tgisinternal
  UNION ALL
  SELECT 'view', c.relname, md5(pg_get_viewdef(c.oid))
  FROM pg_class c WHERE c.relnamespace = 'mycelium'::regnamespace AND c.relkind IN ('v', 'm')
  UNION ALL
  SELECT 'policy', p.tablename || '.' || p.policyname,
         concat_ws(' ', p.permissive, p.roles::text, p.cmd, p.qual, p.with_check)
  FROM pg_policies p WHERE p.schemaname = 'mycelium'
  UNION ALL
  SELECT 'type', t.typname,
         t.typtype::text || ' ' || CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod)
                                         || CASE WHEN t.typnotnull THEN ' not null' ELSE '' END
                                         || coalesce(' default ' || t.typdefault, '')
                                    ELSE '' END
  FROM pg_type t
  WHERE t.typnamespace = 'mycelium'::regnamespace AND t.typtype IN ('d', 'e', 'c')
    AND (t.typtype <> 'c' OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')
  UNION ALL
  SELECT 'sequence', c.relname,
         concat_ws(' ', format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcycle)
  FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
  WHERE c.relnamespace = 'mycelium'::regnamespace
  UNION ALL
  SELECT 'comment', d.classoid::regclass::text || ' ' || coalesce(
           (SELECT relname FROM pg_class WHERE oid = d.objoid AND d.classoid = 'pg_class'::regclass)
             || coalesce('.' || (SELECT attname FROM pg_attribute WHERE attrelid = d.objoid AND attnum = d.objsubid
                                 AND d.objsubid > 0), ''),
           (SELECT oid::regprocedure::text FROM pg_proc WHERE oid = d.objoid AND d.classoid = 'pg_proc'::regclass),
           d.objoid::text),
         md5(d.description)
  FROM pg_description d
  WHERE (d.classoid = 'pg_class'::regclass
         AND d.objoid IN (SELECT oid FROM pg_class WHERE relnamespace = 'mycelium'::regnamespace))
     OR (d.classoid = 'pg_proc'::regclass
         AND d.objoid IN (SELECT oid FROM pg_proc WHERE pronamespace = 'mycelium'::regnamespace))
  UNION ALL
  SELECT 'schema', n.nspname, coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(n.nspacl) a), '')
  FROM pg_namespace n WHERE n.nspname = 'mycelium'
$$;
COMMENT ON FUNCTION mycelium.schema_catalogue IS
  'public read: Every behaviour-deciding object of schema mycelium as (kind, name, definition) rows.';

CREATE OR REPLACE FUNCTION mycelium.schema_fingerprint() RETURNS text LANGUAGE sql STABLE AS $$
  SELECT encode(sha256(convert_to(
           string_agg(kind || ' ' || name || ' ' || definition, E'\n' ORDER BY kind, name, definition),
           'UTF8')), 'hex')
  FROM mycelium.schema_catalogue()
$$;
COMMENT ON FUNCTION mycelium.schema_fingerprint IS
  'public read: A digest of mycelium.schema_catalogue(): equal on two databases with the same schema.';

-- The code a hub's migration applied last, so a hub that starts on a database whose code is already
-- this release's applies nothing (re-creating views, triggers and policies takes locks that queue
-- behind, and deadlock with, the replicas serving meanwhile). One row: the digest of the code and
-- privileges applied (sql/ and grants.sql as shipped), and the code's fingerprint right after. A
-- start skips only when both still match: the package ships that code, and nobody changed it since
-- (a function replaced in psql, a grant revoked: the live fingerprint moves and the code is applied).
CREATE TABLE mycelium.code_applied (
  only_row boolean PRIMARY KEY DEFAULT true CONSTRAINT code_applied_one_row CHECK (only_row),
  code_digest text NOT NULL CONSTRAINT code_applied_digest_shape CHECK (code_digest ~ '^[0-9a-f]{64}$'),
  fingerprint text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE mycelium.code_applied IS
  'The code the last migration applied: its digest and mycelium.code_fingerprint() right after.';

-- The schema's fingerprint without what a running hub changes by design: whether a table has
-- row-level security on (the auth.gate setting turns it on and off, sql/privacy.sql).
CREATE OR REPLACE FUNCTION mycelium.code_fingerprint() RETURNS text LANGUAGE sql STABLE AS $$
  SELECT encode(sha256(convert_to(
           string_agg(kind || ' ' || name || ' ' || definition, E'\n' ORDER BY kind, name, definition),
           'UTF8')), 'hex')
  FROM (SELECT kind, name,
               CASE WHEN kind = 'relation' THEN regexp_replace(definition, ' rls$', '') ELSE definition END
                 AS definition
        FROM mycelium.schema_catalogue()) c
$$;
COMMENT ON FUNCTION mycelium.code_fingerprint() IS
  'mycelium.schema_fingerprint() less the row-level security switch: what code_applied compares.';
