"""The one ladder of node-fit verdicts, and the one sentence for each, that every server gives.

The kube-scheduler extender judges a whole ``NodeNames`` list per pod (the
vector entry, ``Ladder.judge``); Volcano's ``predicate`` judges one node per
call (the scalar entry, ``Ladder.judge_one``); ``explain`` and both servers
word the outcome with ``reason``. Both entries climb the same rungs in the
same order, the first rung a node fails naming its verdict:

1. ``UNKNOWN`` — not a GPU node in kilter's fleet model;
2. ``OTHER_KIND`` — its GPUs are another device resource than the pod asks;
3. ``UNUSABLE`` — cordoned, not Ready, or its GPUs unhealthy (``health.py``; the fleet keeps each
   node's own reason, which ``explain`` records give: ``unusable_notes``);
4. ``NOT_ELIGIBLE`` — the pod's nodeSelector, required affinity or tolerations exclude it;
5. ``TOO_SMALL`` — it has fewer GPUs in all than the pod asks;
6. for a gang pod: ``GANG_WAITS`` while the gang has no feasible plan
   (it does not fit yet, or it waits for room in fewer domains),
   ``NOT_PLANNED`` off the plan's nodes for this pod, ``FULL`` when the
   scheduler's own view (Volcano's ``Idle``) shows too few GPUs there; the
   pod's planned GPUs are reserved for it, so kilter's free count is not asked;
7. otherwise ``SPARE`` on a spare node (``spares``: kept out of new
   placements for repairs of running gangs; a gang's plan never holds one,
   a repair's may), then ``RESERVED`` where the pod would delay a gang's
   kept reservation (``topology.backfill``: no preemption frees it, time
   does), then ``FULL`` when fewer GPUs are free than it asks
   (the lower of kilter's count and the scheduler's, when it sends one);
8. ``PASS``.

``FULL`` and ``GANG_WAITS`` may resolve by themselves (kube-scheduler's
``FailedNodes``, Volcano's ``Unschedulable``: preemption or time can free
the node); every other verdict is unresolvable. The vector and scalar
entries are kept equal by a test over every node of random fleets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kilter.model.annotations import SPARE_NODES_PER_DOMAIN
from kilter.model.core_v1 import PodSpec
from kilter.topology import eligibility, spares
from kilter.topology.fleet import Fleet
from kilter.topology.pod_gpus import one_kind as gpu_ask  # the one-kind rule, named as the servers call it

__all__ = [
    "FULL",
    "GANG_WAITS",
    "NOT_ELIGIBLE",
    "NOT_PLANNED",
    "OTHER_KIND",
    "OUTCOMES",
    "PASS",
    "RESERVED",
    "SPARE",
    "TOO_SMALL",
    "UNKNOWN",
    "UNUSABLE",
    "Hold",
    "Ladder",
    "Reasons",
    "Verdicts",
    "gpu_ask",
    "is_resolvable",
    "reason",
    "unusable_notes",
]

PASS, FULL, UNKNOWN, OTHER_KIND, UNUSABLE, TOO_SMALL, NOT_ELIGIBLE, NOT_PLANNED, GANG_WAITS, SPARE, RESERVED = range(11)
OUTCOMES = (  # per code: "passed", "failed" (may resolve by itself) or "unresolvable"
    "passed",
    "failed",
    "unresolvable",
    "unresolvable",
    "unresolvable",
    "unresolvable",
    "unresolvable",
    "unresolvable",
    "failed",
    "unresolvable",  # SPARE: no preemption frees it, the node is idle already
    "unresolvable",  # RESERVED: preempting there would hand a reserved domain to someone else
)
_RESOLVABLE = np.array([o == "failed" for o in OUTCOMES], dtype=bool)
MAX_CACHED_MASKS = 256
MAX_CACHED_MASK_KEY_BYTES = 16 * 1024  # a selector longer than this is judged again each time rather than kept


def is_resolvable(codes: npt.NDArray[np.int8]) -> npt.NDArray[np.bool_]:
    """Per code, whether the verdict may resolve by itself (``FULL``, ``GANG_WAITS``)."""
    return _RESOLVABLE[codes]


@dataclass(frozen=True)
class Hold:
    """A gang pod's plan, as far as the ladder needs it.

    ``topology`` sits below the gang book, so the servers hand the plan over
    as plain values instead of the book's own type.
    """

    feasible: bool
    nodes: Sequence[int]  # fleet indices of the planned nodes this pod may use (empty while not feasible)
    note: str  # the plan described (feasible) or why the gang does not fit yet (not feasible)
    waits: bool = False  # not feasible because the gang waits for fewer domains; ``note`` says so whole


@dataclass
class Verdicts:
    """Per candidate: verdict code, free and total GPUs (0 for unknown nodes)."""

    codes: npt.NDArray[np.int8]
    free: npt.NDArray[np.int32]
    total: npt.NDArray[np.int32]


class Ladder:
    """The ladder over one fleet at a time, with what only changes with the fleet worked out once.

    Rungs 1-3 depend on the fleet and the GPU kind alone, and pods of one
    Deployment or Job share their selectors and tolerations, so those
    verdicts and masks are kept per fleet (a new fleet object drops them).
    """

    def __init__(self) -> None:
        self._fleet: Fleet | None = None
        self._static: dict[str, tuple[npt.NDArray[np.int8], npt.NDArray[np.int32]]] = {}
        self._masks: dict[bytes, npt.NDArray[np.bool_] | None] = {}

    def _for(self, fleet: Fleet) -> None:
        if fleet is not self._fleet:
            self._fleet = fleet
            self._static.clear()
            self._masks.clear()

    def static(self, fleet: Fleet, resource: str) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int32]]:
        """Rungs 1-3 per node and the nodes' GPU totals, each with one extra last slot that index -1 reads."""
        self._for(fleet)
        cached = self._static.get(resource)
        if cached is None:
            bm = fleet.bitmap
            kinds = np.array([pl.device_resource == resource for pl in fleet.platforms], dtype=bool)
            kind_ok = kinds[bm.domain_platforms[fleet.node_domain]] if fleet.n_nodes else np.zeros(0, dtype=bool)
            codes = np.full(fleet.n_nodes + 1, PASS, dtype=np.int8)
            codes[:-1][bm.node_usable_flags == 0] = UNUSABLE
            codes[:-1][~kind_ok] = OTHER_KIND
            codes[-1] = UNKNOWN
            total = np.append(bm.node_gpu_counts.astype(np.int32), np.int32(0))
            cached = self._static[resource] = (codes, total)
        return cached

    def mask(self, fleet: Fleet, spec: PodSpec, *, path: str) -> npt.NDArray[np.bool_] | None:
        """Rung 4's node mask for this pod spec (one slot past the end, False, for index -1); None: every node."""
        self._for(fleet)
        key = eligibility.mask_key(spec)
        if key in self._masks:
            return self._masks[key]
        mask = eligibility.node_mask(fleet, spec, path=path)
        extended = None if mask is None else np.append(mask, False)
        if len(key) > MAX_CACHED_MASK_KEY_BYTES:
            return extended  # 256 selectors of 100,000 keys each would keep ~600 MB of keys alive
        if len(self._masks) >= MAX_CACHED_MASKS:
            self._masks.clear()
        self._masks[key] = extended
        return extended

    def judge(
        self,
        fleet: Fleet,
        index: npt.NDArray[np.int32],
        *,
        resource: str,
        gpus: int,
        spec: PodSpec,
        hold: Hold | None = None,
        idle: npt.NDArray[np.int32] | None = None,
        path: str = "$.Pod.spec",
        lent: npt.NDArray[np.bool_] | None = None,
        reserved: npt.NDArray[np.bool_] | None = None,
    ) -> Verdicts:
        """The vector entry: a verdict for each candidate (fleet index, -1 for a node kilter does not know).
        ``lent``: per domain, spares lent to this pod (``spares.lent_to``), which get no ``SPARE`` verdict;
        ``reserved``: per node, whether the pod would delay a kept reservation there (``Kept.lone_pod``)."""
        base, total_all = self.static(fleet, resource)
        codes = base[index]
        total = total_all[index]
        used = fleet.bitmap.node_used_gpus
        free = np.where(index >= 0, total - used[np.where(index >= 0, index, 0)], 0).astype(np.int32)
        mask = self.mask(fleet, spec, path=path)
        if mask is not None:
            codes[(codes == PASS) & ~mask[index]] = NOT_ELIGIBLE
        codes[(codes == PASS) & (total < gpus)] = TOO_SMALL
        ok = codes == PASS
        if hold is not None:
            if not hold.feasible:
                codes[ok] = GANG_WAITS
                return Verdicts(codes, free, total)
            allowed = np.zeros(fleet.n_nodes + 1, dtype=bool)
            allowed[np.asarray(hold.nodes, dtype=np.intp)] = True
            codes[ok & ~allowed[index]] = NOT_PLANNED
            if idle is not None:
                short = (codes == PASS) & (idle < gpus)
                free = np.where(short, idle, free).astype(np.int32)
                codes[short] = FULL
            return Verdicts(codes, free, total)
        held = spares.held_mask(fleet, lent=lent)
        if held is not None:
            codes[ok & np.append(held, False)[index]] = SPARE
            ok = codes == PASS
        if reserved is not None:
            codes[ok & np.append(reserved, False)[index]] = RESERVED
            ok = codes == PASS
        if idle is not None:
            free = np.where(ok, np.minimum(free, idle), free).astype(np.int32)
        codes[ok & (free < gpus)] = FULL
        return Verdicts(codes, free, total)

    def judge_one(
        self,
        fleet: Fleet,
        node: int,
        *,
        resource: str,
        gpus: int,
        spec: PodSpec,
        hold: Hold | None = None,
        idle: int | None = None,
        path: str = "$.Pod.spec",
        lent: npt.NDArray[np.bool_] | None = None,
        reserved: npt.NDArray[np.bool_] | None = None,
    ) -> tuple[int, int, int]:
        """The scalar entry: ``(code, free, total)`` for one node (fleet index, -1 unknown), as ``judge`` gives it.

        Volcano asks once per task and node, where building arrays for one
        element would cost more than the whole answer; so this reads the same
        per-fleet tables with plain Python, rung for rung.
        """
        base, total_all = self.static(fleet, resource)
        code, total = int(base[node]), int(total_all[node])
        free = total - int(fleet.bitmap.node_used_gpus[node]) if node >= 0 else 0
        if code != PASS:
            return code, free, total
        mask = self.mask(fleet, spec, path=path)
        if mask is not None and not mask[node]:
            return NOT_ELIGIBLE, free, total
        if total < gpus:
            return TOO_SMALL, free, total
        if hold is not None:
            if not hold.feasible:
                return GANG_WAITS, free, total
            if node not in hold.nodes:
                return NOT_PLANNED, free, total
            if idle is not None and idle < gpus:
                return FULL, idle, total
            return PASS, free, total
        if spares.is_spare(fleet, node, lent=lent):
            return SPARE, free, total
        if reserved is not None and node >= 0 and reserved[node]:
            return RESERVED, free, total
        if idle is not None:
            free = min(free, idle)
        return (FULL if free < gpus else PASS), free, total


