"""Runtimes learned from the Kueue Workloads that finished: what a gang without a declared runtime is expected to take.

A Workload that finished (condition ``Finished`` True) ran from its admission
(the ``Admitted`` condition's ``lastTransitionTime``, else ``QuotaReserved``'s:
the job was unsuspended then) to the ``Finished`` condition's
``lastTransitionTime``; it counts for its ClusterQueue
(``status.admission.clusterQueue``) and its GPUs (the device resources of
``status.admission.podSetAssignments[].resourceUsage``, else the pod sets'
count times their pods' requests). ``quota.runtimes.RuntimeLearner`` keeps the
median per queue and gang-size class.

``LearnedRuntimes`` keeps one learner beside a store: at a cold start it
learns from every finished Workload the state already holds, then from each
Workload the feed shows finishing (``state.watchers``), one change at a time,
so no request ever scans the Workloads. A Workload seen finished before is not
counted again when it changes. Volcano queues learn nothing: the cluster
state holds no finished Volcano jobs (the live feed lists running and
pending pods only), so a Volcano gang's runtime is only what it declares.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from kilter.model import codec
from kilter.model.errors import InputError
from kilter.model.kueue import KUEUE_GROUP, Workload, true_condition
from kilter.model.quantity import to_count
from kilter.quota.policy import parse_time
from kilter.quota.runtimes import WINDOW, RuntimeLearner
from kilter.state.events import Stored
from kilter.state.store import ClusterStore
from kilter.topology import pod_gpus

__all__ = ["FinishedRun", "LearnedRuntimes", "finished_run", "learner_of"]

log = logging.getLogger("kilter.gangs")

FinishedRun = tuple[str, int, float]  # (ClusterQueue, GPUs, seconds it ran)


def finished_run(wl: Workload, resources: Collection[str]) -> FinishedRun | None:
    """(ClusterQueue, GPUs, runtime in seconds) of a finished Workload; None for one that has not finished, ran
    no time, asked no GPU of ``resources``, or whose times or amounts do not read."""
    status = wl.status
    if not status.condition("Finished") or status.admission is None or not status.admission.cluster_queue:
        return None
    started = next(
        (
            c.last_transition_time
            for kind in ("Admitted", "QuotaReserved")
            for c in status.conditions
            if c.type == kind and c.status == "True"
        ),
        "",
    )
    ended = status.since("Finished")
    where = f"Workload {wl.metadata.namespace}/{wl.metadata.name}"
    try:
        runtime = parse_time(ended, path=where) - parse_time(started, path=where) if started and ended else 0.0
        gpus = _gpus(wl, resources, where)
    except InputError:
        return None
    if runtime <= 0 or gpus <= 0:
        return None
    return status.admission.cluster_queue, gpus, runtime


def _gpus(wl: Workload, resources: Collection[str], where: str) -> int:
    assert wl.status.admission is not None
    used = [
        to_count(raw, path=where)
        for psa in wl.status.admission.pod_set_assignments
        for resource, raw in psa.resource_usage.items()
        if resource in resources
    ]
    if used:
        return sum(used)
    total = 0
    for ps in wl.spec.pod_sets:
        for r in sorted(resources):
            each = pod_gpus.count(ps.template.spec, r, path=where)
            if isinstance(each, pod_gpus.Unreadable):
                raise each.error()  # a run whose size is unknown teaches nothing
            total += ps.count * each
    return total


def learner_of(workloads: Iterable[Workload], resources: Collection[str], *, window: int = WINDOW) -> RuntimeLearner:
    """A learner of every finished Workload among ``workloads`` (what a command reads once), keeping the last
    ``window`` of each queue and size class."""
    learner = RuntimeLearner(window)
    for wl in workloads:
        run = finished_run(wl, resources)
        if run is not None:
            learner.observe(*run)
    return learner


class LearnedRuntimes:
    """A ``RuntimeLearner`` kept up to date with the store's Workloads (see the module docstring)."""

    def __init__(self, store: ClusterStore, *, window: int = WINDOW) -> None:
        self.resources = frozenset(store.catalog.device_resources)
        self.window = window
        self.learner = learner_of(store.state().workloads, self.resources, window=window)
        self.observed = len(self.learner)
        store.watchers.add(KUEUE_GROUP, "Workload", self._changed)

    def estimate(self, cluster_queue: str, gpus: int) -> float | None:
        """Seconds a gang of ``gpus`` GPUs in ``cluster_queue`` is expected to run; None with no history."""
        return self.learner.estimate(cluster_queue, gpus)

    def _changed(self, old: Stored | None, new: Stored | None) -> None:
        if not isinstance(new, Mapping) or not _finished(new) or (isinstance(old, Mapping) and _finished(old)):
            return
        meta = new.get("metadata")
        where = f"Workload {meta.get('namespace')}/{meta.get('name')}" if isinstance(meta, Mapping) else "Workload"
        try:
            run = finished_run(codec.convert(new, Workload, path=where), self.resources)
        except InputError as exc:
            log.info("%s: not learned from: %s", where, exc)
            return
        if run is not None:
            self.learner.observe(*run)
            self.observed += 1


def _finished(obj: Mapping[str, Any]) -> bool:
    """The raw Workload has ``Finished`` True (read without converting it: most changes are not finishes)."""
    return true_condition(obj.get("status"), "Finished") is not None
