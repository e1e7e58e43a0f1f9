"""The agent's Prometheus metrics: one background sampler, collectors that render its samples.

Layout::

    sampler      the one thread that reads slow sources (NVML, sysfs, the server registry)
    gpu_source   what the sampler reads from NVML, per cadence   -> gpu_collector
    host         /proc and /sys through the root path            -> HostCollector
    servers      server lifecycle and GPU memory per server      -> ServerCollector
    audit        the last audit's check statuses                 -> AuditCollector
    self_metrics the agent's own info, sampler cost and freshness
    engines      /metrics/engines: each READY engine's /metrics, relabelled
    endpoint     the HTTP server for /metrics and /metrics/engines
    app          AgentMetrics: builds the above for AgentApp

A scrape never reads NVML or sysfs: collectors only render the latest cached samples, so its
cost does not depend on how slow a GPU call is or how many scrapers there are.
"""
