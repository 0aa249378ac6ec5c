"""A gang pod's rank: read from the index its controller puts on it, and found among the gang's pod sets.

A plan lists each pod set's nodes in rank order (``topology.plan``: pod i of
a pod set is rank i); this module says which rank of which pod set a pod
is, so that the gang book holds it to that rank's slot. The indices are
read as upstream writes them (the file each key was checked in, in
brackets); the first source a pod carries wins:

1. JobSet — ``jobset.sigs.k8s.io/job-index`` (the Job's index within its
   replicated job; label, else annotation) and the pod's
   ``batch.kubernetes.io/job-completion-index`` within its Job. The pod set
   is the replicated job ``jobset.sigs.k8s.io/replicatedjob-name`` (Kueue
   names a JobSet's pod sets after them), and rank = job index x pods per
   Job + completion index. JobSet puts no parallelism on a pod, so pods per
   Job = the pod set's count / ``jobset.sigs.k8s.io/replicatedjob-replicas``,
   the division Kueue's TopologyUngater makes (``readRanksForLabels``:
   podSetSize / subGroupCount). [kubernetes-sigs/jobset
   api/jobset/v1alpha2/jobset_types.go; kubernetes-sigs/kueue
   pkg/controller/tas/topology_ungater.go]
2. Kubeflow Training Operator — ``training.kubeflow.org/replica-index``,
   counted within the replica type ``training.kubeflow.org/replica-type``,
   which the operator writes in lower case (``strings.ToLower(rtype)``);
   the pod set is the one named after the type, as Kueue and
   ``model.jobs`` name them. [kubeflow/training-operator
   pkg/apis/kubeflow.org/v1/common_types.go, pkg/controller.v1/common/pod.go]
3. LeaderWorkerSet — ``leaderworkerset.sigs.k8s.io/worker-index``: 0 for the
   leader, 1..size-1 for the workers, so it counts across the group's pod
   sets in order (leader first). [kubernetes-sigs/lws
   api/leaderworkerset/v1/leaderworkerset_types.go]
4. Kueue pod groups — the label ``kueue.x-k8s.io/pod-group-pod-index``, or
   else the label that the annotation ``kueue.x-k8s.io/pod-group-pod-index-label``
   names (Kueue copies the one into the other only with TAS on).
   [kubernetes-sigs/kueue apis/kueue/v1beta2/topology_types.go]
5. batch Job — ``batch.kubernetes.io/job-completion-index``: the
   annotation, else the label of that name (Kubernetes 1.28 and later set
   both). [kubernetes/api batch/v1/types.go: JobCompletionIndexAnnotation]

Which pod set: the one Kueue's ``kueue.x-k8s.io/podset`` label names; else,
for an index counted within a group (replicated job, replica type), the pod
set named after the group (``NAME``, or ``NAME-<shape>`` as kilter names the
pod sets it builds) and no other — a master's index 0 is not a worker's; for
an index that counts across pod sets, the pod set whose range holds it; for
any other, the gang's only pod set of the pod's GPU count. Kueue's
``kueue.x-k8s.io/pod-index-offset`` annotation is subtracted from an index
within a pod set (Kueue puts 1 on the workers beside an MPI launcher that
also works).

A value that is no whole number ("", "x", "-1", "+2", over nine digits),
a rank past its pod set, a pod set of another GPU count or none that fits:
the pod is *unindexed* — it takes any free slot of its shape, as pods
without an index do — and the reason says why; nothing is refused and
nothing raises for what a pod carries.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from kilter.model.core_v1 import Pod
from kilter.state.store import ClusterStore
from kilter.topology.fleet import ENDED_PHASES

__all__ = [
    "JOBSET_JOB_INDEX",
    "JOBSET_REPLICAS",
    "JOBSET_REPLICATED_JOB",
    "JOB_COMPLETION_INDEX",
    "KUBEFLOW_REPLICA_INDEX",
    "KUBEFLOW_REPLICA_TYPE",
    "KUEUE_POD_GROUP_INDEX",
    "KUEUE_POD_GROUP_INDEX_LABEL",
    "KUEUE_POD_INDEX_OFFSET",
    "KUEUE_POD_SET",
    "LWS_WORKER_INDEX",
    "ROLE_ORDER",
    "Place",
    "RankLabel",
    "Shape",
    "Taken",
    "group_of",
    "is_gone",
    "place_of",
    "read_index",
]

JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
KUBEFLOW_REPLICA_INDEX = "training.kubeflow.org/replica-index"
KUBEFLOW_REPLICA_TYPE = "training.kubeflow.org/replica-type"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
KUEUE_POD_GROUP_INDEX = "kueue.x-k8s.io/pod-group-pod-index"
KUEUE_POD_GROUP_INDEX_LABEL = "kueue.x-k8s.io/pod-group-pod-index-label"
KUEUE_POD_SET = "kueue.x-k8s.io/podset"
KUEUE_POD_INDEX_OFFSET = "kueue.x-k8s.io/pod-index-offset"

ROLE_ORDER = ("master", "chief", "launcher", "worker")
"""Replica types in the order kilter lists a Kubeflow gang's pod sets when it builds them from the pods: the
role that holds rank 0 and the rendezvous (PyTorch's master, TF's chief, MPI's launcher) first, then the
workers, then every other type (parameter servers, evaluators) by name — as ``model.jobs`` orders Master
before Worker and Launcher before Worker."""

_NUMBER = re.compile(r"[0-9]{1,9}")


@dataclass(frozen=True)
class RankLabel:
    """What a pod's labels say of its place: its index, and what the index counts within.

    ``group`` names the pod set the index counts in ("" when the pod does
    not say: its own); ``job``/``jobs`` are a JobSet pod's Job index and its
    replicated job's Job count (None when absent); ``across`` marks an index
    that counts across the gang's pod sets (a LeaderWorkerSet's worker index).
    """

    key: str
    index: int
    group: str = ""
    job: int | None = None
    jobs: int | None = None
    across: bool = False


class Shape(NamedTuple):
    """One pod set of a gang as ranks see it: its name, how many pods it has in all, and GPUs per pod. A named
    tuple: a repair decision compares the gang's shapes with those each member's rank was read in, 512 times."""

    name: str
    pods: int
    gpus: int


class Place(NamedTuple):
    """A rank of a pod set: the slot a pod with this index is held to. A named tuple: hashed and compared for
    every member of a gang on each decision, where a frozen dataclass's Python-level hash cost a 512-pod repair
    ~0.5 ms."""

    pod_set: str
    rank: int

    def __str__(self) -> str:
        return f"rank {self.rank} of pod set {self.pod_set}"


class Taken(NamedTuple):
    """A bound pod of a ranked gang, and the rank it holds (a named tuple: a repair makes one per survivor)."""

    place: Place
    node: str
    gpus: int
    uid: str


def _get(pod: Pod, key: str) -> str | None:
    """A key's value, the label first, else the annotation of that name (controllers set one or both)."""
    meta = pod.metadata
    value = meta.labels.get(key)
    return value if value is not None else meta.annotations.get(key)


