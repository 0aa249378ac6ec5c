"""Nodes held whole by bound pods whose GPU count does not read, booked in the fleet as the store moves pods.

A bound pod whose ``nvidia.com/gpu`` is ``"abc"`` holds something kilter
cannot count (``topology.pod_gpus``), so its node counts as full: every GPU
no readable pod books there is booked as *unknown use*, and stays booked
while any such pod is bound there. The store books pods one event at a
time, so the rule must hold whatever the order of events:

* such a pod arriving fills its node (``hold``);
* a readable pod bound to a filled node takes its GPUs out of the unknown
  use (``make_room``), so that its GPUs are still booked once the unknown
  pod goes; the node stays full;
* GPUs released on a held node (a pod, an assumed booking or a reservation
  given back) are filled again (``fill``);
* the last such pod leaving gives the unknown use back (``drop``).

Unknown use is no pod's booking (``ClusterStore.booking`` does not list
it): nothing is known of it to preempt or repair. Every method takes the
fleet the GPUs are booked in; the store passes its current one and starts a
new ``WholeNodes`` with each rebuilt fleet.
"""

from __future__ import annotations

from kilter.topology.fleet import Fleet

__all__ = ["WholeNodes"]


class WholeNodes:
    """Per node, the unreadable pods bound there (uid: the line naming it) and the GPUs booked as unknown use."""

    def __init__(self) -> None:
        self._holders: dict[int, dict[str, str]] = {}
        self._node_of: dict[str, int] = {}
        self._filled: dict[int, int] = {}

    def hold(self, fleet: Fleet, uid: str, node: int, why: str) -> None:
        """Pod ``uid`` is bound to ``node`` with a count that does not read (``why`` names it): fill the node."""
        self._holders.setdefault(node, {})[uid] = why
        self._node_of[uid] = node
        self.fill(fleet, node)

    def drop(self, fleet: Fleet, uid: str) -> None:
        """Pod ``uid`` is gone or changed; the last unreadable pod of its node leaving frees the unknown use."""
        node = self._node_of.pop(uid, None)
        if node is None:
            return
        holders = self._holders[node]
        del holders[uid]
        if not holders:
            del self._holders[node]
            filled = self._filled.pop(node, 0)
            if filled:
                fleet.bitmap.release(node, filled)

    def make_room(self, fleet: Fleet, node: int, gpus: int) -> None:
        """Give back up to ``gpus`` of ``node``'s unknown use, for a readable pod bound there to book."""
        filled = self._filled.get(node, 0)
        give = min(gpus, filled)
        if give > 0:
            fleet.bitmap.release(node, give)
            self._filled[node] = filled - give

    def fill(self, fleet: Fleet, node: int | None = None) -> None:
        """Book every free GPU of ``node`` (None: of every held node) as unknown use."""
        for n in (node,) if node is not None else tuple(self._holders):
            if n not in self._holders:
                continue
            free = fleet.bitmap.node_free_gpus(n)
            if free > 0:
                fleet.bitmap.allocate(n, free)
                self._filled[n] = self._filled.get(n, 0) + free

    def lines(self) -> list[str]:
        """One line per unreadable pod, naming it and its node, in uid order."""
        return [why for _, why in sorted((uid, why) for held in self._holders.values() for uid, why in held.items())]
