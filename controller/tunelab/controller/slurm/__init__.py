"""Slurm as a kind of host: the Slurm commands and a pool's settings (``commands``), the driver
that turns queued experiments into jobs (``driver``), and job log reading (``logs``). The pool's
rows live in the store (``store/slurmbook.py``)."""
