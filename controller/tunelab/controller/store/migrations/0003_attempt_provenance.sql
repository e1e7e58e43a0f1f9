-- Version 3: what each attempt ran on (argv, env with secrets redacted, engine and version, model
-- config hash, GPUs, driver, clocks and power limit at start), recorded by the agent with the run.
ALTER TABLE attempts ADD COLUMN provenance_json TEXT;
