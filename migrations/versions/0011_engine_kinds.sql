-- Revision 0011_engine_kinds (frozen): Two more engine kinds, the aligner (negotiations on NEGMAS) and the synthesizer (a room's transcript distilled into memory), and the agreement a converged run carries (engine_runs.assignments)
ALTER TABLE mycelium.engines DROP CONSTRAINT engine_kind_known;
ALTER TABLE mycelium.engines ADD CONSTRAINT engine_kind_known
  CHECK (kind IN ('conductor', 'persona', 'aligner', 'synthesizer'));
ALTER TABLE mycelium.engine_runs ADD COLUMN assignments jsonb
  CONSTRAINT run_assignments_object CHECK (jsonb_typeof(assignments) = 'object');
COMMENT ON COLUMN mycelium.engine_runs.assignments IS
  'The agreement a converged run carries ({issue: value}); NULL when there is none.';
