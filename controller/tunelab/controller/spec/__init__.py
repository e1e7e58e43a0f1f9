"""Experiment specs: parse YAML, validate with field paths, expand matrix/ablation/repeat."""

from tunelab.controller.spec.errors import SpecError, SpecIssue
from tunelab.controller.spec.expand import (
    ExpandedExperiment,
    expand_document,
    expand_text,
    parse_spec_text,
)

__all__ = [
    "ExpandedExperiment",
    "SpecError",
    "SpecIssue",
    "expand_document",
    "expand_text",
    "parse_spec_text",
]
