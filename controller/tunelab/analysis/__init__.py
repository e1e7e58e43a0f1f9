"""Offline analysis, run by the controller and by the laptop CLI alike: intervals and effects,
the comparison document, the roofline, the HTML report, profile summaries and diffs, and the
MLflow export library. It imports no daemon (``tunelab.controller``, ``tunelab.agent``), which
tests/unit/test_layout.py checks."""
