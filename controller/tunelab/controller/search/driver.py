"""The search driver, called once per control-loop tick (inside the scheduling turn): for each
running search, record what finished trials taught, end the search when its budget is spent,
it was cancelled or the strategy has nothing more to try, else queue the next trials.

Trials are ordinary experiments of the search's group, so the scheduler places them on every
matching host with the usual leases, fencing and exactly-once dispatch. Everything the driver
knows is re-read from the store each tick; a restarted controller resumes where it stopped.

Failures teach: a failed trial is recorded with its reason and never proposed again; after an
OOM, every candidate with a larger value along an OOM axis (the others equal) is recorded as
SKIPPED ("implied OOM by trial N") instead of being launched. The OOM axes are
``search.implied_oom`` when given, else the integer axes but those whose larger values relieve
each GPU's memory (parallel sizes, offload: ``space.default_oom_axis``).

When the strategy has nothing more to propose, the top is raced (race.py): the launches of
each round are queued as ordinary trials at the incumbent's load, and the search ends when the
race is settled (a winner, a tie, or its confirm budget spent).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from tunelab.analysis import noise
from tunelab.analysis.evidence import Phase
from tunelab.analysis.slos import slo_text
from tunelab.controller.guard import StepGuard
from tunelab.controller.search import drift, race
from tunelab.controller.search.answer import answer_line
from tunelab.controller.search.backoff import SearchSpecError
from tunelab.controller.search.cost import blocks_of, launch_cost, profile_key, race_components
from tunelab.controller.search.space import STRATEGIES, SearchSpec
from tunelab.controller.search.strategies import Proposal, TrialView, key, strategy_for
from tunelab.controller.search.trials import CLIENT_LIMITED, outcome, trial_label, trial_spec
from tunelab.controller.states import ExperimentState, SearchState, TrialState
from tunelab.controller.store.base import Store, StoreConflict, StoreFenced
from tunelab.controller.store.models import ExperimentRow, FencingToken, selector_key
from tunelab.controller.store.search_models import SearchRow, TrialRow

log = structlog.get_logger(__name__)
OOM_REASONS = {"CUDA_OOM", "OOM_KILLED"}
# failures of the host, not of the configuration: launched again (at most MAX_RETRIES times);
# every other failure (OOM, bad argument, start-up timeout, ...) is recorded and never retried
RETRIED_REASONS = {"ADDRESS_IN_USE"}
MAX_RETRIES = 2
MAX_ASK_ROUNDS = 20  # asks per tick while skipped proposals keep filling the slots


def superseded(t: TrialRow, trials: Sequence[TrialRow]) -> bool:
    """A failure that says nothing of the configuration, launched again since (by the strategy:
    a later launch of the race or a drift launch at a given load is no relaunch of it)."""
    return t.failure_reason in RETRIED_REASONS | CLIENT_LIMITED and any(
        o.number > t.number
        and o.rung == t.rung
        and key(o.params) == key(t.params)
        and race.is_fixed_load(o) == race.is_fixed_load(t)
        for o in trials
    )


def views(trials: Sequence[TrialRow]) -> list[TrialView]:
    """What the strategy sees: every trial but those relaunched after an environment failure
    and the race's launches."""
    return [
        TrialView(t.number, t.params, t.rung, t.state, t.objective, tuple(t.samples))
        for t in trials
        if not superseded(t, trials) and not race.is_fixed_load(t)
    ]


def counted(trials: Sequence[TrialRow]) -> int:
    """Launches the trial budget counts: a relaunch after a failure of the host counts once;
    the race's launches count against ``budget.confirm`` instead."""
    return sum(
        1
        for t in trials
        if t.experiment_id and not superseded(t, trials) and not race.is_fixed_load(t)
    )


def retries(trials: Sequence[TrialRow]) -> list[Proposal]:
    """Trials to launch again: failed for the environment (the port was taken), not yet
    relaunched, fewer than MAX_RETRIES times for these parameters at this rung."""
    out = []
    for t in trials:
        if (
            t.state is not TrialState.FAILED
            or t.failure_reason not in RETRIED_REASONS | CLIENT_LIMITED
            or race.is_fixed_load(t)
        ):
            continue
        if superseded(t, trials):
            continue
        same = [o for o in trials if o.rung == t.rung and key(o.params) == key(t.params)]
        if t.failure_reason in CLIENT_LIMITED:  # measured once more; then it is not evidence
            if sum(1 for o in same if o.failure_reason in CLIENT_LIMITED) <= 1:
                out.append(Proposal(t.params, t.rung))
        elif sum(1 for o in same if o.failure_reason in RETRIED_REASONS) <= MAX_RETRIES:
            out.append(Proposal(t.params, t.rung))
    return out


