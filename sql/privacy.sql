-- Private rooms, enforced by the database. With the token gate on (the hub-wide setting auth.gate,
-- which a gated hub writes at start), a private room and every row of it are visible only to its
-- owner, its members and operators, whoever asks:
--
--   * the principal is what the verb gateway sets for each transaction of a gated request
--     (mycelium.principal, mycelium.principal_role, transaction-local); the app role's credentials
--     are trusted as the gateway's, so a replica asserts who asks, and the database decides what
--     that principal may see;
--   * reads the app role makes of the tables are filtered by row-level security on every table
--     with a room (the list is taken from the catalogue when this file is applied, so a new table
--     is covered without being named here); mycelium_auditor reads everything;
--   * verbs run with their owner's rights: require_room (rooms.sql) answers 404 room_not_found
--     for a room the principal may not see, and a trigger on every such table refuses a write into
--     one the same way (a non-member cannot even tell the room exists);
--   * with no principal (psql as the app role, a replica with a bug) a closed gate shows public
--     rooms only; the hub's own loops act as the operator they are.
-- With the gate off (the default) row-level security is off on those tables, so their reads plan
-- as they always have (a policy keeps an index from serving a qual PostgreSQL does not know to be
-- leakproof, such as a trigram LIKE); writing auth.gate turns it on or off (apply_privacy).

CREATE OR REPLACE FUNCTION mycelium.principal() RETURNS text LANGUAGE sql STABLE AS $$
  SELECT nullif(current_setting('mycelium.principal', true), '')
$$;
COMMENT ON FUNCTION mycelium.principal IS 'public read';

-- Is this an administrator's own session (the owner or a superuser in psql, a migration), rather
-- than the app role's (every hub replica sets role mycelium_app; an app login is a member of it
-- alone)? The role setting is the session's even inside a function that runs as its owner.
CREATE OR REPLACE FUNCTION mycelium.administrator_session() RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN current_setting('role') <> 'mycelium_app'
     AND (NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mycelium_admin')
          OR pg_has_role(session_user, 'mycelium_admin', 'MEMBER'));
END
$$;
COMMENT ON FUNCTION mycelium.administrator_session IS 'public read';

-- Is the token gate closed: the hub-wide auth.gate on?
CREATE OR REPLACE FUNCTION mycelium.private_rooms_closed() RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = mycelium, public, pg_temp AS $$
BEGIN
  RETURN coalesce((SELECT value = 'true'::jsonb FROM mycelium.config WHERE name = 'auth.gate' AND room = ''),
                  false);
END
$$;
COMMENT ON FUNCTION mycelium.private_rooms_closed IS 'public read';

