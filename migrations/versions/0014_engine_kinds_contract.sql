-- Revision 0014_engine_kinds_contract (frozen): the kind CHECK names mycelium.engine_kinds()
-- (sql/engines.sql). The function is defined here as it stood, for a database migrated from
-- scratch that has no code yet; the code applied after the revisions replaces it.
CREATE OR REPLACE FUNCTION mycelium.engine_kinds() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['conductor', 'persona', 'aligner', 'synthesizer']
$$;
ALTER TABLE mycelium.engines DROP CONSTRAINT engine_kind_known;
ALTER TABLE mycelium.engines ADD CONSTRAINT engine_kind_known CHECK (kind = ANY (mycelium.engine_kinds()));
