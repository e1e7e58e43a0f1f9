-- Version 9: step faults (issue 45.1). The control loop runs each watch's, search's and Slurm
-- pool's step guarded (controller/guard.py): a step that raises marks its object here (how many
-- steps in a row failed, the last error, one bounded line) instead of failing the tick, and a
-- step that succeeds again removes the row. `watch show`, `search show` and `hosts` read it.
CREATE TABLE IF NOT EXISTS step_faults (
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    failures INTEGER NOT NULL,
    error TEXT NOT NULL,
    first_at REAL NOT NULL,
    last_at REAL NOT NULL,
    PRIMARY KEY (kind, name)
);
