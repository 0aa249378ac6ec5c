"""What the gang code reads off one pod again and again, read once per pod object: its GPU ask, its index, the
group its index counts within, the rank it holds among a gang's pod sets, and its plan record's time.

A repair decision for a 512-pod gang reads every member's GPU request
(quantities parsed over its containers), its index (labels and
annotations), its rank and its plan record's time — a few microseconds
each, milliseconds for the gang, on every decision. The store replaces a pod's object whenever the pod changes, so a
fact kept beside the very object it was read from (compared by identity,
with the object held so its identity cannot be reused) is never stale. The
memo is bounded: past ``MAX_PODS`` pods it starts afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from kilter.gangs import ranks
from kilter.model.annotations import PLAN as PLAN_ANNOTATION
from kilter.model.core_v1 import Pod, PodSpec
from kilter.model.errors import InputError
from kilter.state.store import pod_uid
from kilter.topology import pod_gpus

__all__ = [
    "MAX_PODS",
    "UNREAD",
    "forget",
    "gpu_ask",
    "group_of",
    "held",
    "index_of",
    "member",
    "place_of",
    "record_time",
    "spec_gpu_ask",
]

MAX_PODS = 1 << 18

T = TypeVar("T")
_asks: dict[tuple[str, str, str], tuple[Pod, tuple[str, ...], tuple[str, int]]] = {}
_indices: dict[tuple[str, str, str], tuple[Pod, ranks.RankLabel | str | None]] = {}
_groups: dict[tuple[str, str, str], tuple[Pod, str]] = {}
_places: dict[tuple[str, str, str], tuple[Pod, int, tuple[ranks.Shape, ...], ranks.Place | str | None]] = {}
_times: dict[tuple[str, str, str], tuple[Pod, str | None, float | None]] = {}
_members: dict[tuple[str, str, str], tuple[Pod, tuple[str, ...], tuple[str, int, str]]] = {}
_held: dict[
    tuple[str, str, str],
    tuple[Pod, tuple[str, ...], tuple[ranks.Shape, ...], tuple[int | None, ranks.Taken | str | None]],
] = {}


UNREAD = "?"
"""The resource ``spec_gpu_ask`` gives a spec whose ask cannot be read (a count that does not read, several kinds)."""


def spec_gpu_ask(spec: PodSpec, resources: Sequence[str]) -> tuple[str, int]:
    """(device resource, count) a pod spec asks (``pod_gpus.ask``); ("", 0) for none, and (``UNREAD``, 0) when it
    cannot be read."""
    try:
        return pod_gpus.ask(spec, resources) or ("", 0)
    except InputError:
        return UNREAD, 0


def gpu_ask(pod: Pod, resources: tuple[str, ...]) -> tuple[str, int]:
    """``spec_gpu_ask`` of the pod, remembered with the pod object."""
    key = _key(pod)
    held = _asks.get(key)
    if held is not None and held[0] is pod and held[1] == resources:
        return held[2]
    found = spec_gpu_ask(pod.spec, resources)
    _remember(_asks, key, (pod, resources, found))
    return found


def member(pod: Pod, resources: tuple[str, ...]) -> tuple[str, int, str]:
    """(device resource, GPUs, group) of the pod — ``gpu_ask`` and ``group_of`` at once, as a gang's layout reads
    them of every member."""
    key = _key(pod)
    held = _members.get(key)
    if held is not None and held[0] is pod and held[1] == resources:
        return held[2]
    found = (*gpu_ask(pod, resources), group_of(pod))
    _remember(_members, key, (pod, resources, found))
    return found


def held(
    pod: Pod, resources: tuple[str, ...], shapes: tuple[ranks.Shape, ...]
) -> tuple[int | None, ranks.Taken | str | None]:
    """A bound pod's GPUs and the rank it holds among ``shapes`` as a ``Taken`` (else ``place_of``'s reason or
    None): what a gang's layout reads of each bound member, remembered with the object, resources and shapes.
    GPUs None: its ask cannot be read, so it holds GPUs (its whole node, ``pod_gpus``) in no rank anyone knows."""
    key = _key(pod)
    found = _held.get(key)
    if found is not None and found[0] is pod and found[1] == resources and found[2] == shapes:
        return found[3]
    resource, gpus = gpu_ask(pod, resources)
    out: tuple[int | None, ranks.Taken | str | None]
    if resource == UNREAD:
        out = (None, "its GPU ask cannot be read")
    else:
        place = place_of(pod, gpus, shapes)
        out = (
            gpus,
            ranks.Taken(place, pod.spec.node_name, gpus, pod_uid(pod)) if isinstance(place, ranks.Place) else place,
        )
    _remember(_held, key, (pod, resources, shapes, out))
    return out


def index_of(pod: Pod) -> ranks.RankLabel | str | None:
    """``ranks.read_index`` of the pod, remembered with the pod object."""
    return _once(_indices, pod, ranks.read_index)


def group_of(pod: Pod) -> str:
    """``ranks.group_of`` of the pod, remembered with the pod object."""
    return _once(_groups, pod, ranks.group_of)


def _once(memo: dict[tuple[str, str, str], tuple[Pod, T]], pod: Pod, read: Callable[[Pod], T]) -> T:
    """``read(pod)``, from ``memo`` when it was read off this very object."""
    key = _key(pod)
    held = memo.get(key)
    if held is not None and held[0] is pod:
        return held[1]
    found = read(pod)
    _remember(memo, key, (pod, found))
    return found


def place_of(pod: Pod, gpus: int, shapes: tuple[ranks.Shape, ...]) -> ranks.Place | str | None:
    """``ranks.place_of`` of the pod among ``shapes``, remembered with the pod object, its GPUs and the shapes."""
    key = _key(pod)
    held = _places.get(key)
    if held is not None and held[0] is pod and held[1] == gpus and held[2] == shapes:
        return held[3]
    found = ranks.place_of(pod, gpus, shapes, index=index_of)
    _remember(_places, key, (pod, gpus, shapes, found))
    return found


def record_time(pod: Pod, read: Callable[[str], float | None]) -> tuple[str | None, float | None]:
    """The pod's plan record annotation and its time as ``read`` gives it (``records``), remembered with the pod
    object: a gang's newest record is found by every member's time."""
    key = _key(pod)
    held = _times.get(key)
    if held is not None and held[0] is pod:
        return held[1], held[2]
    raw = pod.metadata.annotations.get(PLAN_ANNOTATION)
    at = read(raw) if raw is not None else None
    _remember(_times, key, (pod, raw, at))
    return raw, at


def forget(*, places_only: bool = False) -> None:
    """Drop every remembered fact (a benchmark's cold start); ``places_only``: only the ranks, which depend on a
    gang's shapes and so are read at a decision, not as pods arrive (``arrivals``)."""
    for memo in (_places, _held) if places_only else (_asks, _indices, _groups, _places, _times, _members, _held):
        memo.clear()


def _key(pod: Pod) -> tuple[str, str, str]:
    meta = pod.metadata
    return meta.uid, meta.namespace, meta.name


def _remember(memo: dict[tuple[str, str, str], T], key: tuple[str, str, str], value: T) -> None:
    if len(memo) >= MAX_PODS:
        memo.clear()
    memo[key] = value
