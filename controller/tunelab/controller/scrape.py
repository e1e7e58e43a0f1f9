"""Scraping agents' /metrics during attempts and keeping per-attempt GPU summaries.

While an attempt runs, its host's ``/metrics`` is fetched every few seconds, and once more when
its benchmark window starts and when it ends (parsed with
prometheus_client's parser); each GPU the attempt holds feeds a running mean/max of power,
utilisation, memory used and SM clock, the throttle reasons seen, and its energy counter, so the
result carries "GPU power beside throughput" without anyone graphing it.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import structlog
from prometheus_client.parser import text_string_to_metric_families

from tunelab.analysis.intervals import measured
from tunelab.common.boundedhttp import HttpFailure, get

log = structlog.get_logger(__name__)

GAUGES = {
    "tunelab_gpu_power_watts": "power_watts",
    "tunelab_gpu_utilization_ratio": "utilization_ratio",
    "tunelab_gpu_memory_used_bytes": "memory_used_bytes",
    "tunelab_gpu_sm_clock_hertz": "sm_clock_hertz",
}
POWER_LIMIT = "tunelab_gpu_power_limit_watts"
ENERGY = "tunelab_gpu_energy_joules_total"
CLOCK_EVENT = "tunelab_gpu_clock_event_active"
FETCH_TIMEOUT = 2.0


@dataclass
class GpuReading:
    values: dict[str, float] = field(default_factory=dict)
    reasons: set[str] = field(default_factory=set)
    energy_joules: float | None = None
    power_limit_watts: float | None = None


def parse_gpu_readings(text: str) -> dict[str, GpuReading]:
    """Per GPU index (the ``gpu`` label), the values the summaries need from one scrape."""
    readings: dict[str, GpuReading] = defaultdict(GpuReading)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            gpu = sample.labels.get("gpu")
            if gpu is None or measured(sample.value) is None:
                continue  # NaN, inf or 1e300 from a page: not a reading (issue 45.2)
            name = sample.name
            if name in GAUGES:
                readings[gpu].values[GAUGES[name]] = sample.value
            elif name == ENERGY:
                readings[gpu].energy_joules = sample.value
            elif name == POWER_LIMIT:
                readings[gpu].power_limit_watts = sample.value
            elif name == CLOCK_EVENT and sample.value >= 1:
                readings[gpu].reasons.add(sample.labels.get("reason", "?"))
    return dict(readings)


@dataclass
class _Stat:
    total: float = 0.0
    peak: float = float("-inf")
    count: int = 0

    def add(self, value: float) -> None:
        self.total += value
        self.peak = max(self.peak, value)
        self.count += 1

    def as_dict(self) -> dict[str, float]:
        return {"mean": self.total / self.count, "max": self.peak} if self.count else {}


@dataclass
class _GpuTrack:
    stats: dict[str, _Stat] = field(default_factory=lambda: defaultdict(_Stat))
    reasons: set[str] = field(default_factory=set)
    energy: float = 0.0  # joules used while the attempt ran (counter resets handled)
    bench_energy: float = 0.0  # of which during the benchmark
    last_energy: float | None = None
    power_limit: float | None = None


class AttemptGpuSummary:
    """Running GPU figures of one attempt."""

    def __init__(self, gpus: list[int]) -> None:
        self.gpus = {str(g) for g in gpus}  # empty: every GPU of the host
        self.tracks: dict[str, _GpuTrack] = defaultdict(_GpuTrack)
        self.samples = 0
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.bench_power = _Stat()  # total power of the attempt's GPUs, per benchmarking scrape
        self.bench_counter_moves = 0  # benchmarking scrapes in which the energy counter moved
        self.scrape_errors = 0  # failed scrapes: a wrong metrics URL must not look like "no GPU"
        self.last_scrape_error = ""
        self.metrics_url = ""

    def add(self, readings: dict[str, GpuReading], at: float, benchmarking: bool) -> None:
        self.samples += 1
        self.first_at = self.first_at or at
        self.last_at = at
        mine = {g: r for g, r in readings.items() if not self.gpus or g in self.gpus}
        if benchmarking and any("power_watts" in r.values for r in mine.values()):
            self.bench_power.add(sum(r.values.get("power_watts", 0.0) for r in mine.values()))
        for gpu, reading in readings.items():
            if self.gpus and gpu not in self.gpus:
                continue
            track = self.tracks[gpu]
            for key, value in reading.values.items():
                track.stats[key].add(value)
            track.reasons |= reading.reasons
            track.power_limit = reading.power_limit_watts or track.power_limit
            if reading.energy_joules is not None:
                if track.last_energy is not None:
                    delta = reading.energy_joules - track.last_energy
                    delta = delta if delta >= 0 else reading.energy_joules  # driver reload reset
                    track.energy += delta
                    if benchmarking:
                        track.bench_energy += delta
                        self.bench_counter_moves += delta > 0
                track.last_energy = reading.energy_joules

    def summary(self) -> dict[str, Any]:
        gpus: dict[str, dict[str, Any]] = {}
        for gpu, track in sorted(self.tracks.items()):
            gpus[gpu] = {
                **{key: stat.as_dict() for key, stat in track.stats.items()},
                "clock_events_seen": sorted(track.reasons),
                "energy_joules": round(track.energy, 3),
                "benchmark_energy_joules": round(track.bench_energy, 3),
                "power_limit_watts": track.power_limit,
            }
        power = [
            t.stats["power_watts"].total / t.stats["power_watts"].count
            for t in self.tracks.values()
            if t.stats["power_watts"].count
        ]
        return {
            "samples": self.samples,
            "scrape_errors": self.scrape_errors,
            "last_scrape_error": self.last_scrape_error,
            "metrics_url": self.metrics_url,
            "seconds": round((self.last_at or 0) - (self.first_at or 0), 3),
            "gpus": gpus,
            "mean_power_watts_total": round(sum(power), 3) if power else None,
            "energy_joules": round(sum(t.energy for t in self.tracks.values()), 3),
            "benchmark_energy_joules": round(sum(t.bench_energy for t in self.tracks.values()), 3),
            "benchmark_energy_counter_moves": self.bench_counter_moves,
            "benchmark_mean_power_watts_total": (
                round(self.bench_power.total / self.bench_power.count, 3)
                if self.bench_power.count
                else None
            ),
        }


def fetch_metrics(url: str, timeout: float = FETCH_TIMEOUT) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"metrics url must be http(s): {url!r}")
    try:  # tunelab.common.boundedhttp: timeout in all, at most 16 MiB, redirects not followed
        reply = get(url, seconds=timeout, max_body=16 * 1024 * 1024)
    except HttpFailure as exc:
        raise OSError(str(exc)) from None
    if reply.status != 200:
        raise OSError(f"HTTP {reply.status}")
    return reply.body.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class ScrapeTarget:
    attempt_id: str
    url: str
    gpus: list[int]
    benchmarking: bool


class MetricsScraper:
    """Background thread: scrape each live attempt's host, accumulate per attempt."""

    def __init__(
        self,
        targets: Callable[[], list[ScrapeTarget]],
        interval: float = 5.0,
        fetch: Callable[[str], str] = fetch_metrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._targets = targets
        self._interval = interval
        self._fetch = fetch
        self._clock = clock
        self._summaries: dict[str, AttemptGpuSummary] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scraper", daemon=True)
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="scrape")
        self.errors = 0
        self._failing: set[str] = set()

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.scrape_once()
            self._stop.wait(self._interval)

    def _page(self, url: str) -> dict[str, GpuReading] | str:
        """The page's GPU readings, or why it could not be had (logged once per failing URL)."""
        try:
            readings = parse_gpu_readings(self._fetch(url))
        except (OSError, ValueError) as exc:
            self.errors += 1
            reason = str(getattr(exc, "reason", None) or exc)
            if url not in self._failing:
                log.warning("metrics_scrape_failed", url=url, error=reason)
            self._failing.add(url)
            return reason
        if url in self._failing:
            log.info("metrics_scrape_recovered", url=url)
            self._failing.discard(url)
        return readings

    def scrape_once(self) -> None:
        """One page per host, fetched in parallel (a hung agent delays only itself)."""
        targets = self._targets()
        urls = sorted({t.url for t in targets})
        pages = dict(zip(urls, self._pool.map(self._page, urls), strict=True))
        now = self._clock()
        with self._lock:
            for target in targets:
                self._record(target, pages[target.url], now)

    def scrape_target(self, target: ScrapeTarget) -> None:
        """One scrape of one attempt's host now, beside the interval: the dispatcher calls it
        (on the attempt's own call thread) when a benchmark window starts and ends, so an
        attempt shorter than the interval still has its GPU figures."""
        page = self._page(target.url)
        now = self._clock()
        with self._lock:
            self._record(target, page, now)

    def record_text(self, target: ScrapeTarget, text: str) -> None:
        """A page that came to the controller instead of being fetched (a Slurm job's report):
        the same summaries as a scrape; a page that does not parse counts as a failed scrape."""
        try:
            page: dict[str, GpuReading] | str = parse_gpu_readings(text)
        except ValueError as exc:
            self.errors += 1
            page = f"the job's GPU figures did not parse: {exc}"
        now = self._clock()
        with self._lock:
            self._record(target, page, now)

    def _record(self, target: ScrapeTarget, page: dict[str, GpuReading] | str, at: float) -> None:
        summary = self._summaries.setdefault(target.attempt_id, AttemptGpuSummary(target.gpus))
        summary.metrics_url = target.url
        if isinstance(page, str):
            summary.scrape_errors += 1
            summary.last_scrape_error = page
        else:
            summary.add(page, at, target.benchmarking)

    def snapshot(self, attempt_id: str) -> dict[str, Any] | None:
        with self._lock:
            summary = self._summaries.get(attempt_id)
            return summary.summary() if summary else None

    def finish(self, attempt_id: str) -> dict[str, Any] | None:
        """The attempt's summary; the accumulator is dropped."""
        with self._lock:
            summary = self._summaries.pop(attempt_id, None)
            return summary.summary() if summary else None


