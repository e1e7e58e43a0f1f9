-- Version 5: an attempt's failure reason (and the log line it was read from) as columns, not
-- only inside result_json (the step in core.py copies them out of the results of older rows
-- after this runs); and a client's request id per submission, so that a SubmitExperiments
-- retried after a lost answer returns the group the first one made instead of queuing again.
ALTER TABLE attempts ADD COLUMN failure_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN failure_line TEXT NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS submissions (
    request_id TEXT PRIMARY KEY,
    grp TEXT NOT NULL,
    submitted_at REAL NOT NULL
);
