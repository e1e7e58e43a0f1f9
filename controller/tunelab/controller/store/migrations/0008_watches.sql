-- Version 8: watches (issue 38). A watch is a spec run on a schedule: its row holds the spec,
-- whether it is active, and when its next occurrence is due. An occurrence row is written in
-- the same transaction that queues its experiments (an ordinary group) and moves next_due on,
-- under the scheduling turn's fence, so two controllers never queue one occurrence twice. Its
-- verdict (values, provenance, the judgement against the baseline) is written once, as JSON.
CREATE TABLE IF NOT EXISTS watches (
    name TEXT PRIMARY KEY,
    spec_json TEXT NOT NULL,
    base_yaml TEXT NOT NULL,
    state TEXT NOT NULL,
    pin INTEGER NOT NULL DEFAULT 0,
    next_due REAL NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS watch_occurrences (
    watch TEXT NOT NULL,
    number INTEGER NOT NULL,
    grp TEXT NOT NULL,
    due_at REAL NOT NULL,
    started_at REAL NOT NULL,
    verdict_json TEXT,
    judged_at REAL,
    PRIMARY KEY (watch, number)
);
CREATE INDEX IF NOT EXISTS watch_occurrences_unjudged ON watch_occurrences (judged_at);
