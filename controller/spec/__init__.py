"""Experiment specs: parse YAML, validate with field paths, expand matrix/ablation/repeat."""

from controller.spec.errors import SpecError, SpecIssue
from controller.spec.expand import ExpandedExperiment, expand_document, expand_text, parse_spec_text

__all__ = [
    "ExpandedExperiment",
    "SpecError",
    "SpecIssue",
    "expand_document",
    "expand_text",
    "parse_spec_text",
]
