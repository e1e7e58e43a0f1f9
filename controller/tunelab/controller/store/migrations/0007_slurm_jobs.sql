-- Version 7: Slurm pools and their jobs (issue 29). A pool is a host row (so selectors, drain
-- and `hosts ls` apply unchanged) plus its sbatch settings here. A job row is written in the
-- same transaction that moves the attempt out of DISPATCHING with the job id sbatch returned;
-- the attempt id is also the job's name, so a controller that died between sbatch and that
-- commit finds the job with squeue instead of submitting again. No token is stored: an
-- attempt's report token is an HMAC of its id under a key kept in the controller's slurm dir.
CREATE TABLE IF NOT EXISTS slurm_pools (
    name TEXT PRIMARY KEY,
    config_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS slurm_jobs (
    attempt_id TEXT PRIMARY KEY,
    pool TEXT NOT NULL,
    job_id TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    slurm_state TEXT NOT NULL DEFAULT '',
    slurm_reason TEXT NOT NULL DEFAULT ''
);
