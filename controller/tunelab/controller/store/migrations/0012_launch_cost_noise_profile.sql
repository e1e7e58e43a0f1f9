-- Version 12: the noise profile (issue 44). Per host class x engine (with its version) x model,
-- the variance components of the searches run there, pooled by their degrees of freedom
-- (tunelab.analysis.noise): log-scale variances between launches and within one, the degrees
-- of freedom behind each, and how many searches they pool. The next search on the same key
-- plans and judges its first rounds with it. One row per key, replaced as a search ends.
-- A launch's cost (its load and its measuring, GPU-seconds) is kept with its trial (details),
-- beside the launch record's other fields.
CREATE TABLE IF NOT EXISTS noise_profiles (
    host_class TEXT NOT NULL,
    engine TEXT NOT NULL,
    model TEXT NOT NULL,
    between_var REAL NOT NULL,
    within_var REAL NOT NULL,
    df_between REAL NOT NULL,
    df_within REAL NOT NULL,
    searches INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (host_class, engine, model)
);
