-- The web app's own reads (the pages read everything else through the verbs the API calls).

-- name: web_thread_titles
-- The board rows whose threads these are (thread URNs): key and title, as the board names them, for
-- a timeline read without the board.
SELECT m.episode, m.key, mycelium.memory_title(m.value, m.meta) AS title
FROM mycelium.memories m
WHERE m.room = :room AND m.episode = ANY (:episodes::text[]) AND mycelium.is_board_key(m.key)
