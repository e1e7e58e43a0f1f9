-- Placeholder on branch i-slurm for migration 0008, which another branch owns (b-store: 0005,
-- e-search: 0007). The lead drops this file when the owner's migration is merged.
SELECT 1;