def _number(key: str, raw: str) -> int | str:
    """The whole number ``raw`` spells, or why it is none."""
    if _NUMBER.fullmatch(raw):
        return int(raw)
    return f"{key} is {raw[:40]!r}, not a whole number"


def group_of(pod: Pod) -> str:
    """The group a pod's index counts within, by its labels alone: replicated job, replica type, else ""."""
    if _get(pod, JOBSET_JOB_INDEX) is not None:
        return _get(pod, JOBSET_REPLICATED_JOB) or ""
    if KUBEFLOW_REPLICA_INDEX in pod.metadata.labels:
        return pod.metadata.labels.get(KUBEFLOW_REPLICA_TYPE, "").lower()
    return ""


def read_index(pod: Pod) -> RankLabel | str | None:
    """The pod's index by the first source it carries (module docstring); None for none, or why it is unusable."""
    labels, notes = pod.metadata.labels, pod.metadata.annotations
    job_raw = _get(pod, JOBSET_JOB_INDEX)
    completion = notes.get(JOB_COMPLETION_INDEX, labels.get(JOB_COMPLETION_INDEX))
    if job_raw is not None:
        if completion is None:
            return f"a JobSet pod without {JOB_COMPLETION_INDEX}"
        job, index = _number(JOBSET_JOB_INDEX, job_raw), _number(JOB_COMPLETION_INDEX, completion)
        if isinstance(job, str) or isinstance(index, str):
            return job if isinstance(job, str) else str(index)
        jobs = _number(JOBSET_REPLICAS, _get(pod, JOBSET_REPLICAS) or "")
        return RankLabel(JOBSET_JOB_INDEX, index, group_of(pod), job, jobs if isinstance(jobs, int) else None)
    for key, across in ((KUBEFLOW_REPLICA_INDEX, False), (LWS_WORKER_INDEX, True)):
        if key in labels:
            index = _number(key, labels[key])
            return index if isinstance(index, str) else RankLabel(key, index, group_of(pod), across=across)
    named = notes.get(KUEUE_POD_GROUP_INDEX_LABEL)
    for key, raw in (
        (KUEUE_POD_GROUP_INDEX, labels.get(KUEUE_POD_GROUP_INDEX)),
        (named or "", labels.get(named) if named else None),
        (JOB_COMPLETION_INDEX, completion),
    ):
        if raw is not None:
            index = _number(key, raw)
            return index if isinstance(index, str) else RankLabel(key, index)
    return None


