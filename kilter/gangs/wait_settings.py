"""How long a preferred gang may wait for fewer domains: the split-wait settings of its job, queue and cohorts.

``kilter.dev/split-wait`` (the factor; ``0`` turns waiting off) and
``kilter.dev/split-wait-max`` (the cap, a duration) are read, each on its
own, from the first that sets it of: the job (its Workload or PodGroup, its
pod template or pod), its ClusterQueue, the nearest Cohort up the tree, and
the flags of ``kilter serve`` (``--split-wait``, ``--split-wait-max``; the
split slowdown comes from ``--split-slowdown`` alone). Defaults are
``topology.split_wait``'s.

A bad value on a ClusterQueue or Cohort must not stop placing: it is skipped
(the queue's parent, else the default, decides) and named in ``problems``
(``/readyz`` lists them; ``gangs.waits`` logs each once). A bad value on a job is the job's own to fix and
refuses its gang (``InputError``, answered in the protocol's error field).

A gang's ClusterQueue: a Workload's admission, else its LocalQueue's; a pod's
``kueue.x-k8s.io/queue-name`` LocalQueue's; a Volcano PodGroup's Queue's bound
ClusterQueue (its ``kilter.dev/cluster-queue`` annotation, else the
ClusterQueue of the same name), as ``quota.bound_queues`` binds them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kilter.model.annotations import CLUSTER_QUEUE
from kilter.model.kueue import ClusterQueue, Cohort, ResourceFlavor
from kilter.state.cluster import ClusterState
from kilter.topology.split_wait import SplitWait, parse_split_wait, queue_settings, resolve

__all__ = ["QueueWaitRules"]


@dataclass(frozen=True)
class QueueWaitRules:
    """The split-wait rule of every ClusterQueue of one state, and the queue bindings a gang's queue is found by."""

    defaults: SplitWait
    rules: Mapping[str, SplitWait]  # ClusterQueue -> its rule, cohorts and defaults filled in
    local_queues: Mapping[tuple[str, str], str]  # (namespace, LocalQueue) -> ClusterQueue
    volcano_queues: Mapping[str, str]  # Volcano Queue -> the ClusterQueue it is bound to
    problems: tuple[str, ...] = ()

    @classmethod
    def build(
        cls, state: ClusterState, defaults: SplitWait, *, extra: Iterable[ClusterQueue | Cohort | ResourceFlavor] = ()
    ) -> QueueWaitRules:
        """The settings ``state`` gives (``extra``: queues of ``kilter serve --queues`` the state lacks)."""
        cqs = {q.metadata.name: q for q in extra if isinstance(q, ClusterQueue)}
        cqs.update((q.metadata.name, q) for q in state.cluster_queues)
        cohorts = {c.metadata.name: c for c in extra if isinstance(c, Cohort)}
        cohorts.update((c.metadata.name, c) for c in state.cohorts)
        resolved = queue_settings(cqs.values(), cohorts.values())
        rules = {name: resolve(defaults, [setting]) for name, setting in resolved.settings.items()}
        local = {(q.metadata.namespace, q.metadata.name): q.spec.cluster_queue for q in state.local_queues}
        volcano = {}
        for queue in state.volcano_queues:
            bound = queue.metadata.annotations.get(CLUSTER_QUEUE, queue.metadata.name)
            if bound in cqs:
                volcano[queue.metadata.name] = bound
        return cls(defaults, rules, local, volcano, tuple(p.line for p in resolved.problems))

    def rule(self, cluster_queue: str | None) -> SplitWait:
        """The rule of a ClusterQueue's gangs (the defaults for a queue the state does not hold, or none)."""
        return self.rules.get(cluster_queue or "", self.defaults)

    def for_job(self, cluster_queue: str | None, annotations: Mapping[str, str], *, path: str) -> SplitWait:
        """The rule of one job: its own annotations over its queue's; ``InputError`` for a bad value of its own."""
        return resolve(self.rule(cluster_queue), [parse_split_wait(annotations, path=path)])

    def cluster_queue_of(self, namespace: str, local_queue: str | None) -> str | None:
        """The ClusterQueue a LocalQueue points at (None: no such LocalQueue in the state)."""
        return self.local_queues.get((namespace, local_queue)) if local_queue else None