def implied_oom(
    spec: SearchSpec, params: dict[str, Any], trials: Sequence[TrialRow]
) -> TrialRow | None:
    """The OOM trial that implies ``params`` would run out of memory too, if any: one with a
    smaller value along an OOM axis and every other value equal."""
    axes = spec.oom_axes
    for t in trials:
        if t.failure_reason not in OOM_REASONS:
            continue
        for path in axes:
            others_equal = all(t.params.get(k) == v for k, v in params.items() if k != path)
            if others_equal and params[path] > t.params[path]:
                return t
    return None


def best_trial(spec: SearchSpec, trials: Sequence[TrialRow]) -> TrialRow | None:
    """The answer's trial: the race's best configuration, by its first launch at the race's
    load (race.standings); None when no trial met the SLOs."""
    st = race.standings(spec, trials)
    if st.best is None:
        return None
    return next((t for t in trials if t.number == st.best.trial), None)


def stored_spec(search: SearchRow) -> SearchSpec:
    """The search's spec as stored; SearchSpecError when no controller could run it (written by
    another version, or a strategy this code does not have)."""
    try:
        spec = SearchSpec.from_dict(search.spec)
    except (KeyError, TypeError, ValueError) as exc:
        raise SearchSpecError(f"its stored spec cannot be read ({exc!r})") from None
    if spec.strategy not in STRATEGIES:
        raise SearchSpecError(f"strategy {spec.strategy!r} is not one of {sorted(STRATEGIES)}")
    return spec


