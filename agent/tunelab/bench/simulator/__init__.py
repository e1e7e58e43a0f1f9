"""An OpenAI-compatible inference-server simulator whose timing is known exactly.

It streams chunk ``j`` at ``arrival + TTFT + j·D``, prints SGLang-style shard loading lines,
answers ``/health`` 503 until "loaded", and serves a vLLM-style ``/metrics``; fault modes
(HTTP errors, dropped or hung streams, malformed lines, early EOS) exercise clients' error paths.
"""
