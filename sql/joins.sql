-- Join codes and the hub's own signing keys, shared by every replica through the database.
--
-- A join code admits one handle into one room, once, within ten minutes: only its SHA-256 is kept
-- (the code itself is shown once, to whoever minted it), so any replica redeems what any replica
-- minted and a restart loses none. Redeeming makes the handle a member of the room (a private room
-- is then visible to it) and, on a gated hub, earns a member token signed with the hub's key.
--
-- The hub's member-token keys (ES256): the public half as a JWK, the private half sealed with
-- AES-GCM under a secret only the hub's processes hold (MYCELIUM_AUTH_SECRET), so every replica
-- signs with the same key and the database never holds it in the clear. Retired keys stay
-- listed: the tokens they signed verify until they expire.

CREATE TABLE mycelium.join_codes (
  code_hash bytea PRIMARY KEY CONSTRAINT join_code_hash_length CHECK (length(code_hash) = 32),
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  handle text NOT NULL,
  created_by text,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  redeemed_at timestamptz,
  redeemed_by text
);
COMMENT ON TABLE mycelium.join_codes IS
  'Single-use join codes by SHA-256 (the code is never stored): room, handle, expiry, redemption.';

CREATE TABLE mycelium.hub_keys (
  kid text PRIMARY KEY CONSTRAINT hub_key_id_shape CHECK (kid ~ '^[0-9a-f]{16}$'),
  public_jwk jsonb NOT NULL,
  sealed_private bytea NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  retired_at timestamptz
);
COMMENT ON TABLE mycelium.hub_keys IS
  'The hub''s member-token signing keys: public JWK, private key sealed under the hub''s secret.';

CREATE OR REPLACE FUNCTION mycelium.mint_join_code(
  p_room text, p_handle text, p_code_hash bytea, p_ttl_seconds integer DEFAULT 600
) RETURNS TABLE (room text, handle text, expires_at timestamptz) LANGUAGE plpgsql AS $$
DECLARE
  who text := mycelium.author(p_handle, 'handle');
  found mycelium.join_codes;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF who IS NULL OR btrim(who) = '' THEN
    PERFORM mycelium.refuse(422, 'invalid_handle', 'a join code is minted for a handle');
  END IF;
  IF p_ttl_seconds IS NULL OR p_ttl_seconds NOT BETWEEN 1 AND 86400 THEN
    PERFORM mycelium.refuse(422, 'invalid_ttl', 'a join code lives between 1 second and a day');
  END IF;
  DELETE FROM mycelium.join_codes j WHERE j.expires_at < now() - interval '1 day';
  INSERT INTO mycelium.join_codes (code_hash, room, handle, created_by, expires_at)
  VALUES (p_code_hash, p_room, mycelium.normalize_handle(who), mycelium.actor(),
          now() + make_interval(secs => p_ttl_seconds))
  RETURNING * INTO found;
  PERFORM mycelium.audit('join.mint', p_room, found.handle,
                         jsonb_build_object('expires_at', found.expires_at));
  RETURN QUERY SELECT found.room, found.handle, found.expires_at;
END
$$;
COMMENT ON FUNCTION mycelium.mint_join_code IS 'public write';

-- Redeem a code once: the handle becomes a member of the room. Unknown, used and expired codes get
-- the same answer, so nothing is learnt by guessing.
CREATE OR REPLACE FUNCTION mycelium.redeem_join_code(p_code_hash bytea)
RETURNS TABLE (room text, handle text) LANGUAGE plpgsql AS $$
DECLARE
  found mycelium.join_codes;
BEGIN
  UPDATE mycelium.join_codes j SET redeemed_at = now(), redeemed_by = mycelium.actor()
  WHERE j.code_hash = p_code_hash AND j.redeemed_at IS NULL AND j.expires_at > now()
  RETURNING * INTO found;
  IF found.code_hash IS NULL THEN
    PERFORM mycelium.refuse(400, 'join_code_invalid',
                            'that join code isn''t valid: it may have been used or expired');
  END IF;
  UPDATE mycelium.rooms r SET members = array_append(r.members, found.handle), updated_at = now()
  WHERE r.name = found.room AND NOT found.handle = ANY (r.members) AND r.owner IS DISTINCT FROM found.handle;
  PERFORM mycelium.audit('join.redeem', found.room, found.handle, '{}');
  RETURN QUERY SELECT found.room, found.handle;
END
$$;
COMMENT ON FUNCTION mycelium.redeem_join_code IS 'public write';

-- The hub's first key, unless another process registered one first (then that one is answered).
CREATE OR REPLACE FUNCTION mycelium.ensure_hub_key(p_kid text, p_public_jwk jsonb, p_sealed bytea)
RETURNS SETOF mycelium.hub_keys LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('mycelium.hub_keys'));
  IF NOT EXISTS (SELECT 1 FROM mycelium.hub_keys WHERE retired_at IS NULL) THEN
    INSERT INTO mycelium.hub_keys (kid, public_jwk, sealed_private) VALUES (p_kid, p_public_jwk, p_sealed);
    PERFORM mycelium.audit('auth.key_registered', NULL, p_kid, '{}');
  END IF;
  RETURN QUERY SELECT * FROM mycelium.hub_keys WHERE retired_at IS NULL ORDER BY created_at DESC LIMIT 1;
END
$$;
COMMENT ON FUNCTION mycelium.ensure_hub_key IS 'public write';

-- A new signing key; every other one retired (tokens they signed verify until they expire).
CREATE OR REPLACE FUNCTION mycelium.rotate_hub_key(p_kid text, p_public_jwk jsonb, p_sealed bytea)
RETURNS SETOF mycelium.hub_keys LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.operator_only('rotate_hub_key');
  PERFORM pg_advisory_xact_lock(hashtext('mycelium.hub_keys'));
  UPDATE mycelium.hub_keys SET retired_at = now() WHERE retired_at IS NULL;
  INSERT INTO mycelium.hub_keys (kid, public_jwk, sealed_private) VALUES (p_kid, p_public_jwk, p_sealed);
  PERFORM mycelium.audit('auth.key_rotated', NULL, p_kid, '{}');
  RETURN QUERY SELECT * FROM mycelium.hub_keys WHERE kid = p_kid;
END
$$;
COMMENT ON FUNCTION mycelium.rotate_hub_key IS 'public write';
