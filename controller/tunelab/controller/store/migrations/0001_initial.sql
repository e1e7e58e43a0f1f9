-- Version 1: the schema of the first release (f58540c and before, which had no version).
-- IF NOT EXISTS throughout: a database of that release already has all of it.
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS hosts (
    name TEXT PRIMARY KEY,
    address TEXT NOT NULL,
    labels_json TEXT NOT NULL DEFAULT '{}',
    token TEXT,
    metrics_url TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,
    state_reason TEXT NOT NULL DEFAULT '',
    drain INTEGER NOT NULL DEFAULT 0,
    quarantined INTEGER NOT NULL DEFAULT 0,
    gpu_count INTEGER NOT NULL DEFAULT 0,
    gpus_json TEXT NOT NULL DEFAULT '[]',
    last_seen REAL,
    agent_instance_id TEXT NOT NULL DEFAULT '',
    agent_version TEXT NOT NULL DEFAULT '',
    failures INTEGER NOT NULL DEFAULT 0,
    added_at REAL NOT NULL
);

CREATE TABLE IF NOT EXISTS experiments (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    grp TEXT NOT NULL,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    spec_json TEXT NOT NULL,
    varied_json TEXT NOT NULL DEFAULT '{}',
    selector_key TEXT NOT NULL,
    gpus_needed INTEGER NOT NULL DEFAULT 0,
    repeat_index INTEGER NOT NULL DEFAULT 1,
    max_attempts INTEGER NOT NULL DEFAULT 3,
    avoid_hosts_json TEXT NOT NULL DEFAULT '[]',
    submitted_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    message TEXT NOT NULL DEFAULT '',
    cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS experiments_queue
    ON experiments (state, selector_key, priority DESC, seq);
CREATE INDEX IF NOT EXISTS experiments_group ON experiments (grp);

CREATE TABLE IF NOT EXISTS attempts (
    id TEXT PRIMARY KEY,
    experiment_id TEXT NOT NULL REFERENCES experiments (id),
    number INTEGER NOT NULL,
    host TEXT NOT NULL,
    gpus_json TEXT NOT NULL DEFAULT '[]',
    state TEXT NOT NULL,
    prev_state TEXT,
    created_at REAL NOT NULL,
    dispatched_at REAL,
    acked_at REAL,
    finished_at REAL,
    unknown_since REAL,
    message TEXT NOT NULL DEFAULT '',
    result_json TEXT,
    gpu_summary_json TEXT,
    progress_json TEXT,
    agent_instance_id TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS attempts_by_state ON attempts (state);
CREATE INDEX IF NOT EXISTS attempts_by_experiment ON attempts (experiment_id);
-- An experiment never has two live attempts: the retry is created only after LOST is written.
CREATE UNIQUE INDEX IF NOT EXISTS one_live_attempt
    ON attempts (experiment_id)
    WHERE state NOT IN ('SUCCEEDED', 'FAILED_STARTUP', 'FAILED_BENCHMARK', 'CANCELLED', 'LOST', 'TIMED_OUT');

CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    kind TEXT NOT NULL,          -- experiment | attempt | host
    ref TEXT NOT NULL,
    from_state TEXT,
    to_state TEXT,
    message TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_by_ref ON events (ref);
