"""``/metrics/engines``: every READY server's own /metrics, relabelled, in one exposition.

vLLM (``vllm:*``) and SGLang (``sglang:*``) name metrics with colons, which Prometheus reserves
for recording rules; here colons become underscores and each sample gets a ``server`` label (an
engine's own ``server`` label becomes ``exported_server``, as Prometheus does on a clash). The
same family from several servers is merged under one HELP/TYPE. ``_created`` series are dropped.

Engines are fetched when this endpoint is scraped, concurrently, each within ``timeout``; a slow
or broken engine is reported as ``tunelab_engine_scrape_success{server} 0`` and left out, and
it never touches ``/metrics``, which is served by other code on other request threads.
"""

from __future__ import annotations

import http.client
import re
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from tunelab.agent.servers.states import ServerState

DEFAULT_TIMEOUT = 2.0
MAX_BYTES = 32 * 1024 * 1024
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created", "_gsum", "_gcount")
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


@dataclass(frozen=True)
class EngineTarget:
    server: str  # the server's name: the label value
    port: int


@dataclass
class MetricFamilyText:
    """One family's lines, already relabelled."""

    name: str
    help: str | None = None
    type: str | None = None
    samples: list[str] = field(default_factory=list)


def relabel(text: str, server: str) -> list[MetricFamilyText]:
    """Parse a text-format exposition and rewrite it for ``server``; ValueError if malformed."""
    families: dict[str, MetricFamilyText] = {}
    current: MetricFamilyText | None = None
    server_label = f'server="{_escape(server)}"'
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = _name(parts[2])
                current = families.setdefault(name, MetricFamilyText(name))
                value = parts[3] if len(parts) > 3 else ""
                if parts[1] == "HELP":
                    current.help = value
                else:
                    current.type = value
            continue
        name, labels, rest = split_sample(line)
        name = _name(name)
        if current is None or not _belongs(name, current.name):
            current = families.setdefault(name, MetricFamilyText(name))
        labels = [("exported_server" if k == "server" else k, v) for k, v in labels]
        inner = ",".join([server_label, *(f"{k}={v}" for k, v in labels)])
        current.samples.append(f"{name}{{{inner}}} {rest}")
    return _drop_created(families)


def merge(per_server: Iterable[list[MetricFamilyText]]) -> list[MetricFamilyText]:
    """One family per name across servers; the first HELP/TYPE seen wins."""
    merged: dict[str, MetricFamilyText] = {}
    for families in per_server:
        for family in families:
            target = merged.setdefault(family.name, MetricFamilyText(family.name))
            target.help = target.help if target.help is not None else family.help
            target.type = target.type if target.type is not None else family.type
            target.samples.extend(family.samples)
    return list(merged.values())


def render(families: Iterable[MetricFamilyText]) -> str:
    lines: list[str] = []
    for family in families:
        if family.help is not None:
            lines.append(f"# HELP {family.name} {family.help}".rstrip())
        if family.type is not None:
            lines.append(f"# TYPE {family.name} {family.type}")
        lines.extend(family.samples)
    return "\n".join(lines) + "\n" if lines else ""


def _name(name: str) -> str:
    return name.replace(":", "_")


def _belongs(sample: str, family: str) -> bool:
    return sample == family or (sample.startswith(family) and sample[len(family) :] in _SUFFIXES)


def _drop_created(families: dict[str, MetricFamilyText]) -> list[MetricFamilyText]:
    kept: list[MetricFamilyText] = []
    for family in families.values():
        base = family.name.removesuffix("_created")
        if base != family.name and (base in families or f"{base}_total" in families):
            continue  # the start time of a counter/histogram: not worth a series
        family.samples = [s for s in family.samples if not _sample_name(s).endswith("_created")]
        if family.samples:
            kept.append(family)
    return kept


def _sample_name(sample: str) -> str:
    return sample.split("{", 1)[0]


