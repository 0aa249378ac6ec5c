"""Which gang a pod belongs to: its key, where the key came from, and the gang's size.

Recognised (first match wins): ``kilter.dev/gang`` + ``kilter.dev/gang-size``
labels; Kueue pod groups (``kueue.x-k8s.io/pod-group-name`` label +
``pod-group-total-count`` annotation); LeaderWorkerSet groups (name +
group-index labels, ``size`` annotation); a Kueue Workload named by the
``kueue.x-k8s.io/workload`` annotation; a Volcano PodGroup named by
``scheduling.k8s.io/group-name`` (``minMember``); JobSet, PyTorchJob and
MPIJob pods by their job-name labels. Where the pod does not carry the size,
it comes from the owning object in the state, else from the number of the
gang's pods the state holds. A pod none of these name, whose DRA claims join
an NVIDIA ComputeDomain (``compute_domains``), is in the domain's gang
(``NAMESPACE/compute-domain/NAME``): ``spec.numNodes`` pods when it is above
0 (one pod per node, as the driver's examples run), else as many as the
state holds with the asking pod, so a lone pod is planned too (and held to
its domain's clique: ``cliques``).

``gang_of`` and ``in_gang`` select a gang's pods again, from one of its pods
or from its key, by the very labels and annotations ``identify`` read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from kilter.gangs import compute_domains
from kilter.model.annotations import GANG, GANG_SIZE, MAX_GANG_SIZE, parse_gang_size
from kilter.model.core_v1 import Pod
from kilter.model.errors import InputError
from kilter.model.jobs import PodSetSpec, read_job
from kilter.state.store import ClusterStore
from kilter.topology.fleet import ENDED_PHASES

__all__ = [
    "COMPUTE_DOMAIN",
    "GANG_LABEL",
    "GANG_SIZE_LABEL",
    "INDEXED_ANNOTATIONS",
    "INDEXED_LABELS",
    "KINDS",
    "KUEUE_WORKLOAD",
    "MAX_GANG_SIZE",
    "GangId",
    "GangKey",
    "GangSelector",
    "gang_of",
    "identify",
    "in_gang",
    "key_of",
]

GANG_LABEL = GANG
GANG_SIZE_LABEL = GANG_SIZE
KUEUE_POD_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_WORKLOAD = "kueue.x-k8s.io/workload"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
VOLCANO_GROUP = "scheduling.k8s.io/group-name"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
KUBEFLOW_JOB = "training.kubeflow.org/job-name"

KINDS: Final[Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    # the kind in a gang's key -> (labels, annotations) whose values are the key's name parts, in order
    "gang": ((GANG_LABEL,), ()),
    "pod-group": ((KUEUE_POD_GROUP,), ()),
    "lws": ((LWS_NAME, LWS_GROUP), ()),
    "workload": ((), (KUEUE_WORKLOAD,)),
    "podgroup": ((), (VOLCANO_GROUP,)),
    "jobset": ((JOBSET_NAME,), ()),
    "kubeflow": ((KUBEFLOW_JOB,), ()),
}
COMPUTE_DOMAIN = "compute-domain"
"""The kind in the key of a gang that is an NVIDIA ComputeDomain's pods: its one name part is the domain's name (the
pods are found by the claim template the domain names, not by a label)."""


@dataclass(frozen=True, order=True)
class GangKey:
    """A gang's key: its namespace, what kind of gang it is, and the name parts that kind has.

    Its text, ``NAMESPACE/KIND/NAME[/PART]`` (``ml/gang/train``,
    ``ml/podgroup/pg``, ``ml/workload/wl``, ``ml/lws/NAME/GROUP``,
    ``ml/jobset/x``, ``ml/kubeflow/x``, ``ml/pod-group/x``), is what plan
    records, logs, metrics and the extender's explanations carry, so
    ``format`` must keep producing exactly it. ``names`` are label or
    annotation values, which hold no ``/``; a part may be empty (an empty
    label value is valid). Built from a pod's labels by ``identify``, the key
    is not checked; ``parse`` is, since its text comes from the cluster.
    """

    namespace: str
    kind: str
    names: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> GangKey:
        """The key ``text`` spells; ``InputError`` if the kind is unknown or has another number of name parts."""
        parts = text.split("/")
        if len(parts) == 3 and parts[1] == COMPUTE_DOMAIN:
            return cls(parts[0], COMPUTE_DOMAIN, (parts[2],))
        selectors = KINDS.get(parts[1]) if len(parts) >= 3 else None
        if selectors is None or len(parts) - 2 != len(selectors[0]) + len(selectors[1]):
            want = "NAMESPACE/KIND/NAME with KIND one of " + ", ".join(sorted({*KINDS, COMPUTE_DOMAIN}))
            raise InputError(f"gang key {text[:200]!r} is not {want} (lws: NAMESPACE/lws/NAME/GROUP)")
        return cls(parts[0], parts[1], tuple(parts[2:]))

    def format(self) -> str:
        """The key's text (the inverse of ``parse``)."""
        return "/".join((self.namespace, self.kind, *self.names))

    def __str__(self) -> str:
        return self.format()

    @property
    def name(self) -> str:
        """The name parts joined as the key's text joins them (``NAME`` or ``NAME/GROUP``)."""
        return "/".join(self.names)


