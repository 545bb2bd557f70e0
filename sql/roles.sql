-- Database roles (cluster-wide, so created only when missing and never dropped by a downgrade).
--
--   mycelium_admin    owns every object in schema mycelium; the verbs run with its rights
--                     (SECURITY DEFINER). Operators are members of it.
--   mycelium_app      what a hub replica or engine worker connects as: it may call the verbs and
--                     read, nothing else (no INSERT/UPDATE/DELETE on any table).
--   mycelium_auditor  read-only: every table and view, and the read-only functions.
--
-- Creating roles needs CREATEROLE; on a server where the migrating user lacks it, this file does
-- nothing and the objects are owned by the migrating user instead (see migrations/env.py).

DO $roles$
DECLARE
  can_create boolean := (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user);
BEGIN
  IF NOT can_create THEN
    RAISE NOTICE 'mycelium: % may not create roles; objects stay owned by it', current_user;
    RETURN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mycelium_admin') THEN
    CREATE ROLE mycelium_admin NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mycelium_app') THEN
    CREATE ROLE mycelium_app LOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mycelium_auditor') THEN
    CREATE ROLE mycelium_auditor LOGIN;
  END IF;
  -- the migrating user may act as the owner (SET ROLE mycelium_admin)
  IF NOT pg_has_role(current_user, 'mycelium_admin', 'MEMBER') THEN
    EXECUTE format('GRANT mycelium_admin TO %I', current_user);
  END IF;
  EXECUTE format('GRANT CONNECT, CREATE ON DATABASE %I TO mycelium_admin', current_database());
  EXECUTE format('GRANT CONNECT ON DATABASE %I TO mycelium_app, mycelium_auditor', current_database());
END
$roles$;
