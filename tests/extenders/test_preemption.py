"""The preempt verb keeps, on a node where a repair takes a lent spare back, only the victims the repair chose (and
kilter evicts itself): the scheduler's preemption and kilter's eviction take the same pods, not two sets."""

from __future__ import annotations

from kilter.extenders import wire
from kilter.extenders.preemption import taken_back
from kilter.gangs import Victim

CHOSEN = (Victim("ml", "a", "uid-a", "r1-t16"), Victim("ml", "c", "uid-c", "r1-t17"))


def pods(*uids: str) -> list[wire.MetaPod]:
    return [wire.MetaPod(uid) for uid in uids]


def test_only_the_repairs_own_victims_are_kept_on_its_nodes() -> None:
    assert taken_back(pods("uid-b", "uid-a"), CHOSEN, "r1-t16") == pods("uid-a")
    assert taken_back(pods("uid-b"), CHOSEN, "r1-t16") == []  # the scheduler chose others: kept for none
    assert taken_back(pods("uid-x", "uid-y"), CHOSEN, "r2-t00") == pods("uid-x", "uid-y")  # not the repair's node
    assert taken_back(pods("uid-x"), (), "r1-t16") == pods("uid-x")  # no repair taking anything back
