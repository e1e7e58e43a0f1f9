"""What a user may type to name work, read in one place for every command: an experiment's id
(``x-…``) or name, a submission's group (``g-…``), a spec's own ``name`` — which stands for its
latest submission — or a watch's name. A name and the group it stands for mean the same thing to
every command (``wait``, ``report``, ``show``, ``compare``, ``export``, ``cancel``, ``search``,
``watch``): ``target`` says what one word names, and the commands act on that."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tunelab.cli.clients import ControllerClient
from tunelab.cli.common import EXIT_NOT_FOUND, CliError
from tunelab.v1 import controller_pb2


@dataclass(frozen=True)
class Target:
    """What one word names: a group (a submission, a search or a watch's occurrence) or one
    experiment; ``watch`` is set when the word is a watch's name."""

    key: str
    group: str = ""  # the submission group the word stands for; "" for one experiment
    experiment: str = ""  # the experiment's id when the word names one experiment
    search: dict[str, Any] | None = None  # the search document when the group is a search
    watch: str = ""  # the watch's name when the word is one

    @property
    def shown(self) -> str:
        """How the output names it: ``sim-search (g-…)``, or the word as typed."""
        return f"{self.key} ({self.group})" if self.group and self.group != self.key else self.key


def spec_names(client: ControllerClient, keys: list[str]) -> list[str]:
    """A spec's own ``name`` (``sim-ablation``) stands for its latest submission's group.

    Experiments are named ``<spec name>/<variant>#<repeat>`` (a search's trials
    ``<spec name>/t<N>``); ids, groups and those full names pass through unchanged.
    """
    if all(k.startswith(("x-", "g-")) for k in keys):
        return keys
    request = controller_pb2.ListExperimentsRequest(limit=100_000)
    listed = client.list_experiments(request).experiments
    names = {e.name for e in listed}
    out = []
    for key in keys:
        family = [e for e in listed if e.name.split("/")[0].split("#")[0] == key]
        if key in names or not family:
            out.append(key)  # an experiment's own name, or unknown: the controller answers
        else:
            out.append(max(family, key=lambda e: e.submitted_at).group)
    return out


def get_search(client: ControllerClient, group: str) -> dict[str, Any] | None:
    """The search document, or None when ``group`` is no search (an ordinary group)."""
    response = client.get_search(group)
    if response is None:
        return None
    found: dict[str, Any] = json.loads(response.search_json)
    return found


def target(client: ControllerClient, key: str) -> Target:
    """What ``key`` names. Unknown words come back as typed (an experiment key), for the
    controller to refuse by name."""
    watch = "" if key.startswith(("x-", "g-")) else _watch_named(client, key)
    found = spec_names(client, [key])[0]
    if found.startswith("g-"):
        return Target(key, group=found, search=get_search(client, found), watch=watch)
    return Target(key, experiment=found, watch=watch)


def group_of(client: ControllerClient, key: str) -> str:
    """The group ``key`` names: a group as given, else a spec's latest submission, else the
    group of the experiment it names (unknown keys come back as typed, for the controller to
    refuse by name)."""
    if key.startswith("g-"):
        return key
    named = target(client, key)
    if named.group:
        return named.group
    try:
        request = controller_pb2.GetExperimentRequest(id=named.experiment)
        return client.get_experiment(request).experiment.group or key
    except CliError as exc:
        if exc.code != EXIT_NOT_FOUND:
            raise
        return key  # not an experiment either: the caller's lookup names it


def resolve(client: ControllerClient, keys: list[str]) -> tuple[list[str], str]:
    """Experiment ids for ids, names, groups (``g-…``) and spec names, and the group when they
    are all one."""
    ids: list[str] = []
    groups: set[str] = set()
    for key in spec_names(client, keys):
        if key.startswith("g-"):
            request = controller_pb2.ListExperimentsRequest(group=key, limit=100_000)
            found = client.list_experiments(request)
            if found.experiments:
                ids.extend(e.id for e in found.experiments)
                groups.add(key)
                continue
        get = controller_pb2.GetExperimentRequest(id=key)
        experiment = client.get_experiment(get).experiment
        ids.append(experiment.id)
        groups.add(experiment.group)
    return list(dict.fromkeys(ids)), (groups.pop() if len(groups) == 1 else "")


def _watch_named(client: ControllerClient, name: str) -> str:
    return name if client.find_watch(name) is not None else ""


def watch_of(client: ControllerClient, key: str) -> str:
    """The watch ``key`` names: its name, one of its occurrences' groups, an experiment of one,
    or a spec name whose latest submission is an occurrence. Not found: CliError (exit 4)."""
    if not key.startswith(("x-", "g-")) and _watch_named(client, key):
        return key
    group = group_of(client, key)
    for summary in json.loads(client.list_watches().watches_json):
        doc = json.loads(client.get_watch(summary["name"]).watch_json)
        if any(o["group"] == group for o in doc["occurrences"]):
            return str(summary["name"])
    raise CliError(
        f"no watch {key!r} (tunelab watch ls lists them; an occurrence's g-... or one of its "
        "experiments names its watch too)",
        EXIT_NOT_FOUND,
    )
