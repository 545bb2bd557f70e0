-- The web app's own reads (the pages read everything else through the verbs the API calls).

-- name: web_thread_titles
-- The board rows whose threads these are (thread URNs): key and title, as the board names them, for
-- a timeline read without the board.
SELECT m.episode, m.key, mycelium.memory_title(m.value, m.meta) AS title
FROM mycelium.memories m
WHERE m.room = :room AND m.episode = ANY (:episodes::text[]) AND mycelium.is_board_key(m.key)

-- name: web_board
-- The first :rows rows of each board column (attention), most recently changed first, each with how
-- many rows its column holds (a column without rows is absent); 404 without the room. The board's
-- own view decides every row's column; only the rows shown leave the database.
WITH b AS (
  SELECT *, row_number() OVER (PARTITION BY attention ORDER BY updated_at DESC, key) AS n,
         count(*) OVER (PARTITION BY attention) AS in_column
  FROM mycelium.board_rows
  WHERE room = :room AND mycelium.room_known(:room)
)
SELECT * FROM b WHERE n <= :rows ORDER BY attention, n
