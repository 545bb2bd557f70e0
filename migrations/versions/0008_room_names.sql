-- Revision 0008_room_names (frozen): Room names are one name whatever their case or Unicode form; create_task and release_task take more
-- create_task takes depends-on too (sql/board.sql): its six-argument form goes
DROP FUNCTION IF EXISTS mycelium.create_task(text, text, text, text, text, text);
-- release_task takes force (sql/assignments.sql): its four-argument form goes
DROP FUNCTION IF EXISTS mycelium.release_task(text, text, text, text);

-- the fold, as sql/rooms.sql defines it (the code re-applied after the revisions replaces it)
DO $fold$
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
    CREATE OR REPLACE FUNCTION mycelium.room_fold(p_name text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT lower(normalize(p_name, NFC) %s) $$ $fn$,
    coalesce(coll, ''));
END
$fold$;

DO $same$
DECLARE
  groups text;
BEGIN
  SELECT string_agg(names, '; ' ORDER BY names) INTO groups
  FROM (SELECT string_agg(format('%L', name), ' and ' ORDER BY name) AS names
        FROM mycelium.rooms GROUP BY mycelium.room_fold(name) HAVING count(*) > 1) g;
  IF groups IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'MY409',
      MESSAGE = format('0008_room_names: room names are now one name whatever their case or Unicode '
                       'form, and these rooms share one: %s. Keep one of each (delete the others, '
                       'after `mycelium mirror export` if their memories matter), then upgrade again.',
                       groups),
      DETAIL = jsonb_build_object('error', 'room_names_collide', 'rooms', groups)::text;
  END IF;
END
$same$;

CREATE UNIQUE INDEX rooms_name_folded ON mycelium.rooms (mycelium.room_fold(name));
