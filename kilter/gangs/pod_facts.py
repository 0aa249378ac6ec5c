"""What the gang code reads off one pod again and again, read once per pod object: its GPU ask and its index.

A repair decision for a 512-pod gang reads every member's GPU request
(quantities parsed over its containers) and its index (labels and
annotations) — a few microseconds each, milliseconds for the gang, on every
decision. The store replaces a pod's object whenever the pod changes, so a
fact kept beside the very object it was read from (compared by identity,
with the object held so its identity cannot be reused) is never stale. The
memo is bounded: past ``MAX_PODS`` pods it starts afresh.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from kilter.gangs import ranks
from kilter.model.core_v1 import Pod, PodSpec, pod_request
from kilter.model.errors import InputError
from kilter.topology import verdicts

__all__ = ["MAX_PODS", "forget", "gpu_ask", "index_of", "spec_gpu_ask"]

MAX_PODS = 1 << 18

T = TypeVar("T")
_asks: dict[tuple[str, str, str], tuple[Pod, tuple[str, ...], tuple[str, int]]] = {}
_indices: dict[tuple[str, str, str], tuple[Pod, ranks.PodIndex | str | None]] = {}


def spec_gpu_ask(spec: PodSpec, resources: Sequence[str]) -> tuple[str, int]:
    """(device resource, count) a pod spec asks; ("", 0) for none, and ("?", 0) when it cannot be read."""
    try:
        return verdicts.gpu_ask((r, pod_request(spec, r, path="$.spec")) for r in resources) or ("", 0)
    except InputError:
        return "?", 0


def gpu_ask(pod: Pod, resources: tuple[str, ...]) -> tuple[str, int]:
    """``spec_gpu_ask`` of the pod, remembered with the pod object."""
    key = _key(pod)
    held = _asks.get(key)
    if held is not None and held[0] is pod and held[1] == resources:
        return held[2]
    found = spec_gpu_ask(pod.spec, resources)
    _remember(_asks, key, (pod, resources, found))
    return found


def index_of(pod: Pod) -> ranks.PodIndex | str | None:
    """``ranks.read_index`` of the pod, remembered with the pod object."""
    key = _key(pod)
    held = _indices.get(key)
    if held is not None and held[0] is pod:
        return held[1]
    found = ranks.read_index(pod)
    _remember(_indices, key, (pod, found))
    return found


def forget() -> None:
    """Drop every remembered fact (a benchmark's cold start)."""
    _asks.clear()
    _indices.clear()


def _key(pod: Pod) -> tuple[str, str, str]:
    meta = pod.metadata
    return meta.uid, meta.namespace, meta.name


def _remember(memo: dict[tuple[str, str, str], T], key: tuple[str, str, str], value: T) -> None:
    if len(memo) >= MAX_PODS:
        memo.clear()
    memo[key] = value
