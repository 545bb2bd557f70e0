-- Links between memories: myc:// URIs, [[wikilinks]], ![[transclusions]] and typed relations in
-- frontmatter, parsed by the database on every write (trigger), so a link index can never drift
-- from the memories it describes, whoever wrote them.

CREATE TABLE mycelium.memory_links (
  room text NOT NULL,
  source_key text NOT NULL,
  ord integer NOT NULL,
  target text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('uri', 'wikilink', 'transclusion', 'relation')),
  anchor text,
  label text,
  relation text CHECK (relation IN ('supersedes', 'superseded-by', 'depends-on', 'part-of', 'relates-to')),
  raw text NOT NULL,
  cross_room text,
  PRIMARY KEY (room, source_key, ord),
  FOREIGN KEY (room, source_key) REFERENCES mycelium.memories (room, key) ON DELETE CASCADE
);
CREATE INDEX memory_links_backlinks ON mycelium.memory_links (room, target);
