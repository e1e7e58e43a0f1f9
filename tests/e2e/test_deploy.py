"""deploy/ against real parts: the shipped prometheus.yml and rules in a real Prometheus scraping a
real controller, an agent on a fake NVML (captured H200 values) and the simulator, after a real
experiment; then every PromQL expression of every rule and dashboard must parse and return data.
The static checks beside it cover what Grafana provisioning, systemd and compose need."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import Lab, sim_experiment
from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tests.support.prometheus_server import PrometheusServer, finite_points
from tests.support.prometheus_shipped import (
    DEPLOY,
    REPO,
    ShippedQuery,
    dashboard_queries,
    load_dashboards,
    metric_names,
    panels,
    rate_interval,
    regex_value,
    rule_queries,
    rules,
    substitute,
    variables,
)
from tunelab.agent import cli as agent_cli
from tunelab.cli import main as controller_cli

SCRAPE = 1.0  # the test's scrape and evaluation interval (the shipped one is 5 s)
SNAPSHOT = REPO / "tests" / "unit" / "metrics" / "fixtures" / "nvml" / "h200-busy-full.json"
SGLANG_FIXTURE = REPO / "tests" / "unit" / "metrics" / "fixtures" / "engines" / "sglang.txt"
# SGLang series the dashboards read that the captured fixture lacks: histograms of SGLang's
# TokenizerMetricsCollector (python/sglang/srt/metrics/collector.py).
SGLANG_FROM_SOURCE = {
    "sglang_time_to_first_token_seconds_bucket",
    "sglang_inter_token_latency_seconds_bucket",
}
# Controller results computed from the GPU series it scraped from the agent.
GPU_FROM_CONTROLLER = {
    "tunelab_experiment_gpu_power_watts",
    "tunelab_experiment_output_tokens_per_joule",
}
JOBS = {"tunelab-agent", "tunelab-engines", "tunelab-controller"}
HOST = "e2e-gpu"


# --- the end-to-end test ---------------------------------------------------------------------


def start_agent(lab: Lab, root: Path) -> AgentProcess:
    """An agent on the captured busy H200 whose energy counter runs at the captured power, with
    the slow sampler at 1 s so energy moves within a short benchmark; registered as HOST."""
    snapshot = {**json.loads(SNAPSHOT.read_text()), "replay": {"energy_from_power": True}}
    (root / "h200.json").write_text(json.dumps(snapshot))
    (root / "agent.toml").write_text('[agent]\nsampler_slow_interval = "1s"\n')
    metrics = free_port()
    agent = AgentProcess(
        root / HOST,
        [
            "--config", str(root / "agent.toml"),
            "--metrics-listen", f"127.0.0.1:{metrics}",
            "--nvml-snapshot", str(root / "h200.json"),
        ],
    ).start()  # fmt: skip
    lab.agents[HOST] = agent
    assert lab.controller is not None
    added = lab.controller.cli(
        "hosts", "add", HOST, agent.address, "--label", "pool=e2e", "--label", "gpu.model=h200",
        "--metrics-url", f"http://127.0.0.1:{metrics}/metrics",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    return agent


def prometheus_dir(lab: Lab, root: Path) -> Path:
    """The shipped deploy/prometheus with its intervals at 1 s, targets from the real CLI."""
    assert lab.controller is not None
    prom = root / "prometheus"
    shutil.copytree(DEPLOY / "prometheus", prom, ignore=shutil.ignore_patterns("agents*.json"))
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    (prom / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    controller = [{"targets": [f"127.0.0.1:{lab.controller.metrics_port}"], "labels": {}}]
    (prom / "targets" / "controller.json").write_text(json.dumps(controller))
    out = prom / "targets" / "agents.json"
    exported = lab.controller.cli("hosts", "export-targets", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    return prom


def test_every_shipped_query_returns_data(lab: Lab, tmp_path: Path) -> None:
    t0 = time.time()
    controller = lab.start_controller()
    start_agent(lab, tmp_path)
    prom_dir = prometheus_dir(lab, tmp_path)
    [group] = json.loads((prom_dir / "targets" / "agents.json").read_text())
    assert group["labels"] == {"host": HOST, "label_gpu_model": "h200", "label_pool": "e2e"}

    prometheus = PrometheusServer(prom_dir / "prometheus.yml", tmp_path)
    try:
        prometheus.wait_ready()
        prometheus.wait_targets_up(JOBS)
        spec = sim_experiment(
            "deploy-e2e",
            itl_ms=20,
            benchmark={"concurrency": [2, 4], "requests": 16, "input_len": 16, "output_len": 32},
        )
        spec["server"]["flags"]["--startup-seconds"] = 2
        [done] = lab.submit(spec, wait=True)
        assert done["state"] == "SUCCEEDED", done
        # the controller's result reaches Prometheus, and the rules ran after the run
        prometheus.wait_value("tunelab_experiment_output_tokens_per_joule > 0")
        prometheus.wait_value("experiment:tunelab_experiment_output_tokens_per_second:max")
        time.sleep(2 * SCRAPE)
        end = time.time()
        check_every_query(prometheus, t0, end, done)
        check_rule_values(prometheus, t0, end)
        # then a watch for the watches dashboard, checked once the others were (its runs would
        # be the live-run dashboard's too)
        run_a_watch(lab, tmp_path)
        prometheus.wait_value("tunelab_watch_change_ratio")
        time.sleep(2 * SCRAPE)
        check_every_query(prometheus, end, time.time(), done, watches=True)
    finally:
        prometheus.stop()
    assert controller.proc is not None and controller.proc.poll() is None


def run_a_watch(lab: Lab, root: Path) -> None:
    """A watch with a baseline and one occurrence judged against it, then paused."""
    assert lab.controller is not None
    doc = sim_experiment(
        "deploy-watch",
        benchmark={"concurrency": [2], "requests": 8, "input_len": 16, "output_len": 16},
    )
    doc["watch"] = {"every": "2s", "launches": 3, "metrics": ["output_throughput"]}
    path = root / "watch.yaml"
    path.write_text(yaml.safe_dump(doc))
    added = lab.controller.cli("watch", "add", str(path))
    assert added.returncode == 0, added.stdout + added.stderr
    deadline = time.monotonic() + 240
    judged: list[dict[str, Any]] = []
    while time.monotonic() < deadline and len(judged) < 2:
        shown = lab.controller.cli_json("watch", "show", "deploy-watch")
        judged = [o for o in shown["occurrences"] if o["verdict"] is not None]
        time.sleep(0.5)
    assert len(judged) >= 2, lab.controller.log()[-3000:]
    assert lab.controller.cli("watch", "pause", "deploy-watch").returncode == 0


WATCHES = "tunelab-watches.json"


def check_every_query(
    prometheus: PrometheusServer,
    start: float,
    end: float,
    experiment: dict[str, Any],
    watches: bool = False,
) -> None:
    """Rules and dashboards, or (``watches``) the watches dashboard alone."""
    failures: list[str] = []
    gpu_queries: list[str] = []
    untested_alternatives: set[str] = set()
    known = prometheus.metric_names()
    gpu_rules = {r["record"] for r in rules() if "tunelab_gpu_" in r["expr"]}
    gpu_metrics = gpu_rules | GPU_FROM_CONTROLLER

    def check(query: ShippedQuery, values: dict[str, str]) -> None:
        expr = substitute(query.expr, values, rate_interval(query.min_interval, SCRAPE))
        reply = prometheus.query_range(expr, start, end, SCRAPE)
        if reply["status"] != "success":
            failures.append(f"{query.where}: does not parse: {reply.get('error')}\n  {expr}")
        elif finite_points(reply) == 0:
            failures.append(f"{query.where}: no data\n  {expr}")
        names = metric_names(query.expr)
        if any(n.startswith("tunelab_gpu_") or n in gpu_metrics for n in names):
            gpu_queries.append(query.where.removesuffix(" (All)"))
        for name in names - known:
            if name.startswith("sglang_") and " or " in query.expr:
                untested_alternatives.add(name)
            else:
                failures.append(f"{query.where}: reads {name}, which nothing exports")

    for query in [] if watches else rule_queries():
        check(query, {})
        record = query.where.split(": ", 1)[1]
        check(ShippedQuery(f"{query.where} (recorded)", record), {})

    resolved: dict[str, dict[str, list[str]]] = {}
    for name, dashboard in load_dashboards().items():
        if (name == WATCHES) != watches:
            continue
        values: dict[str, list[str]] = {}
        for var in variables(dashboard):
            match = substitute(var.metric, {k: regex_value(v) for k, v in values.items()}, 0)
            values[var.name] = prometheus.label_values(var.label, match, start, end)
            if not values[var.name]:
                failures.append(f"{name}: variable ${var.name} resolves to nothing ({match})")
        resolved[name] = values
        one = {k: regex_value(v[:1]) for k, v in values.items() if v}
        everything = dict.fromkeys(values, ".*")
        for query in dashboard_queries(name, dashboard):
            check(query, one)
            check(ShippedQuery(f"{query.where} (All)", query.expr, query.min_interval), everything)

    if watches:
        assert not failures, "\n".join(failures)
        assert resolved[WATCHES] == {"watch": ["deploy-watch"], "metric": ["output_throughput"]}
        return
    print("needs a GPU (answered by the fake NVML):\n  " + "\n  ".join(sorted(set(gpu_queries))))
    print("SGLang alternatives not exercised (the simulator speaks vLLM):", untested_alternatives)
    assert not failures, "\n".join(failures)
    assert gpu_queries
    assert untested_alternatives <= sglang_names() | SGLANG_FROM_SOURCE
    run = experiment["attempts"][-1]["id"]
    assert resolved["tunelab-live-run.json"] == {"host": [HOST], "run": [run]}
    assert resolved["tunelab-experiments.json"] == {"host": [HOST], "experiment": ["deploy-e2e"]}
    assert resolved["tunelab-host.json"] == {"host": [HOST], "gpu": ["0"]}


def check_rule_values(prometheus: PrometheusServer, start: float, end: float) -> None:
    """The rules compute what their names say, on the captured H200 (622.792 W of 700 W)."""
    power, limit = 622.792, 700.0
    [share] = prometheus.query("gpu:tunelab_gpu_power_watts:ratio_of_limit")
    assert float(share["value"][1]) == pytest.approx(power / limit)
    [host] = prometheus.query("host:tunelab_gpu_power_watts:sum")
    assert float(host["value"][1]) == pytest.approx(power)
    # tokens per joule = the run's token rate over the host's mean power, whenever it streams
    [rule] = [r["expr"] for r in rules() if r["record"].endswith("tokens_per_joule:rate1m")]
    tokens = "sum by (host, run) (rate(tunelab_bench_output_tokens_total[1m]))"
    reply = prometheus.query_range(f"({rule}) * {power} / ({tokens} > 0)", start, end, SCRAPE)
    assert finite_points(reply) > 0, reply
    for series in reply["data"]["result"]:
        for _, value in series["values"]:
            assert float(value) == pytest.approx(1.0)


def sglang_names() -> set[str]:
    """Series names in the captured SGLang /metrics, as the agent relabels them."""
    names = set()
    for line in SGLANG_FIXTURE.read_text().splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0].replace(":", "_"))
    return names


# --- Grafana --------------------------------------------------------------------------------

PANEL_KINDS = {"timeseries", "stat", "bargauge", "table", "state-timeline"}


def test_committed_dashboards_are_what_the_generator_writes(tmp_path: Path) -> None:
    build = DEPLOY / "grafana" / "build_dashboards.py"
    subprocess.run([sys.executable, str(build), "--out", str(tmp_path)], check=True, cwd=REPO)
    committed = DEPLOY / "grafana" / "dashboards"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in committed.iterdir())
    for path in tmp_path.iterdir():
        assert path.read_text() == (committed / path.name).read_text(), (
            f"{path.name} is stale: run python deploy/grafana/build_dashboards.py"
        )


def test_dashboards_have_what_grafana_provisioning_needs() -> None:
    dashboards = load_dashboards()
    assert len(dashboards) == 4
    assert len({d["uid"] for d in dashboards.values()}) == 4
    for name, dashboard in dashboards.items():
        assert dashboard["uid"].startswith("tunelab-") and len(dashboard["uid"]) <= 40, name
        assert dashboard["title"] and isinstance(dashboard["schemaVersion"], int), name
        template = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert template["datasource"]["type"] == "datasource"
        assert template["datasource"]["query"] == "prometheus"
        # a watch's series are the controller's, per watch: they carry no host
        if name != "tunelab-watches.json":
            assert {"host"} < set(template), f"{name}: no host variable"
        for var in variables(dashboard):
            spec = template[var.name]
            assert spec["datasource"]["uid"] == "${datasource}", (name, var.name)
            assert spec["refresh"] in (1, 2), f"{name}: ${var.name} is never refreshed"
        ids = [p["id"] for p in panels(dashboard)]
        assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
        cells: set[tuple[int, int]] = set()
        for panel in panels(dashboard):
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24, (name, panel["title"])
            mine = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                    for y in range(grid["y"], grid["y"] + grid["h"])}  # fmt: skip
            assert not mine & cells, f"{name}: {panel['title']!r} overlaps another panel"
            cells |= mine
            if panel["type"] == "row":
                continue
            assert panel["type"] in PANEL_KINDS, (name, panel["type"])
            assert panel["title"] and panel["description"], (name, panel)
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], f"{name}: {panel['title']!r} has no query"
            refs = [t["refId"] for t in panel["targets"]]
            assert len(refs) == len(set(refs)), (name, panel["title"])
            for target in panel["targets"]:
                assert target["expr"].strip() and target["datasource"] == panel["datasource"]
                used = set(re.findall(r"\$(\w+)", target["expr"])) - {"__rate_interval"}
                assert used <= set(template), f"{name}: {panel['title']!r} uses {used}"


def test_provisioning_points_at_the_shipped_prometheus_and_dashboards() -> None:
    grafana = DEPLOY / "grafana" / "provisioning"
    [source] = yaml.safe_load((grafana / "datasources" / "tunelab.yml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"] is True
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert source["jsonData"]["timeInterval"] == prometheus["global"]["scrape_interval"]
    [provider] = yaml.safe_load((grafana / "dashboards" / "tunelab.yml").read_text())["providers"]
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    mounts = dict(v.split(":")[:2] for v in compose["services"]["grafana"]["volumes"])
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    home = compose["services"]["grafana"]["environment"][
        "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"
    ]
    assert Path(home).parent.as_posix() == provider["options"]["path"]
    assert (DEPLOY / "grafana" / "dashboards" / Path(home).name).exists()


def test_deploy_page_describes_every_panel() -> None:
    section = (REPO / "docs" / "deploy.md").read_text()
    for name, dashboard in load_dashboards().items():
        assert dashboard["title"] in section, name
        for panel in panels(dashboard):
            if panel["type"] != "row":
                assert f"**{panel['title']}**" in section, (
                    f"docs/deploy.md lacks {name}: {panel['title']!r}"
                )


# --- compose, Prometheus, systemd -----------------------------------------------------------


def test_compose_mounts_files_that_exist() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    named = set(compose.get("volumes", {}))
    assert set(compose["services"]) == {"prometheus", "grafana"}
    for name, service in compose["services"].items():
        tag = service["image"].partition(":")[2]
        assert tag and tag != "latest", f"{name}: pin the image version"
        for volume in service["volumes"]:
            source, _, *mode = volume.split(":")
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source} is not in deploy/"
                assert mode == ["ro"], f"{name}: mount {source} read-only"
            else:
                assert source in named, f"{name}: volume {source} is not declared"
    prometheus = compose["services"]["prometheus"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    assert "./prometheus:/etc/prometheus:ro" in prometheus["volumes"]


def test_promtool_accepts_the_config_and_rules(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: install Debian's prometheus package (.ci/run does)"
    prom = tmp_path / "prometheus"
    shutil.copytree(DEPLOY / "prometheus", prom, ignore=shutil.ignore_patterns("agents*.json"))
    targets = [{"targets": ["gpu-1:9473"], "labels": {"host": "gpu-1", "label_pool": "a"}}]
    (prom / "targets" / "agents.json").write_text(json.dumps(targets))
    config = subprocess.run(
        [promtool, "check", "config", str(prom / "prometheus.yml")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert config.returncode == 0, config.stdout + config.stderr
    assert "WARNING" not in config.stdout + config.stderr, config.stdout + config.stderr
    files = sorted(str(p) for p in (DEPLOY / "prometheus" / "rules").glob("*.yml"))
    checked = subprocess.run([promtool, "check", "rules", *files], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout


UNITS = ("tunelab-agent.service", "tunelab-controller.service")


def unit_entries(name: str) -> dict[str, list[str]]:
    entries: dict[str, list[str]] = {}
    for line in (DEPLOY / "systemd" / name).read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            entries.setdefault(key, []).append(value)
    return entries


def installed(name: str, tmp_path: Path) -> Path:
    """The unit as installed from this checkout: ExecStart names the venv's console scripts
    (systemd-analyze verify checks that the program exists)."""
    text = (DEPLOY / "systemd" / name).read_text()
    assert "ExecStart=/opt/tunelab/bin/" in text
    path = tmp_path / name
    path.write_text(text.replace("/opt/tunelab/bin/", f"{Path(sys.executable).parent}/"))
    return path


def test_systemd_units_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze missing: install Debian's systemd package (.ci/run does)"
    paths = [str(installed(name, tmp_path)) for name in UNITS]
    verified = subprocess.run([analyze, "verify", *paths], capture_output=True, text=True)
    # the system's own units may draw warnings on some machines; ours may not draw any
    ours = [line for line in verified.stderr.splitlines() if "tunelab" in line]
    assert verified.returncode == 0 and not ours, verified.stderr
    # the controller is sandboxed; systemd scores its exposure (0 best, 10 worst) at 1.2
    security = subprocess.run(
        [analyze, "security", "--offline=true", "--threshold=20", paths[1]],
        capture_output=True, text=True,
    )  # fmt: skip
    assert security.returncode == 0, security.stdout[-2000:]


def test_units_start_the_installed_console_scripts_with_arguments_they_accept() -> None:
    parsers = {"tunelab-agent": agent_cli.build_parser(), "tunelab": controller_cli.build_parser()}
    for name in UNITS:
        [command] = unit_entries(name)["ExecStart"]
        program, *argv = command.split()
        assert program.startswith("/opt/tunelab/bin/"), command
        args = parsers[Path(program).name].parse_args(argv)  # exits (fails) on a bad argument
        assert args.command in ("serve", "controller")
        assert getattr(args, "controller_command", "serve") == "serve"


def test_units_keep_servers_alive_and_run_the_controller_unprivileged() -> None:
    agent, controller = (unit_entries(name) for name in UNITS)
    assert agent["KillMode"] == ["process"] and agent["Restart"] == ["on-failure"]
    assert agent["StateDirectory"] == ["tunelab-agent"]
    assert "User" not in agent and "DynamicUser" not in agent  # root: NVML, signals, /proc
    for option in ("PrivateDevices", "PrivateTmp", "ProtectKernelModules", "SystemCallFilter",
                   "DevicePolicy", "ProtectClock", "NoNewPrivileges", "ProtectProc"):  # fmt: skip
        assert option not in agent, f"{option} would break NVML, CUDA or outliving servers"
    assert controller["DynamicUser"] == ["yes"]
    assert controller["StateDirectory"] == ["tunelab-controller"]
    assert controller["CapabilityBoundingSet"] == [""]


def env_file(name: str, commented: bool = False) -> dict[str, str]:
    env = {}
    for line in (DEPLOY / "systemd" / name).read_text().splitlines():
        line = line.removeprefix("#") if commented else line
        if re.match(r"^TUNELAB_[A-Z_]+=", line):
            key, value = line.split("=", 1)
            env[key] = value
    return env


@pytest.mark.parametrize(
    ("unit", "env", "module", "prefix"),
    [
        ("tunelab-agent.service", "agent.env", "tunelab.agent.config", "TUNELAB_AGENT_"),
        (
            "tunelab-controller.service",
            "controller.env",
            "tunelab.controller.config",
            "TUNELAB_CONTROLLER_",
        ),
    ],
)
def test_shipped_settings_load_as_the_daemons_config(
    unit: str, env: str, module: str, prefix: str, tmp_path: Path
) -> None:
    """Every TUNELAB_* key the unit and its env file set (the commented ones too) is one the
    daemon knows and every value parses: an unknown key would stop the daemon at start. With its
    token file in place, the non-loopback listen address passes the daemon's auth rule."""
    load_config = importlib.import_module(module).load_config
    specifiers = {"%S": "/var/lib", "%d": f"/run/credentials/{unit}"}
    settings = {}
    for line in unit_entries(unit).get("Environment", []):
        key, value = line.split("=", 1)
        for spec, path in specifiers.items():
            value = value.replace(spec, path)
        settings[key] = value
    load_config(None, {}, env=env_file(env, commented=True))
    config = load_config(None, {}, env={**env_file(env), **settings})
    assert not config.listen.startswith("127."), "the daemon must be reachable from the lab"
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    config = load_config(
        None, {}, env={**env_file(env), **settings, f"{prefix}TOKEN_FILE": str(token)}
    )
    config.auth().check_listen(config.listen)
