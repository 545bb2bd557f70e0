-- Privileges, re-applied at the end of every migration (idempotent).
--
--   * mycelium_app may execute the public functions (mycelium.public_verbs(), base.sql) and no
--     other function of the schema; it may read every table and view, and write nothing directly;
--   * every public verb, every other VOLATILE function (the internal writers and the triggers) and
--     every public PL/pgSQL read runs with its owner's rights and a fixed search_path, so a caller
--     needs no table privileges to use it and no right to the internal helpers it calls;
--   * mycelium_auditor may read everything and execute only the functions that cannot write
--     (STABLE or IMMUTABLE ones).
--
-- A database whose code predates the catalogue of public verbs (one downgraded to 0.1.0) keeps that
-- release's rule: mycelium_app may execute every function, and only the VOLATILE ones run as owner.

DO $grants$
DECLARE
  f record;
  have_roles boolean := EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mycelium_app')
                    AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mycelium_auditor');
  public jsonb;
BEGIN
  IF to_regprocedure('mycelium.public_verbs()') IS NOT NULL THEN
    EXECUTE 'SELECT jsonb_object_agg(name, kind) FROM mycelium.public_verbs()' INTO public;
  END IF;
  FOR f IN
    SELECT p.oid::regprocedure AS sig, p.provolatile, l.lanname,
           CASE WHEN public IS NULL THEN 'every' ELSE public ->> p.proname::text END AS kind
    FROM pg_proc p
    JOIN pg_language l ON l.oid = p.prolang
    WHERE p.pronamespace = 'mycelium'::regnamespace AND p.prokind = 'f'
  LOOP
    IF f.provolatile = 'v' OR (f.kind = 'read' AND f.lanname = 'plpgsql') THEN
      EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = mycelium, public, pg_temp', f.sig);
    END IF;
    EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f.sig);
    IF have_roles THEN
      IF f.kind IS NOT NULL THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO mycelium_app', f.sig);
      ELSE
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM mycelium_app', f.sig);
      END IF;
      IF f.provolatile <> 'v' THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO mycelium_auditor', f.sig);
      END IF;
    END IF;
  END LOOP;

  REVOKE ALL ON ALL TABLES IN SCHEMA mycelium FROM PUBLIC;
  IF have_roles THEN
    GRANT USAGE ON SCHEMA mycelium TO mycelium_app, mycelium_auditor;
    GRANT SELECT ON ALL TABLES IN SCHEMA mycelium TO mycelium_app, mycelium_auditor;
    REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON ALL TABLES IN SCHEMA mycelium
      FROM mycelium_app, mycelium_auditor;
    IF to_regclass('public.alembic_version') IS NOT NULL THEN
      GRANT SELECT ON public.alembic_version TO mycelium_app, mycelium_auditor;
    END IF;
  END IF;
END
$grants$;
