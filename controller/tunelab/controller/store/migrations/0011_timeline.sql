-- Version 11: attempt timelines (issue 47). One row per attempt that recorded one: the bounded
-- timeline document the agent sent with its result (JSON; tunelab.bench.timeline.document),
-- the events read from it when it was stored (small: show and compare read only these), and
-- its size in bytes. Written once, when the attempt's result is; kept as long as the attempt.
CREATE TABLE IF NOT EXISTS attempt_timelines (
    attempt_id TEXT PRIMARY KEY,
    timeline_json TEXT NOT NULL,
    events_json TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    stored_at REAL NOT NULL
);
