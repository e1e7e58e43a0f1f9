-- Version 4: why a host selector's queue waits, kept once per selector (queue_waits) instead of
-- copied onto every queued experiment: a host changing state rewrote each queued row, 10,000 of
-- them in 230 ms under the write lock, with the state of every matching host in each. Readers go
-- through experiments_shown, which adds the wait to QUEUED rows. Derived state: the next
-- scheduling pass rewrites it, so exports leave it out. PostgreSQL expands e.* when the view is
-- made: a migration that adds a column to experiments recreates the view.
CREATE TABLE IF NOT EXISTS queue_waits (
    selector_key TEXT PRIMARY KEY,
    message TEXT NOT NULL
);
INSERT INTO queue_waits (selector_key, message)
    SELECT selector_key, MAX(message) FROM experiments
    WHERE state = 'QUEUED' AND message != '' GROUP BY selector_key;
UPDATE experiments SET message = ''
    WHERE state = 'QUEUED'
    AND message = (SELECT w.message FROM queue_waits w WHERE w.selector_key = experiments.selector_key);
CREATE VIEW experiments_shown AS
    SELECT e.*, w.message AS queue_wait
    FROM experiments e LEFT JOIN queue_waits w
    ON e.state = 'QUEUED' AND w.selector_key = e.selector_key;
