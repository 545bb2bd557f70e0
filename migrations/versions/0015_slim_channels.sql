-- Revision 0015_slim_channels (frozen): rooms as SLIM group channels (sql/slim.sql): the position
-- each room's channel has published up to, and who asked to be on it.
CREATE TABLE mycelium.slim_channels (
  room text PRIMARY KEY REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  published bigint NOT NULL DEFAULT 0 CHECK (published >= 0),
  publisher text,
  published_at timestamptz
);

CREATE TABLE mycelium.slim_members (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  handle text NOT NULL,
  joined_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, handle)
);
