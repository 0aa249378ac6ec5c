"""One gang's plan as the gang book holds it: its slots, and where it stands in its life.

A plan's life (``Life``) is one value with its transitions here, not flags
spread over the book: a plan is

* ``REFUSED``: an answer only, kept nowhere (a cap, the queue's limit, or an
  unseen pod that a member's plan has no room for);
* ``WAITING``: held back for room in fewer scale-up domains (``waits``):
  infeasible, holding no nodes, asked again after ``retry_s``;
* ``UNPLACEABLE``: it does not fit now: asked again after
  ``INFEASIBLE_RETRY_S``, or as soon as more GPUs are free than when it was
  made (``free_at``);
* ``OPEN``: it holds slots for the gang's pods still to come.

Beside the stage, a life says how the plan was made (``Origin``), whether a
queue admitted the gang (exempt from the namespace's caps), and, while the
pod it was made for is not in the state yet, which pod that is (``unseen``:
the plan is *unverified*, ``trust``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from kilter.gangs import ranks, repairs
from kilter.gangs.identity import GangId
from kilter.gangs.layout import SlotSpec
from kilter.model.core_v1 import Pod
from kilter.topology import verdicts
from kilter.topology.plan import Plan

__all__ = [
    "INFEASIBLE_RETRY_S",
    "GangPlan",
    "Life",
    "Origin",
    "PodRef",
    "Slot",
    "Stage",
    "Victim",
    "slots_of",
]

INFEASIBLE_RETRY_S = 5.0  # a gang that did not fit is planned again after this long, not on every pod


class Stage(enum.Enum):
    """Where a plan stands (module docstring)."""

    REFUSED = "refused"
    WAITING = "waiting"
    UNPLACEABLE = "unplaceable"
    OPEN = "open"


class Origin(enum.StrEnum):
    """How a plan was made: here, as a repair beside a running gang's pods, from a record in the cluster, or by the
    AdmissionCheck."""

    PLANNED = "planned"
    REPAIR = "repair"
    RECORD = "record"
    ADMISSION_CHECK = "admission-check"


class PodRef(NamedTuple):
    """The pod an unverified plan was made for: what the book looks for in the state."""

    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, pod: Pod) -> PodRef:
        return cls(pod.metadata.namespace, pod.metadata.name, pod.metadata.uid)


@dataclass(frozen=True)
class Life:
    """A plan's stage and what goes with it; every change is one of the methods below."""

    stage: Stage
    origin: Origin = Origin.PLANNED
    admitted: bool = False
    unseen: PodRef | None = None
    retry_s: float = INFEASIBLE_RETRY_S
    free_at: int = 0

    @classmethod
    def refused(cls) -> Life:
        return cls(Stage.REFUSED)

    @classmethod
    def held_back(cls, remaining_s: float) -> Life:
        """Waiting for fewer domains: asked again within ``INFEASIBLE_RETRY_S``, sooner if the budget runs out."""
        return cls(Stage.WAITING, retry_s=min(INFEASIBLE_RETRY_S, remaining_s))

    @classmethod
    def made(cls, plan: Plan, origin: Origin = Origin.PLANNED, *, admitted: bool = False) -> Life:
        return cls(Stage.OPEN if plan.feasible else Stage.UNPLACEABLE, origin, admitted)

    def asked_by(self, unseen: PodRef | None, *, admitted: bool, free_at: int) -> Life:
        """Made for a member (``unseen`` None) or a pod the state does not show yet, with the fleet's free GPUs."""
        return replace(self, unseen=unseen, admitted=admitted, free_at=free_at)

    def verify(self) -> Life:
        """A member of the gang asked: the plan is the gang's own now."""
        return replace(self, unseen=None)

    @property
    def verified(self) -> bool:
        return self.stage is not Stage.REFUSED and self.unseen is None

    def stands(self, age_s: float, free_gpus: int) -> bool:
        """Whether the plan is still the answer: open, or infeasible and neither due again nor outrun by GPUs freed
        since it was made."""
        return self.stage is Stage.OPEN or (age_s < self.retry_s and free_gpus <= self.free_at)