def split_sample(line: str) -> tuple[str, list[tuple[str, str]], str]:
    """``name{a="x",b="y"} value [ts]`` -> (name, [(a, '"x"'), ...], 'value [ts]')."""
    brace = line.find("{")
    space = line.find(" ")
    if brace == -1 or (space != -1 and space < brace):
        if space == -1:
            raise ValueError(f"no value in sample line: {line[:80]!r}")
        return line[:space], [], _checked(line[:space], line[space + 1 :].strip(), line)
    name = line[:brace]
    labels: list[tuple[str, str]] = []
    i = brace + 1
    while True:
        while i < len(line) and line[i] in " ,":
            i += 1
        if i >= len(line):
            raise ValueError(f"unterminated label set: {line[:80]!r}")
        if line[i] == "}":
            break
        eq = line.find("=", i)
        if eq == -1 or eq + 1 >= len(line) or line[eq + 1] != '"':
            raise ValueError(f"bad label in: {line[:80]!r}")
        key = line[i:eq].strip()
        j = eq + 2
        while j < len(line) and line[j] != '"':
            j += 2 if line[j] == "\\" else 1
        if j >= len(line):
            raise ValueError(f"unterminated label value: {line[:80]!r}")
        labels.append((key, line[eq + 1 : j + 1]))
        i = j + 1
    return name, labels, _checked(name, line[i + 1 :].strip(), line)


def _checked(name: str, rest: str, line: str) -> str:
    """The value (and timestamp) part, after checking the name and that the value is a number."""
    parts = rest.split()
    if not _NAME.match(name) or not 1 <= len(parts) <= 2:
        raise ValueError(f"not a sample line: {line[:80]!r}")
    for number in parts:
        float(number)  # ValueError names the bad token; +Inf, -Inf and NaN parse
    return rest


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# --- fetching ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineResult:
    target: EngineTarget
    families: list[MetricFamilyText] | None  # None: the fetch or parse failed
    seconds: float


def fetch_metrics(port: int, timeout: float, max_bytes: int = MAX_BYTES) -> str:
    """GET the engine's /metrics on loopback as text format 0.0.4 (at most ``max_bytes``)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics", headers={"Accept": "text/plain;version=0.0.4"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (loopback URL)
        if response.status != 200:
            raise ValueError(f"HTTP {response.status}")
        body: bytes = response.read(max_bytes + 1)
    if len(body) > max_bytes:
        raise ValueError(f"/metrics larger than {max_bytes} bytes")
    return body.decode("utf-8", errors="replace")


class EngineScraper:
    """Fetches the READY servers' /metrics for one scrape of /metrics/engines."""

    def __init__(
        self,
        targets: Callable[[], Sequence[EngineTarget]],
        timeout: float = DEFAULT_TIMEOUT,
        fetch: Callable[[int, float], str] = fetch_metrics,
        max_workers: int = 8,
    ) -> None:
        self._targets = targets
        self._timeout = timeout
        self._fetch = fetch
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="engine-fetch")

    def _one(self, target: EngineTarget) -> EngineResult:
        start = time.perf_counter()
        try:
            families = relabel(self._fetch(target.port, self._timeout), target.server)
        except (OSError, http.client.HTTPException, ValueError):
            families = None
        return EngineResult(target, families, time.perf_counter() - start)

    def scrape(self) -> list[EngineResult]:
        targets = list(self._targets())
        futures = {self._pool.submit(self._one, t): t for t in targets}
        done, _ = wait(futures, timeout=self._timeout + 0.5)
        results = []
        for future, target in futures.items():
            if future in done:
                results.append(future.result())
            else:  # still stuck past its socket timeout: report it and move on
                results.append(EngineResult(target, None, self._timeout))
        return results

    def exposition(self) -> str:
        results = self.scrape()
        ours = [
            MetricFamilyText(
                "tunelab_engine_scrape_success",
                "1 when the server's own /metrics answered within the timeout and parsed.",
                "gauge",
                [
                    f'tunelab_engine_scrape_success{{server="{_escape(r.target.server)}"}} '
                    f"{1 if r.families is not None else 0}"
                    for r in results
                ],
            ),
            MetricFamilyText(
                "tunelab_engine_scrape_duration_seconds",
                "Time to fetch and relabel the server's /metrics.",
                "gauge",
                [
                    f'tunelab_engine_scrape_duration_seconds{{server="{_escape(r.target.server)}"}}'
                    f" {r.seconds:.6f}"
                    for r in results
                ],
            ),
        ]
        engine = merge(r.families for r in results if r.families is not None)
        return render([f for f in ours if f.samples] + engine)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def ready_targets(servers: Iterable[tuple[str, ServerState, int]]) -> list[EngineTarget]:
    """(name, state, port) triples -> the READY ones as fetch targets."""
    return [EngineTarget(name, port) for name, state, port in servers if state is ServerState.READY]
