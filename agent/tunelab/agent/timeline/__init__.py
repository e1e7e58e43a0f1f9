"""The agent's side of an attempt's timeline: the engine's, GPUs' and host's series sampled at
the run's step on the agent's clock (:mod:`.recorder`), joined with the load generator's."""
