"""What a user may type to name work: an experiment's id (``x-…``) or name, an attempt id, a
submission's group (``g-…``), or a spec's own ``name`` — which stands for its latest submission,
as in ``compare``. Every command that takes experiments or a search reads its arguments here."""

from __future__ import annotations

from tunelab.cli.clients import ControllerClient
from tunelab.cli.common import EXIT_NOT_FOUND, CliError
from tunelab.v1 import controller_pb2


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


def group_of(client: ControllerClient, key: str) -> str:
    """The group ``key`` names: a group as given, else a spec's latest submission, else the
    group of the experiment it names (unknown keys come back as typed, for the controller to
    refuse by name)."""
    if key.startswith("g-"):
        return key
    found = spec_names(client, [key])[0]
    if found.startswith("g-"):
        return found
    try:
        request = controller_pb2.GetExperimentRequest(id=found)
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
