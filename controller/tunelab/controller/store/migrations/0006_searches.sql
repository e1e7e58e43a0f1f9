-- Version 6: searches (issue 25). A search is a submission group whose experiments the
-- controller proposes itself; its own state and each trial's outcome are kept here, so a
-- restarted controller resumes the search without running a finished trial again. A trial is
-- inserted in the same transaction as its experiment (a skipped trial has no experiment).
CREATE TABLE IF NOT EXISTS searches (
    grp TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    base_json TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT '',
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    submitted_at REAL NOT NULL,
    finished_at REAL
);
CREATE INDEX IF NOT EXISTS searches_running ON searches (state);
CREATE TABLE IF NOT EXISTS search_trials (
    grp TEXT NOT NULL REFERENCES searches (grp),
    number INTEGER NOT NULL,
    params_json TEXT NOT NULL,
    rung INTEGER NOT NULL DEFAULT 0,
    experiment_id TEXT,
    state TEXT NOT NULL,
    objective REAL,
    samples_json TEXT NOT NULL DEFAULT '[]',
    details_json TEXT NOT NULL DEFAULT '{}',
    failure_reason TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    finished_at REAL,
    PRIMARY KEY (grp, number)
);