@dataclass(frozen=True)
class GangId:
    """Which gang a pod belongs to and how many pods it has (None: not known yet).

    ``key`` is the key's text (``GangKey.format``): the gang's name in the
    book's plans, in plan records and in the planner's answers.
    """

    key: str
    source: str
    size: int | None
    pod_sets: tuple[PodSetSpec, ...] = ()
    placed: int | None = None  # pods already placed, when the caller knows (Volcano's session does)
    members: tuple[Pod, ...] | None = field(default=None, compare=False)  # the gang's pods, when the caller has them


def _size(raw: str | None, what: str) -> int | None:
    """The count ``raw`` spells, by the one gang-size rule the validating webhook applies too (None: not given)."""
    return None if raw is None else parse_gang_size(raw, what=what)


def key_of(pod: Pod) -> GangKey | None:
    """The gang ``pod`` belongs to, by the labels and annotations alone (first match wins, as ``identify``).

    What a view of many pods needs (which gang holds a node): no object is looked up and no size is read, so a
    pod costs a few dict lookups and a malformed gang size is no error here.
    """
    meta = pod.metadata
    labels, notes, ns = meta.labels, meta.annotations, meta.namespace
    if GANG_LABEL in labels:
        return GangKey(ns, "gang", (labels[GANG_LABEL],))
    if KUEUE_POD_GROUP in labels:
        return GangKey(ns, "pod-group", (labels[KUEUE_POD_GROUP],))
    if LWS_NAME in labels and LWS_GROUP in labels:
        return GangKey(ns, "lws", (labels[LWS_NAME], labels[LWS_GROUP]))
    if KUEUE_WORKLOAD in notes:
        return GangKey(ns, "workload", (notes[KUEUE_WORKLOAD],))
    if VOLCANO_GROUP in notes:
        return GangKey(ns, "podgroup", (notes[VOLCANO_GROUP],))
    for label, kind in ((JOBSET_NAME, "jobset"), (KUBEFLOW_JOB, "kubeflow")):
        if label in labels:
            return GangKey(ns, kind, (labels[label],))
    return None


def identify(pod: Pod, store: ClusterStore) -> GangId | None:
    """The gang of ``pod`` (``key_of``) with its size: from the pod's own label or annotation where the kind
    carries one, else from the object named (Workload, PodGroup), else unknown."""
    key = key_of(pod)
    if key is None:
        return _of_compute_domain(pod, store)
    labels, notes, ns, gang = pod.metadata.labels, pod.metadata.annotations, key.namespace, key.format()
    if key.kind == "gang":
        raw = labels.get(GANG_SIZE_LABEL, notes.get(GANG_SIZE_LABEL))
        size = _size(raw, f"label {GANG_SIZE_LABEL}")
        if size is None:
            raise InputError(f"label {GANG_LABEL} needs {GANG_SIZE_LABEL} (the gang's pod count)")
        return GangId(gang, GANG_LABEL, size)
    if key.kind == "pod-group":
        size = _size(notes.get(KUEUE_POD_GROUP_COUNT), f"annotation {KUEUE_POD_GROUP_COUNT}")
        return GangId(gang, KUEUE_POD_GROUP, size)
    if key.kind == "lws":
        return GangId(gang, LWS_NAME, _size(notes.get(LWS_SIZE), f"annotation {LWS_SIZE}"))
    if key.kind == "workload":
        return _from_object(store, ("kueue.x-k8s.io", "Workload", ns, key.name), gang, KUEUE_WORKLOAD)
    if key.kind == "podgroup":
        group = store.get("scheduling.volcano.sh", "PodGroup", ns, key.name)
        spec = group.get("spec") if group else None
        member = spec.get("minMember") if isinstance(spec, Mapping) else None
        size = member if isinstance(member, int) and 1 <= member <= MAX_GANG_SIZE else None
        return GangId(gang, VOLCANO_GROUP, size)
    return GangId(gang, JOBSET_NAME if key.kind == "jobset" else KUBEFLOW_JOB, None)


