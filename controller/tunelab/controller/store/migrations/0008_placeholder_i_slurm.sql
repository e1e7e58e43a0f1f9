-- Placeholder on branch i-slurm for migration 0008, which another branch may own; its
-- Slurm tables are 0009 as the lead asked. The lead drops this file when 0007/0008 are merged.
SELECT 1;