class SearchDriver:
    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock
        self.guard = StepGuard(store, "search", clock)

    def tick(self, fence: FencingToken | None = None) -> int:
        """Advance every running search (each step guarded: guard.py); returns how many trials
        were queued. ``fence`` is the scheduling turn this step runs in (the control loop's):
        every write of the step checks it in its transaction, so a controller that lost the
        turn writes nothing. With none given (tools, tests), the step takes the turn itself, or
        does nothing while another controller holds it."""
        if fence is None:
            with self._store.scheduling_pass() as turn:
                return 0 if turn is None else self.tick(turn)
        running = {s.group: s for s in self._store.running_searches()}
        return self.guard.each(list(running), lambda group: self._step(running[group], fence))

    def _step(self, search: SearchRow, fence: FencingToken) -> int:
        try:
            return self.advance(search, fence)
        except StoreFenced:
            raise  # the turn is lost: nothing more of this step is written
        except StoreConflict as exc:  # another controller moved it: the next tick re-reads
            log.info("search_conflict", group=search.group, error=str(exc))
        except SearchSpecError as exc:  # the search itself cannot go on, anywhere
            log.warning("search_spec_failed", group=search.group, error=str(exc))
            self._store.finish_search(
                search.group,
                SearchState.FAILED,
                f"the search could not go on: {exc}",
                self._clock(),
                fence,
            )
        return 0

    def advance(self, search: SearchRow, fence: FencingToken) -> int:
        spec = stored_spec(search)
        trials = self._collect(spec, self._store.search_trials(search.group), fence)
        now = self._clock()
        running = [t for t in trials if t.state is TrialState.RUNNING]
        if search.cancel_requested:
            self._stop_running(running, "search cancelled", fence)
            self._finish(search, spec, trials, SearchState.CANCELLED, "cancelled", fence)
            return 0
        if spec.max_seconds and now - search.submitted_at >= spec.max_seconds:
            self._stop_running(running, "search duration budget spent", fence)
            why = f"duration budget {spec.max_seconds:g}s spent"
            self._finish(search, spec, trials, None, why, fence)
            return 0
        launched = counted(trials)
        slots = min(spec.parallel - len(running), spec.max_trials - launched)
        exhausted = False
        new: list[TrialRow] = []
        experiments: list[ExperimentRow] = []
        strategy = strategy_for(spec.strategy)
        number = max((t.number for t in trials), default=0)
        for proposal in retries(trials)[: max(0, slots)]:
            number += 1
            trial, experiment = self._trial(search, spec, trials, proposal, number)
            trial.details["message"] = (
                "measured again: the load generator was short of CPU last time"
                if any(
                    o.failure_reason in CLIENT_LIMITED
                    for o in trials
                    if key(o.params) == key(proposal.params) and o.rung == proposal.rung
                )
                else "launched again: the last try failed for the host"
            )
            new.append(trial)
            if experiment is not None:
                experiments.append(experiment)
                slots -= 1
        for proposal in drift.pending(spec, trials, drift.START)[: max(0, slots)]:
            number += 1  # the default again at its load, at the search's start
            trial, experiment = self._trial(search, spec, trials, proposal, number)
            new.append(trial)
            if experiment is not None:
                experiments.append(experiment)
                slots -= 1
        for _ in range(MAX_ASK_ROUNDS):
            if slots <= 0:
                break
            answer = strategy.ask(spec, views([*trials, *new]), slots)
            exhausted = answer.exhausted
            for proposal in answer.proposals:
                number += 1
                trial, experiment = self._trial(search, spec, [*trials, *new], proposal, number)
                new.append(trial)
                if experiment is not None:
                    experiments.append(experiment)
                    slots -= 1
            if exhausted or not answer.proposals or all(t.experiment_id for t in new):
                break
        if new:
            self._store.add_trials(new, experiments, fence)
            log.info("search_trials_queued", group=search.group, count=len(experiments))
        all_trials = [*trials, *new]
        still = [t for t in all_trials if t.state is TrialState.RUNNING]
        budget_spent = counted(all_trials) >= spec.max_trials
        if all(race.is_fixed_load(t) for t in still) and (exhausted or budget_spent):
            standing = race.standings(spec, all_trials)
            if not standing.settled:  # race the top: this round's launches, as slots free up
                return len(experiments) + self._race(
                    search, spec, all_trials, standing.pending, still, fence
                )
            end = drift.pending(spec, all_trials, drift.END)
            if end or drift.running(all_trials):  # the default again, at the search's end
                return len(experiments) + self._race(search, spec, all_trials, end, still, fence)
            why = (
                f"budget of {spec.max_trials} trials spent"
                if budget_spent and not exhausted
                else "every candidate tried"
            )
            self._finish(search, spec, all_trials, None, why, fence)
        return len(experiments)

    def _race(
        self,
        search: SearchRow,
        spec: SearchSpec,
        trials: Sequence[TrialRow],
        pending: Sequence[Proposal],
        running: Sequence[TrialRow],
        fence: FencingToken,
    ) -> int:
        """Queue launches at a given load (the race's next, or the default's drift launches at
        the end), at most ``parallel`` in flight."""
        number = max((t.number for t in trials), default=0)
        new: list[TrialRow] = []
        experiments: list[ExperimentRow] = []
        for proposal in pending[: max(0, spec.parallel - len(running))]:
            number += 1
            trial, experiment = self._trial(search, spec, trials, proposal, number)
            new.append(trial)
            if experiment is not None:
                experiments.append(experiment)
        if new:
            self._store.add_trials(new, experiments, fence)
            log.info("search_race_queued", group=search.group, round=new[0].race_round,
                     phase=new[0].phase, count=len(experiments))  # fmt: skip
        return len(experiments)

    def _trial(
        self,
        search: SearchRow,
        spec: SearchSpec,
        trials: Sequence[TrialRow],
        proposal: Proposal,
        number: int,
    ) -> tuple[TrialRow, ExperimentRow | None]:
        now = self._clock()
        row = TrialRow(
            search.group, number, proposal.params, TrialState.RUNNING, now, proposal.rung
        )
        given = bool(proposal.race or proposal.drift)  # a launch at a given load
        cause = None if given else implied_oom(spec, proposal.params, trials)
        if cause is not None:
            row.state, row.finished_at = TrialState.SKIPPED, now
            row.failure_reason = "IMPLIED_OOM"
            row.details = {"message": f"implied OOM by trial {cause.number}"}
            return row, None
        doc, issues = trial_spec(search.base, spec, proposal.params, proposal.rung, proposal.load)
        if issues:
            row.state, row.finished_at = TrialState.SKIPPED, now
            row.failure_reason = "BAD_ARGUMENT"
            row.details = {"message": "; ".join(str(i) for i in issues)}
            return row, None
        experiment = ExperimentRow(
            id=f"x-{secrets.token_hex(8)}",
            group=search.group,
            name=f"{search.name}/t{number}",
            state=ExperimentState.QUEUED,
            spec=doc,
            priority=doc["priority"],
            varied={p: str(v) for p, v in proposal.params.items()},
            selector_key=selector_key(doc["host"]),
            gpus_needed=int(doc["host"].get("gpus") or 0),
            max_attempts=doc["max_attempts"],
            submitted_at=now,
        )
        row.experiment_id = experiment.id
        row.details = {"label": trial_label(proposal.params)}
        row.race_round = proposal.race
        if proposal.drift:
            row.phase = Phase.DRIFT_START if proposal.drift == "start" else Phase.DRIFT_END
        elif proposal.effect:
            row.phase = Phase.EFFECT
        elif proposal.race:
            row.phase = Phase.RACE
        return row, experiment

    def _collect(
        self, spec: SearchSpec, trials: list[TrialRow], fence: FencingToken
    ) -> list[TrialRow]:
        """Record the outcome of every trial whose experiment has ended."""
        running = [t for t in trials if t.state is TrialState.RUNNING and t.experiment_id]
        if not running:
            return trials
        experiments = self._store.get_experiments([t.experiment_id or "" for t in running])
        ended = [t for t in running if t.experiment_id in experiments]
        ended = [t for t in ended if experiments[t.experiment_id or ""].state.is_terminal()]
        attempts = self._store.attempts_for_many([t.experiment_id or "" for t in ended])
        for t in ended:
            exp = experiments[t.experiment_id or ""]
            found = outcome(spec, exp, attempts[exp.id], fixed_load=race.is_fixed_load(t))
            t.state, t.failure_reason = found.state, found.failure_reason
            spent = launch_cost(attempts[exp.id], self._store.events_for(exp.id))
            t.details = {**t.details, **found.details, **spent}
            t.load, t.slo_ratios, t.host = found.load, found.slo_ratios, found.host
            t.gpu_seconds = found.gpu_seconds
            if found.objective is not None and spec.objective == "output_throughput":
                last = attempts[exp.id][-1]
                measured = blocks_of(self._store.timeline(last.id), t.details.get("point_index"))
                if len(measured) >= 2:  # within-launch replicates (the variance components)
                    t.details["blocks"] = measured
            t.finished_at = self._clock()
            t.samples = list(found.samples)  # the answer points of this one launch
            t.objective = found.objective  # this launch's value (the launch is the unit)
            self._store.finish_trial(t, fence)
        return trials

    def _stop_running(self, running: Sequence[TrialRow], why: str, fence: FencingToken) -> None:
        for t in running:
            if t.experiment_id is None:
                continue
            exp = self._store.get_experiment(t.experiment_id)
            if exp is not None and exp.state is ExperimentState.QUEUED:
                try:
                    self._store.set_experiment_state(
                        exp.id,
                        ExperimentState.CANCELLED,
                        [ExperimentState.QUEUED],
                        finished_at=self._clock(),
                        message=why,
                        cancel_requested=True,
                    )
                except StoreConflict:
                    self._store.request_cancel(exp.id)
            elif exp is not None and exp.state is ExperimentState.RUNNING:
                self._store.request_cancel(exp.id)
            t.state, t.failure_reason, t.finished_at = (
                TrialState.CANCELLED,
                "CANCELLED",
                self._clock(),
            )
            t.details = {**t.details, "message": why}
            self._store.finish_trial(t, fence)

    def _finish(
        self,
        search: SearchRow,
        spec: SearchSpec,
        trials: Sequence[TrialRow],
        state: SearchState | None,
        why: str,
        fence: FencingToken,
    ) -> None:
        standing = race.standings(spec, trials)
        done = sum(1 for t in trials if t.state in (TrialState.DONE, TrialState.FAILED))
        if standing.best is not None:
            cancelled = state is SearchState.CANCELLED
            summary = f"{why}; {answer_line(spec, standing, cancelled)}"
        else:
            failed = sum(1 for t in trials if t.state is TrialState.FAILED)
            summary = (
                f"{why}; no feasible point: none of {done} finished trials met the SLOs "
                f"{slo_text(spec.slo)}" + (f" ({failed} failed)" if failed else "")
            )
        target = state or (SearchState.DONE if standing.best is not None else SearchState.FAILED)
        self._store.finish_search(search.group, target, summary, self._clock(), fence)
        self._remember_noise(search, standing, trials)
        log.info("search_finished", group=search.group, state=target, message=summary)

    def _remember_noise(
        self, search: SearchRow, standing: race.Standings, trials: Sequence[TrialRow]
    ) -> None:
        """Pool the race's variance components into the noise profile of its host class,
        engine and model (after the fenced finish: only the controller that finished it)."""
        found = race_components(standing, trials)
        key = profile_key(search.base, trials)
        if found is None or key is None:
            return
        pooled = noise.remember(self._store.noise_profile(key), key, found)
        if pooled is not None:
            self._store.put_noise_profile(pooled, self._clock())