@dataclass(slots=True)
class Slot:
    """One planned pod's place: the node (by name, and its index in the fleet as of the plan's ``generation``).

    ``uid`` is the pod bound to the slot ("" while open); ``reserved`` says
    the slot's GPUs are held in the store's reservation for the gang (an open
    slot) rather than booked for its pod. ``rank`` is the rank of pod set
    ``pod_set`` whose pod the slot is for (``gangs.ranks`` holds a pod with
    that index to it; None: the plan is unranked, any pod of the shape may
    take it).
    """

    node: str
    node_index: int
    gpus: int
    uid: str = ""
    reserved: bool = True
    rank: int | None = None
    pod_set: str = ""

    @property
    def place(self) -> ranks.Place | None:
        return None if self.rank is None else ranks.Place(self.pod_set, self.rank)


class Victim(NamedTuple):
    """A pod a repair takes a lent spare back from, on the node it takes back."""

    namespace: str
    name: str
    uid: str
    node: str


_OPEN = Life(Stage.OPEN)


@dataclass
class GangPlan:
    gang: GangId
    plan: Plan
    slots: list[Slot]
    created: float
    generation: int
    life: Life = _OPEN
    pods: tuple[str, ...] = ()  # the gang's pods unbound when it was planned: where a record goes without an owner
    uids: dict[str, str] = field(default_factory=dict)  # UID of each object the record goes on, by name (signing)
    shapes: tuple[ranks.Shape, ...] = ()  # the gang's pod sets, whole: what a pod's index is a rank of
    repaired: tuple[repairs.Repaired, ...] = ()  # a repair plan's replacements: which rank went where, and why
    victims: tuple[Victim, ...] = ()  # pods a repair takes lent spares back from

    @property
    def open_gpus(self) -> int:
        """GPUs the plan holds for pods still to come (its slots no pod is bound to)."""
        return sum(s.gpus for s in self.slots if not s.uid)

    @property
    def feasible(self) -> bool:
        return self.plan.feasible

    @property
    def waiting(self) -> bool:
        """Held back for room in fewer domains (``waits``): infeasible, holding no nodes."""
        return self.life.stage is Stage.WAITING

    @property
    def verified(self) -> bool:
        """A pod of the gang that the state holds asked for it (``trust``); else not recorded yet."""
        return self.life.verified

    @property
    def admitted(self) -> bool:
        """A queue admitted the gang: exempt from the namespace's caps."""
        return self.life.admitted

    @property
    def origin(self) -> Origin:
        return self.life.origin

    def nodes_for(self, uid: str, gpus: int) -> list[int]:
        """Planned nodes this pod may use: its own slot if it has one, else every free slot of its shape."""
        own = [s.node_index for s in self.slots if s.uid == uid]
        if own:
            return own
        return sorted({s.node_index for s in self.slots if not s.uid and s.gpus == gpus})

    def hold(self, uid: str, gpus: int) -> verdicts.Hold:
        """What the verdict ladder needs of this plan for one pod: its planned nodes, or why the gang waits."""
        if not self.feasible:
            return verdicts.Hold(False, (), self.plan.reason, waits=self.waiting)
        return verdicts.Hold(True, self.nodes_for(uid, gpus), self.describe())

    def describe(self) -> str:
        taken = sum(1 for s in self.slots if s.uid)
        return f"gang {self.gang.key}: {self.plan.reason}; {taken}/{len(self.slots)} planned pods bound"


def slots_of(specs: Iterable[SlotSpec]) -> list[Slot]:
    """Slots from (node, node index, GPUs, uid, rank): open ones reserved, those a pod holds not."""
    return [Slot(n, i, g, u, not u, p.rank, p.pod_set) if p else Slot(n, i, g, u, not u) for n, i, g, u, p in specs]
