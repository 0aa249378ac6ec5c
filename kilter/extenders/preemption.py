"""Which preemption candidates the extender keeps for a pod: a node the victims free enough of, that the pod's gang
plan holds, and — for a pod of no gang — that does not turn into a spare the pod may not use.

kube-scheduler's preemption offers every node where evicting lower-priority
pods would make room, and asks the extender (``preempt``) which to keep. A
lone pod that empties a node of a domain keeping spares
(``kilter.dev/spare-nodes-per-domain``) would evict the node's pods for
nothing when the emptied node becomes a spare held from that pod (a
borrower of lent spares, evicted by a pod above every gang there, is the
case that matters): so such a node is not kept. On a node where a repair
takes a lent spare back, only the pods kilter chose (and evicts itself) are
kept as victims. Nor does a lone pod preempt its way into a domain kept for
a gang's reservation (``reserved``): that would hand the room a promised
gang waits for to someone else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from kilter.gangs import GangBook, Victim
from kilter.model.annotations import SPARE_NODES_PER_DOMAIN
from kilter.model.core_v1 import Pod
from kilter.model.errors import KilterError
from kilter.topology import spares
from kilter.topology.fleet import Fleet

__all__ = ["refusal", "reserved", "taken_back"]

V = TypeVar("V", bound="_HasUid")


class _HasUid(Protocol):
    @property
    def uid(self) -> str: ...


def refusal(
    fleet: Fleet,
    index: int,
    *,
    gpus: int,
    freed: int,
    allowed: set[int] | None,
    lone: bool,
    lent: npt.NDArray[np.bool_] | None = None,
) -> str:
    """Why the extender keeps no preemption on node ``index`` for a pod asking ``gpus`` whose victims there free
    ``freed`` ("" when it keeps it): ``allowed``, the nodes its gang's plan gives it (None: any); ``lone``, the
    pod is in no gang, and ``lent`` the domains lending it their spares (``spares.lent_to``)."""
    if fleet.bitmap.node_free_gpus(index) + freed < gpus:
        return f"evicting these victims frees {freed} GPUs; the pod needs {gpus}"
    if allowed is not None and index not in allowed:
        return "not in the gang's plan"
    emptied = freed >= int(fleet.bitmap.node_used_gpus[index])
    if lone and emptied and spares.spare_once_free(fleet, index, lent=lent):
        return f"evicting these victims empties a spare node kept for repairs ({SPARE_NODES_PER_DOMAIN})"
    return ""


def taken_back(offered: Sequence[V], victims: Sequence[Victim], node: str) -> list[V]:
    """The offered victims on ``node`` that the gang's repair chose itself (``GangPlan.victims``: kilter evicts
    those, lowest priority first) when it chose any there, so that the scheduler's preemption and kilter's own
    eviction take the same pods back, not two sets; every offered one on other nodes."""
    mine = {v.uid for v in victims if v.node == node}
    return [v for v in offered if v.uid in mine] if mine else list(offered)


def reserved(gangs: GangBook, fleet: Fleet, pod: Pod, gpus: int) -> Callable[[int | None], str] | None:
    """Why a lone ``pod`` may not preempt on a node (fleet index; None: unknown), "" where it may; None when no
    kept reservation stands in its way anywhere. A runtime it declares that does not read refuses every node."""
    try:
        found = gangs.reserved_for(fleet, pod, gpus)
    except KilterError as exc:
        message = str(exc)
        return lambda index: message
    mask, sentence = found
    if mask is None:
        return None
    why = f"the pod would delay a reservation: {sentence}"
    return lambda index: why if index is not None and mask[index] else ""