def _of_compute_domain(pod: Pod, store: ClusterStore) -> GangId | None:
    """The gang of a pod that joins a ComputeDomain and names no other gang (module docstring); None otherwise."""
    meta = pod.metadata
    cd = compute_domains.domain_of(store, meta.namespace, compute_domains.templates(pod.spec))
    if cd is None:
        return None
    key = GangKey(meta.namespace, COMPUTE_DOMAIN, (cd.metadata.name,)).format()
    if cd.spec.num_nodes > 0:
        return GangId(key, compute_domains.SOURCE, min(cd.spec.num_nodes, MAX_GANG_SIZE))
    held = compute_domains.members(store, cd)
    asking = any(p.metadata.name == meta.name for p in held) or pod.status.phase in ENDED_PHASES
    return GangId(key, compute_domains.SOURCE, min(len(held) + (0 if asking else 1), MAX_GANG_SIZE))


def _from_object(store: ClusterStore, key: tuple[str, str, str, str], gang: str, source: str) -> GangId:
    obj = store.get(*key)
    if obj is None:
        return GangId(gang, source, None)
    spec = read_job(obj)
    pod_sets = spec.gangs[0] if spec.gangs else ()
    return GangId(gang, source, sum(ps.count for ps in pod_sets) or None, pod_sets)


@dataclass(frozen=True)
class GangSelector:
    """The pods of one gang: those of ``namespace`` carrying these labels and annotations (what ``identify`` read)."""

    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    nothing: bool = False  # a key that names no gang: matches no pod
    compute_domain: str = ""  # the gang is this ComputeDomain's pods (its name), not found by labels
    claims: frozenset[str] = frozenset()  # ... or the domain whose claim template is one of these

    def members(self, store: ClusterStore) -> list[Pod]:
        """The gang's pods in the store that have not finished."""
        if self.nothing:
            return []
        if self.compute_domain or self.claims:
            if self.compute_domain:
                cd = compute_domains.named(store, self.namespace, self.compute_domain)
            else:
                cd = compute_domains.domain_of(store, self.namespace, self.claims)
            return compute_domains.members(store, cd) if cd is not None else []
        found = store.pods_with(self.namespace, self.labels, self.annotations)
        return [p for p in found if p.status.phase not in ENDED_PHASES]


INDEXED_LABELS = (GANG_LABEL, KUEUE_POD_GROUP, LWS_NAME, LWS_GROUP, JOBSET_NAME, KUBEFLOW_JOB)
INDEXED_ANNOTATIONS = (KUEUE_WORKLOAD, VOLCANO_GROUP)


def gang_of(pod: Pod) -> GangSelector:
    """The pods that carry the same gang labels and annotations as ``pod``; those of its ComputeDomain when it
    carries none (``identify``'s order)."""
    labels, notes = pod.metadata.labels, pod.metadata.annotations
    if key_of(pod) is None and compute_domains.templates(pod.spec):
        return GangSelector(pod.metadata.namespace, claims=compute_domains.templates(pod.spec))
    return GangSelector(
        pod.metadata.namespace,
        {k: labels[k] for k in INDEXED_LABELS if k in labels},
        {k: notes[k] for k in INDEXED_ANNOTATIONS if k in notes},
    )


def in_gang(key: str | GangKey) -> GangSelector:
    """The pods of the gang with this key (by the labels or annotation ``identify`` read); none for a malformed key."""
    if isinstance(key, str):
        try:
            key = GangKey.parse(key)
        except InputError:
            return GangSelector("", nothing=True)
    if key.kind == COMPUTE_DOMAIN:
        return GangSelector(key.namespace, compute_domain=key.name) if key.name else GangSelector("", nothing=True)
    label_keys, note_keys = KINDS.get(key.kind, ((), ()))
    if len(key.names) != len(label_keys) + len(note_keys) or not key.names:
        return GangSelector(key.namespace, nothing=True)
    labels = dict(zip(label_keys, key.names[: len(label_keys)], strict=True))
    notes = dict(zip(note_keys, key.names[len(label_keys) :], strict=True))
    return GangSelector(key.namespace, labels, notes)
