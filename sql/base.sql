-- Schema, refusals and hub-wide facts.
--
-- Every verb refuses with SQLSTATE 'MYnnn' where nnn is the HTTP status the refusal means
-- (MY404 not found, MY409 conflict, MY422 unprocessable, ...). MESSAGE is the sentence a person
-- reads; DETAIL is a JSON object {"error": <stable code>, ...extra fields}. psql shows both; the hub
-- turns them into {"error", "message", ...} bodies with that status.

CREATE SCHEMA IF NOT EXISTS mycelium;

CREATE OR REPLACE FUNCTION mycelium.refuse(status integer, error text, message text, extra jsonb DEFAULT '{}')
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING
    ERRCODE = 'MY' || lpad(status::text, 3, '0'),
    MESSAGE = message,
    DETAIL = (coalesce(extra, '{}'::jsonb) || jsonb_build_object('error', error))::text;
END
$$;
COMMENT ON FUNCTION mycelium.refuse(integer,text,text,jsonb) IS 'Raise a refusal: SQLSTATE MY<status>, a sentence, and a JSON detail.';

-- One row: this store's identity (reported by /health, stamped into exports).
CREATE TABLE mycelium.store (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  id uuid NOT NULL DEFAULT gen_random_uuid(),
  created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO mycelium.store DEFAULT VALUES;

-- Hub settings that every replica must agree on live here, not in a replica's environment.
-- room = '' is the hub-wide value; a room's own row overrides it.
CREATE TABLE mycelium.config (
  room text NOT NULL DEFAULT '',
  name text NOT NULL CHECK (name ~ '^[a-z][a-z0-9_.]{0,63}$'),
  value jsonb NOT NULL,
  updated_by text,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, name)
);

CREATE OR REPLACE FUNCTION mycelium.config_value(p_name text, p_room text DEFAULT '') RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT value FROM mycelium.config
  WHERE name = p_name AND room IN (coalesce(p_room, ''), '')
  ORDER BY room DESC LIMIT 1
$$;

CREATE OR REPLACE FUNCTION mycelium.set_config(p_name text, p_value jsonb, p_room text DEFAULT '', p_by text DEFAULT NULL)
RETURNS mycelium.config LANGUAGE plpgsql AS $$
DECLARE r mycelium.config;
BEGIN
  IF p_value IS NULL THEN
    DELETE FROM mycelium.config WHERE room = coalesce(p_room, '') AND name = p_name RETURNING * INTO r;
    RETURN r;
  END IF;
  INSERT INTO mycelium.config (room, name, value, updated_by)
  VALUES (coalesce(p_room, ''), p_name, p_value, p_by)
  ON CONFLICT (room, name) DO UPDATE SET value = excluded.value, updated_by = excluded.updated_by,
                                         updated_at = now()
  RETURNING * INTO r;
  RETURN r;
END
$$;