COUNTER_MOVES_NEEDED = 2  # the agent reads the counter every 1 s on a busy GPU (15 s when idle)


def benchmark_energy(
    result: dict[str, Any] | None, gpu_summary: dict[str, Any] | None
) -> tuple[float, str] | None:
    """Joules the attempt's GPUs used while benchmarking, and how that was found.

    The GPUs' own energy counter is used when it moved at least twice during the benchmark;
    otherwise (a sweep shorter than the agent's slow cadence) mean scraped power times the sweep's
    measured duration.
    """
    if not result or not gpu_summary:
        return None
    counted = float(gpu_summary.get("benchmark_energy_joules") or 0.0)
    if (
        counted > 0
        and int(gpu_summary.get("benchmark_energy_counter_moves") or 0) >= COUNTER_MOVES_NEEDED
    ):
        return counted, "energy counter"
    power = gpu_summary.get("benchmark_mean_power_watts_total") or gpu_summary.get(
        "mean_power_watts_total"
    )
    seconds = sum(float(p.get("duration") or 0.0) for p in result.get("points", []))
    if not power or seconds <= 0:
        return None
    return float(power) * seconds, "mean power x benchmark time"


def tokens_per_joule(
    result: dict[str, Any] | None, gpu_summary: dict[str, Any] | None
) -> float | None:
    """Output tokens of the whole sweep per joule the attempt's GPUs used while benchmarking."""
    energy = benchmark_energy(result, gpu_summary)
    tokens = sum(int(p.get("total_output_tokens") or 0) for p in (result or {}).get("points", []))
    if energy is None or energy[0] <= 0 or tokens <= 0:
        return None
    return tokens / energy[0]