-- Does a room admit a handle (NULL: nobody declared)? Public rooms admit anyone; a private one its
-- owner and its members.
CREATE OR REPLACE FUNCTION mycelium.room_admits(r mycelium.rooms, who text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT r.is_public OR coalesce(r.owner = who OR who = ANY (r.members), false)
$$;
COMMENT ON FUNCTION mycelium.room_admits IS 'public inlined';

-- Does the gate leave every room open to the one asking? (No gate, an operator, or an
-- administrator's own session with no principal declared.)
CREATE OR REPLACE FUNCTION mycelium.rooms_open() RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = mycelium, public, pg_temp AS $$
BEGIN
  RETURN coalesce(current_setting('mycelium.principal_role', true), '') = 'operator'
      OR NOT mycelium.private_rooms_closed()
      OR (mycelium.principal() IS NULL AND mycelium.administrator_session());
END
$$;
COMMENT ON FUNCTION mycelium.rooms_open IS 'public read';

-- The private rooms the one asking may not see ('{}' when rooms_open()). Policies call it once per
-- statement, as (SELECT mycelium.hidden_rooms()).
CREATE OR REPLACE FUNCTION mycelium.hidden_rooms() RETURNS text[]
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = mycelium, public, pg_temp AS $$
DECLARE
  who text := mycelium.principal();
BEGIN
  IF mycelium.rooms_open() THEN
    RETURN '{}';
  END IF;
  RETURN coalesce((SELECT array_agg(r.name) FROM mycelium.rooms r WHERE NOT mycelium.room_admits(r, who)), '{}');
END
$$;
COMMENT ON FUNCTION mycelium.hidden_rooms IS 'public read';

-- May the one asking see p_room? (A room that does not exist is not hidden: its absence is
-- answered as it always is.) One look at the room's own row.
CREATE OR REPLACE FUNCTION mycelium.room_visible(p_room text) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = mycelium, public, pg_temp AS $$
DECLARE
  who text := mycelium.principal();
BEGIN
  RETURN p_room IS NULL
      OR coalesce((SELECT mycelium.room_admits(r, who) FROM mycelium.rooms r WHERE r.name = p_room), true)
      OR mycelium.rooms_open();
END
$$;
COMMENT ON FUNCTION mycelium.room_visible IS 'public read';

-- The write guard: a write into a room the principal may not see is refused as if the room did not
-- exist. (Writes without a principal are the hub's own or an open hub's.) A room found visible is
-- remembered for the rest of the transaction (with the principal it was found visible to), so the
-- several rows one verb writes in a room cost one look at it; the room is read from the row's own
-- column (a trigger function is compiled per table, so NEW.room names each table's column).
CREATE OR REPLACE FUNCTION mycelium.guard_room_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  who text := mycelium.principal();
  target text;
BEGIN
  IF who IS NULL OR current_setting('mycelium.principal_role', true) = 'operator' THEN
    RETURN coalesce(NEW, OLD);
  END IF;
  IF TG_TABLE_NAME = 'rooms' THEN
    IF TG_OP = 'INSERT' THEN
      RETURN NEW;
    ELSIF TG_OP = 'DELETE' THEN
      target := OLD.name;
    ELSE
      target := NEW.name;
    END IF;
  ELSIF TG_OP = 'DELETE' THEN
    target := OLD.room;
  ELSE
    target := NEW.room;
  END IF;
  IF target IS NULL OR current_setting('mycelium.room_seen', true) = who || E'\n' || target THEN
    RETURN coalesce(NEW, OLD);
  END IF;
  IF NOT mycelium.room_visible(target) THEN
    PERFORM mycelium.refuse(404, 'room_not_found', format('Room %L not found', target),
                            jsonb_build_object('room', target));
  END IF;
  PERFORM set_config('mycelium.room_seen', who || E'\n' || target, true);
  RETURN coalesce(NEW, OLD);
END
$$;

-- The tables this file protects: every base table of the schema with a room (rooms by its name),
-- but config: the settings are no secret of a room, and writing auth.gate there is what turns the
-- protection on (a table cannot be altered by a trigger of a statement that uses it).
CREATE OR REPLACE FUNCTION mycelium.room_scoped_tables() RETURNS TABLE (table_name text, room_column text)
LANGUAGE sql STABLE AS $$
  SELECT c.relname::text, a.attname::text
  FROM pg_class c
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  WHERE c.relnamespace = 'mycelium'::regnamespace AND c.relkind IN ('r', 'p')
    AND ((c.relname = 'rooms' AND a.attname = 'name') OR (c.relname <> 'rooms' AND a.attname = 'room'))
    AND c.relname <> 'config'
  ORDER BY 1
$$;

-- Row-level security on the protected tables as auth.gate says: on while the gate is closed, off
-- otherwise. Called when the setting is written, and after every upgrade.
CREATE OR REPLACE FUNCTION mycelium.apply_privacy() RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  t record;
  closed boolean := mycelium.private_rooms_closed();
BEGIN
  FOR t IN SELECT * FROM mycelium.room_scoped_tables() LOOP
    IF closed IS DISTINCT FROM (SELECT relrowsecurity FROM pg_class
                                WHERE oid = format('mycelium.%I', t.table_name)::regclass) THEN
      EXECUTE format('ALTER TABLE mycelium.%I %s ROW LEVEL SECURITY', t.table_name,
                     CASE WHEN closed THEN 'ENABLE' ELSE 'DISABLE' END);
    END IF;
  END LOOP;
  RETURN closed;
END
$$;

CREATE OR REPLACE FUNCTION mycelium.config_gate_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (CASE WHEN TG_OP = 'DELETE' THEN OLD.name ELSE NEW.name END) = 'auth.gate' THEN
    PERFORM mycelium.apply_privacy();
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER t75_config_gate_changed AFTER INSERT OR UPDATE OR DELETE ON mycelium.config
FOR EACH ROW EXECUTE FUNCTION mycelium.config_gate_changed();

-- The policies and guards on every protected table (a table added later gets them at the end of
-- the upgrade that adds it).
DO $privacy$
DECLARE
  t record;
BEGIN
  FOR t IN SELECT * FROM mycelium.room_scoped_tables() LOOP
    EXECUTE format('DROP POLICY IF EXISTS room_visible ON mycelium.%I', t.table_name);
    EXECUTE format('DROP POLICY IF EXISTS auditor_reads ON mycelium.%I', t.table_name);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mycelium_app') THEN
      EXECUTE format($p$CREATE POLICY room_visible ON mycelium.%I FOR SELECT TO mycelium_app
                        USING ((SELECT mycelium.rooms_open()) OR NOT %I = ANY ((SELECT mycelium.hidden_rooms())::text[]))$p$,
                     t.table_name, t.room_column);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mycelium_auditor') THEN
      EXECUTE format('CREATE POLICY auditor_reads ON mycelium.%I FOR SELECT TO mycelium_auditor USING (true)',
                     t.table_name);
    END IF;
    EXECUTE format('CREATE OR REPLACE TRIGGER t50_guard_room_write BEFORE INSERT OR UPDATE OR DELETE ON mycelium.%I '
                   'FOR EACH ROW EXECUTE FUNCTION mycelium.guard_room_write()', t.table_name);
  END LOOP;
  PERFORM mycelium.apply_privacy();
END
$privacy$;