def _named(shapes: Sequence[Shape], name: str, gpus: int) -> int | None:
    """The one pod set called ``name`` (or ``name-<shape>``), of ``gpus`` GPUs where several are; None: none or
    several."""
    want = name.casefold()
    exact = [k for k, s in enumerate(shapes) if s.name.casefold() == want]
    found = exact or [k for k, s in enumerate(shapes) if s.name.casefold().startswith(want + "-")]
    if len(found) > 1:
        found = [k for k in found if shapes[k].gpus == gpus]
    return found[0] if len(found) == 1 else None


def _offset(pod: Pod) -> int:
    raw = pod.metadata.annotations.get(KUEUE_POD_INDEX_OFFSET)
    value = _number(KUEUE_POD_INDEX_OFFSET, raw) if raw is not None else 0
    return value if isinstance(value, int) else 0


def place_of(
    pod: Pod, gpus: int, shapes: Sequence[Shape], *, index: Callable[[Pod], RankLabel | str | None] | None = None
) -> Place | str | None:
    """The rank slot the pod is held to among the gang's pod sets ``shapes`` (each whole, in order).

    None when the pod carries no index; the reason (a sentence) when its
    index is unusable, which leaves it unindexed. ``gpus`` is what the pod
    asks: a pod set of another GPU count is not its own. ``index`` reads the
    pod's index (default ``read_index``; ``pod_facts.index_of`` remembers it).
    """
    found = (index or read_index)(pod)
    if found is None or isinstance(found, str):
        return found
    k, rank = _pod_set_of(pod, found, gpus, shapes)
    if k is None:
        return f"{found.key} {found.index}: no pod set of the gang's plan is this pod's ({_names(shapes)})"
    shape = shapes[k]
    if rank is None:
        if found.job is not None:
            jobs = found.jobs
            if not jobs or shape.pods % jobs:
                return f"{JOBSET_REPLICAS} ({jobs}) does not divide pod set {shape.name}'s {shape.pods} pods"
            per_job = shape.pods // jobs
            if found.index >= per_job:
                return f"{JOB_COMPLETION_INDEX} {found.index} is past the {per_job} pods of one Job"
            rank = found.job * per_job + found.index
        else:
            rank = found.index - _offset(pod)
    if shape.gpus != gpus:
        return f"pod set {shape.name} has {shape.gpus} GPUs per pod, the pod asks {gpus}"
    if not 0 <= rank < shape.pods:
        return f"rank {rank} (from {found.key}) is outside pod set {shape.name}'s {shape.pods} pods"
    return Place(shape.name, rank)


def _pod_set_of(pod: Pod, found: RankLabel, gpus: int, shapes: Sequence[Shape]) -> tuple[int | None, int | None]:
    """Which of ``shapes`` the pod is in, and its rank there when finding the pod set gave it (an index counting
    across pod sets); (None, None) when no pod set is the pod's."""
    named = pod.metadata.labels.get(KUEUE_POD_SET)
    by_label = next((k for k, s in enumerate(shapes) if named and s.name == named), None)
    if by_label is not None:
        return by_label, None
    if found.group:
        return _named(shapes, found.group, gpus), None
    if found.across:
        start = 0
        for k, s in enumerate(shapes):
            if start <= found.index < start + s.pods:
                return k, found.index - start
            start += s.pods
        return None, None
    same = [k for k, s in enumerate(shapes) if s.gpus == gpus]
    return (same[0], None) if len(same) == 1 else (None, None)


def _names(shapes: Sequence[Shape]) -> str:
    return ", ".join(f"{s.name} ({s.pods} x {s.gpus} GPUs)" for s in shapes[:8]) or "none"


def is_gone(store: ClusterStore, uid: str) -> bool:
    """The pod holding a slot is no more: the state holds no such pod (or it ended) and kilter books none for it.

    A pod kilter bound that the feed does not show yet has an assumed booking, so it is not gone.
    """
    if store.booking(uid) is not None:
        return False
    held = store.pod(uid)
    return held is None or held.status.phase in ENDED_PHASES
