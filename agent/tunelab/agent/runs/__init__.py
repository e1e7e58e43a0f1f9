"""Experiment runs: optional server start → readiness → benchmark sweep → stop, carried out by
the agent alone and kept in its state dir so they survive the agent's own restart."""
