-- A placeholder on the timeline branch only: issue 47's migration is 0011, and 0009 and 0010
-- belong to other issues' branches. At merge, drop this file in favour of theirs.
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
