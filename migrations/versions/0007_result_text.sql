-- Revision 0007_result_text (frozen): Transitions keep the result as the caller's JSON text beside the jsonb (a redispatch returns its keys in their order)
ALTER TABLE mycelium.transitions ADD COLUMN result_text text;
-- complete() takes the text too (sql/transitions.sql): its four-argument form goes
DROP FUNCTION IF EXISTS mycelium.complete(text, text, bigint, jsonb);
COMMENT ON COLUMN mycelium.transitions.result_text IS
  'The result as the caller''s JSON text (keys in their order), beside result; NULL when not sent.';
