"""Inference-server lifecycle: spawn, load progress, readiness, stop ladder, re-adoption."""
