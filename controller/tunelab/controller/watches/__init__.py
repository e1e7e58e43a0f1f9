"""Watches (docs/watch.md): a spec run on a schedule, each occurrence an ordinary experiment
group in the queue, judged against a baseline (``tunelab.analysis.watch``)."""
