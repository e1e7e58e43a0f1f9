"""tunelab's OpenAI-compatible load generator and the server simulator it is tested against.

Kept free of imports at package level: ``python -m tunelab.bench.simulator`` and the bench
process start fast, and the laptop CLI can use the load generator without the agent daemon.
"""
