-- Version 9: a search trial's evidence as columns (issue 43.2): why it was launched (its phase:
-- strategy, race, effect, drift_start, drift_end) and its race round, the load it was measured
-- at, each SLO's value over its limit, the host and the GPU-seconds it used. The race, drift
-- and the answer read these; details_json is for display only. The step in searches.py copies
-- them out of the details of older rows after this runs.
ALTER TABLE search_trials ADD COLUMN phase TEXT NOT NULL DEFAULT 'strategy';
ALTER TABLE search_trials ADD COLUMN race_round INTEGER NOT NULL DEFAULT 0;
ALTER TABLE search_trials ADD COLUMN load_axis TEXT NOT NULL DEFAULT '';
ALTER TABLE search_trials ADD COLUMN load_value REAL;
ALTER TABLE search_trials ADD COLUMN slo_ratios_json TEXT NOT NULL DEFAULT '{}';
ALTER TABLE search_trials ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE search_trials ADD COLUMN gpu_seconds REAL;
