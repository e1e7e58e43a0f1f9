-- Version 2: name lookups by index (GetExperiment by name read and decoded every row), and no
-- secret in the database: host tokens move to the store's 0600 secrets file (the step in
-- migrations.py copies them there first), then the column goes.
CREATE INDEX IF NOT EXISTS experiments_by_name ON experiments (name, seq);
ALTER TABLE hosts DROP COLUMN token;
