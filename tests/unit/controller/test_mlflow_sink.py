"""What an update logs into a run that MLflow already holds
(``tunelab.analysis.mlflow.sink.new_metrics``), and how a tracking URI is shown; no MLflow here
(tests/e2e/test_mlflow_export.py has the server)."""

from __future__ import annotations

from tunelab.analysis.mlflow.sink import new_metrics, safe_uri

POINTS = [("output_throughput", 80.0, 0), ("output_throughput", 90.0, 1)]
EFFECT = [("effect/x/ratio", 1.5, 0), ("tokens_per_joule", 0.2, 0)]


def test_a_new_run_gets_every_metric() -> None:
    logged, series = new_metrics(POINTS + EFFECT, {}, "")
    assert logged == EFFECT + POINTS and series


def test_an_update_logs_only_what_changed() -> None:
    _, series = new_metrics(POINTS + EFFECT, {}, "")
    latest = {"effect/x/ratio": 1.5, "tokens_per_joule": 0.2, "output_throughput": 90.0}
    assert new_metrics(POINTS + EFFECT, latest, series) == ([], series)
    changed = [("effect/x/ratio", 1.2, 0), EFFECT[1]]
    assert new_metrics(POINTS + changed, latest, series) == ([("effect/x/ratio", 1.2, 0)], series)


def test_load_points_are_logged_again_whole_when_one_of_them_changed() -> None:
    _, series = new_metrics(POINTS, {}, "")
    moved = [POINTS[0], ("output_throughput", 91.0, 1)]
    logged, again = new_metrics(moved, {"output_throughput": 90.0}, series)
    assert logged == sorted(moved) and again != series
    # a run exported before the series tag existed: its points are logged once more
    assert new_metrics(POINTS, {"output_throughput": 90.0}, "")[0] == POINTS


def test_a_metric_logged_once_at_a_later_step_counts_as_a_series() -> None:
    late = [("goodput", 3.0, 2)]
    assert new_metrics(late, {"goodput": 3.0}, "")[0] == late


def test_credentials_never_shown() -> None:
    assert safe_uri("https://user:tok@mlflow.x:5000/p") == "https://mlflow.x:5000/p"
    assert safe_uri("file:///tmp/m") == "file:///tmp/m"