def reason(
    code: int,
    *,
    gpus: int,
    resource: str,
    free: int,
    total: int,
    hold: Hold | None = None,
    why: str | None = None,
    reserved: str = "",
) -> str:
    """The sentence for a verdict, the same in filter, predicate, explain and every log line; ``why``: an unusable
    node's own reason (``Fleet.unusable_reason``), where the answer names one node; ``reserved``: the kept
    reservations a pod would delay (``Kept.lone_pod``)."""
    if code == FULL:
        return f"{free} of {total} {resource} free; the pod needs {gpus}"
    if code == TOO_SMALL:
        return f"the node has {total} {resource}; the pod needs {gpus}"
    if code == UNKNOWN:
        return "not a GPU node in kilter's model of the fleet"
    if code == OTHER_KIND:
        return f"the node's GPUs are not {resource}"
    if code == UNUSABLE:
        return f"the node is unusable: {why}" if why else "the node is cordoned, not Ready, or its GPUs are unhealthy"
    if code == NOT_ELIGIBLE:
        return "the pod's nodeSelector, node affinity or tolerations exclude the node"
    if code == NOT_PLANNED:
        return f"kilter holds this pod to its gang's plan ({hold.note if hold else ''})"
    if code == SPARE:
        return f"kept spare for repairs of running gangs ({SPARE_NODES_PER_DOMAIN})"
    if code == RESERVED:
        return f"the pod would delay a reservation: {reserved}"
    if code == GANG_WAITS:
        if hold is not None and hold.waits:
            return hold.note
        return f"the gang does not fit yet: {hold.note if hold else ''}"
    return "passes"


