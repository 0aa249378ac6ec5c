"""The reservations every door keeps, as the doors ask about them: may this pod, this plan, start here now?

One expected-starts answer (``ExpectedStarts.kept``) over the fleet it was
worked out on. A door asks with what it places and when that is expected to
end; the answers come from ``topology.backfill``, the rule the simulator
runs, and say why in the words every door uses (``reservations.reason``:
``rack r07 is reserved for ml/llama-405b from 2026-12-07T14:20:00Z``).
A gang's own reservation never stands in its way: its pods know it by its
Workload's, PodGroup's or gang's name, or by the job that owns its Workload
(``ExpectedStarts.aliases``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from kilter.gangs.expected_starts import ExpectedStarts
from kilter.gangs.identity import GangKey
from kilter.model.core_v1 import Pod
from kilter.model.errors import InputError
from kilter.model.kueue import Workload
from kilter.quota.runtimes import declared_runtime
from kilter.topology import backfill
from kilter.topology.fleet import Fleet
from kilter.topology.plan import GangRequest, Plan, plan_gang
from kilter.topology.reservations import Reservation, node_space, reason

__all__ = ["Kept", "SteeredPlan"]

Ints = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class SteeredPlan:
    """A plan after the kept reservations had their say: ``plan`` (the one given, one steered away, or one that
    waits, its reason naming the reservation) and the ``outcome``."""

    plan: Plan
    outcome: backfill.Outcome

    @property
    def waits(self) -> bool:
        return self.outcome is backfill.Outcome.WAITS


class Kept:
    """The kept reservations of ``starts`` over ``fleet`` (module docstring)."""

    def __init__(self, starts: ExpectedStarts, fleet: Fleet) -> None:
        self.starts = starts
        self.fleet = fleet
        self.reservations = backfill.by_start(starts.kept)
        self.sentences = [reason(r, fleet.domain_names()) for r in self.reservations]  # as every view names them
        self._space = node_space(fleet)
        self._holdings = starts.holdings_rows()
        self._starts_s = [r.start_s for r in self.reservations]  # ascending: ``by_start`` order
        self._blocked: dict[int, Ints] = {}  # per GPU count: ``backfill.blocked_nodes`` of a pod that never ends
        self._answers: dict[tuple[int, int], tuple[npt.NDArray[np.bool_], str] | None] = {}

    def warm(self, most_gpus: int) -> None:
        """Judge the nodes for pods of 1 to ``most_gpus`` GPUs now (off the event loop), not on a filter's path."""
        for gpus in range(1, most_gpus + 1):
            self.lone_pod(gpus, math.inf)

    def owner(self, namespace: str, names: Iterable[str]) -> str | None:
        """The owner a kept reservation is promised to, if any of ``names`` in ``namespace`` is it."""
        for name in names:
            found = self.starts.aliases.get((namespace, name))
            if found is not None:
                return found
        return None

    def sentence(self, r: Reservation) -> str:
        return self.sentences[self.reservations.index(r)]

    def lone_pod(self, gpus: int, expected_end_s: float) -> tuple[npt.NDArray[np.bool_], str] | None:
        """Per node, whether a pod of no gang taking ``gpus`` GPUs until ``expected_end_s`` would delay a kept
        reservation there, and the sentences of those it would (None: it delays none anywhere).

        Which reservation a pod meets first on a node does not depend on when
        it ends, only whether it meets it at all (the pod must outlast its
        start), so the nodes are judged once per GPU count, and the answer is
        kept per GPU count and number of reservations starting before the pod
        ends: the predicate asks it for every node of every task.
        """
        if not self.reservations or gpus <= 0:
            return None
        met = bisect.bisect_left(self._starts_s, expected_end_s)  # reservations [0, met) start before it ends
        key = (gpus, met)
        if key not in self._answers:
            first = self._blocked.get(gpus)
            if first is None:
                first = self._blocked[gpus] = backfill.blocked_nodes(
                    gpus, math.inf, self._space, self._holdings, self.reservations, self.starts.now_s
                )
            hit = (first >= 0) & (first < met)
            which = sorted(set(first[hit].tolist()))
            self._answers[key] = (hit, "; ".join(self.sentences[i] for i in which)) if which else None
        return self._answers[key]

    def for_pod(self, pod: Pod, gpus: int, now_s: float) -> tuple[npt.NDArray[np.bool_], str] | None:
        """``lone_pod`` for ``pod``, of no gang, taking ``gpus`` GPUs: it is expected to run what it declares
        (``kilter.dev/expected-runtime``, Kueue's max-execution-time label, ``activeDeadlineSeconds``), else for
        ever; ``InputError`` for a declaration that does not read."""
        meta = pod.metadata
        where = f"pod {meta.namespace}/{meta.name}"
        runtime = declared_runtime(meta.annotations, meta.labels, pod.spec.active_deadline_seconds, path=where)
        return self.lone_pod(gpus, math.inf if runtime is None else now_s + runtime)

    def steer_gang(
        self,
        fleet: Fleet,
        gang_key: str,
        pod: Pod,
        request: GangRequest,
        plan: Plan,
        runtime_s: float | None,
        now_s: float,
    ) -> SteeredPlan:
        """``steer`` for the gang of key ``gang_key`` that ``pod`` is a member of, expected to run ``runtime_s``
        (None: for ever); its own reservation, found by its key's name or the pod's owners, is no obstacle."""
        try:
            key = GangKey.parse(gang_key)
        except InputError:
            return SteeredPlan(plan, backfill.Outcome.CLEAR)
        owner = self.owner(key.namespace, [key.names[0], *(r.name for r in pod.metadata.owner_references)])
        end = math.inf if runtime_s is None else now_s + runtime_s
        return self.steer(fleet, request, plan, owner, end, now_s)

    def workload_steer(self, wl: Workload, fleet: Fleet, now_s: float) -> Callable[[GangRequest, Plan], Plan]:
        """``steer`` for the gangs of Workload ``wl`` (the AdmissionCheck's): its own reservation is no obstacle,
        and it is expected to run what ``expected_starts`` read of it."""
        meta = wl.metadata
        owner = self.owner(meta.namespace, [meta.name, *(r.name for r in meta.owner_references)])
        start = self.starts.of("Workload", meta.namespace, meta.name)
        runtime = start.gang.runtime_s if start is not None else None
        end = math.inf if runtime is None else now_s + runtime
        return lambda request, plan: self.steer(fleet, request, plan, owner, end, now_s).plan

    def waiting_for_own(self, namespace: str, name: str) -> str:
        """For a Workload that does not fit now, the kept reservation it waits for, in every door's words ("" for
        none)."""
        start = self.starts.of("Workload", namespace, name)
        if start is None or start.reservation is None or start.reservation not in self.reservations:
            return ""
        return f"waiting for its reservation: {start.reason}"

    def steer(
        self, fleet: Fleet, request: GangRequest, plan: Plan, owner: str | None, expected_end_s: float, now_s: float
    ) -> SteeredPlan:
        """``plan`` (feasible, the planner's first choice for ``request``) kept, steered around the reservations
        it would delay, or turned into a wait that names the first of them (``backfill.steer``)."""
        if not self.reservations or not plan.feasible or fleet is not self.fleet:
            return SteeredPlan(plan, backfill.Outcome.CLEAR)
        nodes, gpus = _pods_of(plan)
        space = node_space(fleet)
        again: list[Plan] = []

        def replan(node_ok: npt.NDArray[np.bool_]) -> tuple[Ints, Ints] | None:
            allowed = node_ok if request.node_ok is None else node_ok & (request.node_ok != 0)
            steered = plan_gang(fleet, replace(request, node_ok=np.ascontiguousarray(allowed, dtype=np.uint8)))
            if not steered.feasible:
                return None
            again.append(steered)
            return _pods_of(steered)

        found = backfill.steer(
            nodes, gpus, expected_end_s, space, self._holdings, self.reservations, now_s, owner, replan
        )
        why = self.sentence(found.blocking) if found.blocking is not None else ""
        if found.outcome is backfill.Outcome.WAITS:
            waits = Plan(False, f"waits: {why}", plan.gang, plan.platform)
            return SteeredPlan(waits, found.outcome)
        if found.outcome is backfill.Outcome.STEERED:
            steered = replace(again[-1], reason=f"{again[-1].reason}; steered around a reservation: {why}")
            return SteeredPlan(steered, found.outcome)
        return SteeredPlan(plan, found.outcome)


def _pods_of(plan: Plan) -> tuple[Ints, Ints]:
    """(node per pod, GPUs per pod) of a feasible plan, pod set after pod set."""
    return np.asarray(plan.node_indices, np.int64), np.asarray(plan.gpus, np.int64)
