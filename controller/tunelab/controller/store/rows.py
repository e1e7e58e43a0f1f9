"""Database rows ↔ the plain records of models.py, the same for both engines (a row is
sqlite3.Row or psycopg's dict row: both are read by column name)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from tunelab.controller.states import AttemptState, ExperimentState, HostState
from tunelab.controller.store.models import AttemptRow, ExperimentRow, HostRow
from tunelab.controller.store.secrets import HostSecrets

JSON_FIELDS = {
    "labels": "labels_json",
    "gpus": "gpus_json",
    "spec": "spec_json",
    "varied": "varied_json",
    "avoid_hosts": "avoid_hosts_json",
    "result": "result_json",
    "gpu_summary": "gpu_summary_json",
    "progress": "progress_json",
    "provenance": "provenance_json",
}
RENAMES = {"group": "grp"}


def column_values(fields: Mapping[str, object]) -> dict[str, Any]:
    """Record field names and values → column names and stored values."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if key in JSON_FIELDS:
            # a spec keeps its order: server flags are passed, and shown, as the user wrote them
            text = None if value is None else json.dumps(value, sort_keys=key != "spec")
            out[JSON_FIELDS[key]] = text
        elif isinstance(value, bool):
            out[RENAMES.get(key, key)] = int(value)
        elif hasattr(value, "value") and isinstance(getattr(value, "value", None), str):
            out[RENAMES.get(key, key)] = value.value
        else:
            out[RENAMES.get(key, key)] = value
    return out


def chunks(items: list[str], size: int = 500) -> Iterator[list[str]]:
    """Bounded IN lists (SQLite allows 32,766 parameters; smaller chunks plan better)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def loads(text: str | None, default: Any) -> Any:
    return default if text is None else json.loads(text)


def host_of(row: Any, secrets: HostSecrets) -> HostRow:
    return HostRow(
        name=row["name"],
        address=row["address"],
        labels=loads(row["labels_json"], {}),
        token=secrets.get(row["name"]),
        metrics_url=row["metrics_url"],
        state=HostState(row["state"]),
        state_reason=row["state_reason"],
        drain=bool(row["drain"]),
        quarantined=bool(row["quarantined"]),
        gpu_count=row["gpu_count"],
        gpus=loads(row["gpus_json"], []),
        last_seen=row["last_seen"],
        agent_instance_id=row["agent_instance_id"],
        agent_version=row["agent_version"],
        failures=row["failures"],
        added_at=row["added_at"],
    )


def experiment_of(row: Any) -> ExperimentRow:
    """From a row of experiments_shown, the view every experiment read goes through."""
    wait = row["queue_wait"] or ""
    return ExperimentRow(
        seq=row["seq"],
        id=row["id"],
        group=row["grp"],
        name=row["name"],
        state=ExperimentState(row["state"]),
        priority=row["priority"],
        spec=loads(row["spec_json"], {}),
        varied=loads(row["varied_json"], {}),
        selector_key=row["selector_key"],
        gpus_needed=row["gpus_needed"],
        repeat_index=row["repeat_index"],
        max_attempts=row["max_attempts"],
        avoid_hosts=loads(row["avoid_hosts_json"], []),
        submitted_at=row["submitted_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        message=shown(row["message"], wait),
        cancel_requested=bool(row["cancel_requested"]),
    )


def shown(own: str, wait: str) -> str:
    """A queued experiment's own message (a retry's), then why its selector's queue waits."""
    return f"{own}; {wait}" if own and wait else own or wait


def attempt_of(row: Any) -> AttemptRow:
    return AttemptRow(
        id=row["id"],
        experiment_id=row["experiment_id"],
        number=row["number"],
        host=row["host"],
        gpus=loads(row["gpus_json"], []),
        state=AttemptState(row["state"]),
        prev_state=AttemptState(row["prev_state"]) if row["prev_state"] else None,
        created_at=row["created_at"],
        dispatched_at=row["dispatched_at"],
        acked_at=row["acked_at"],
        finished_at=row["finished_at"],
        unknown_since=row["unknown_since"],
        message=row["message"],
        result=loads(row["result_json"], None),
        gpu_summary=loads(row["gpu_summary_json"], None),
        progress=loads(row["progress_json"], None),
        agent_instance_id=row["agent_instance_id"],
        provenance=loads(row["provenance_json"], None),
        failure_reason=row["failure_reason"],
        failure_line=row["failure_line"],
    )