def unusable_notes(fleet: Fleet, index: npt.NDArray[np.int32], codes: npt.NDArray[np.int8]) -> dict[str, str]:
    """Each judged node whose verdict is ``UNUSABLE``, by name: its own sentence (``reason`` with ``why``).

    For records that name nodes one by one (``explain``). The answers to
    kube-scheduler and Volcano keep the one shared sentence, the same on
    both paths: the scheduler counts nodes by reason in its "0/N nodes are
    available" message.
    """
    at = np.flatnonzero(codes == UNUSABLE)
    if not len(at):
        return {}
    names = [fleet.node_names[i] for i in index[at].tolist()]
    return {n: reason(UNUSABLE, gpus=0, resource="", free=0, total=0, why=fleet.unusable_reason(n)) for n in names}


class Reasons:
    """``reason`` for one pod, as the ``(code, free, total) -> str`` callable explain records keep.

    Sentences repeat across thousands of nodes, so each distinct one is
    built once (free and total matter only to ``FULL`` and ``TOO_SMALL``).
    """

    def __init__(self, *, gpus: int, resource: str, hold: Hold | None, reserved: str = "") -> None:
        self.gpus = gpus
        self.resource = resource
        self.hold = hold
        self.reserved = reserved
        self._cache: dict[tuple[int, int, int], str] = {}

    def __call__(self, code: int, free: int, total: int) -> str:
        key = (code, free, total) if code in (FULL, TOO_SMALL) else (code, 0, 0)
        text = self._cache.get(key)
        if text is None:
            text = self._cache[key] = reason(
                code,
                gpus=self.gpus,
                resource=self.resource,
                free=free,
                total=total,
                hold=self.hold,
                reserved=self.reserved,
            )
        return text
