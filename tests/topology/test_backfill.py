"""Backfill around kept reservations: one pod judged on every node at once agrees with the whole-job rule node by
node, and a placement is kept, steered or refused as the reservations it meets say."""

from __future__ import annotations

import math
import random

import numpy as np

from kilter.topology.backfill import Outcome, blocked_nodes, by_start, steer
from kilter.topology.reservations import Holdings, Reservation, blocking_reservation
from tests.topology.test_reservations import NOW, random_scenario, reserve_in_order, space_of

Ints = np.ndarray


def test_one_pod_on_every_node_at_once_is_the_whole_job_rule_node_by_node() -> None:
    rng = random.Random(4139)
    blocked = passed = 0
    for _ in range(300):
        space, holdings = random_scenario(rng)
        reservations = [r for r, _ in reserve_in_order(rng, space, holdings, rng.randint(1, 4))]
        ordered = by_start(reservations)
        rows = Holdings.of(holdings)
        for _ in range(3):
            gpus = rng.randint(1, 4)
            end = rng.choice([NOW + 5, NOW + 35, NOW + 100, math.inf])
            owner = rng.choice([None, *(r.owner for r in reservations)])
            got = blocked_nodes(gpus, end, space, rows, reservations, NOW, owner)
            for n in range(len(space.free)):
                want = blocking_reservation([n], [gpus], end, space, rows, reservations, NOW, owner)
                assert (got[n] >= 0) == (want is not None), (n, gpus, end, owner)
                if want is not None:
                    assert ordered[int(got[n])] == want
                    blocked += 1
                else:
                    passed += 1
    assert blocked > 1000 and passed > 2000  # both answers are exercised


def _rack_job(space_nodes: int) -> tuple[Ints, Ints]:
    return np.arange(space_nodes, dtype=np.int64), np.full(space_nodes, 4, np.int64)


def test_a_placement_that_delays_a_reservation_is_steered_away_and_waits_when_nothing_else_holds_it() -> None:
    space = space_of(3, 2)  # racks 0, 1, 2 of two 4-GPU nodes, all idle
    gang = Reservation("ml/big", NOW + 100, NOW + 200, (0,), (2,), (0, 1), (4, 4), ((2, 4),))
    rows = Holdings.of([])
    nodes, gpus = np.array([0], np.int64), np.array([4], np.int64)
    asked: list[np.ndarray] = []

    def to_rack_2(ok: np.ndarray) -> tuple[Ints, Ints] | None:
        asked.append(ok.copy())
        return np.array([4], np.int64), np.array([4], np.int64)

    found = steer(nodes, gpus, math.inf, space, rows, [gang], NOW, "ml/small", to_rack_2)
    assert found.outcome is Outcome.STEERED and found.nodes is not None and found.nodes.tolist() == [4]
    assert found.blocking == gang
    assert asked[0].tolist() == [False, False, True, True, True, True]  # asked again without the reserved rack
    ends_first = steer(nodes, gpus, NOW + 50, space, rows, [gang], NOW, "ml/small", to_rack_2)
    assert ends_first.outcome is Outcome.BACKFILLED and ends_first.nodes is not None
    assert ends_first.nodes.tolist() == [0]  # it ends before the reservation starts: it stays
    nowhere = steer(nodes, gpus, math.inf, space, rows, [gang], NOW, "ml/small", lambda ok: None)
    assert nowhere.outcome is Outcome.WAITS and nowhere.nodes is None and nowhere.blocking == gang
    into_it = steer(nodes, gpus, math.inf, space, rows, [gang], NOW, "ml/small", lambda ok: (nodes, gpus))
    assert into_it.outcome is Outcome.WAITS  # a planner that lands in the rack again does not get through
    own = steer(nodes, gpus, math.inf, space, rows, [gang], NOW, "ml/big", to_rack_2)
    assert own.outcome is Outcome.CLEAR and own.nodes is not None and own.nodes.tolist() == [0]
    elsewhere = steer(np.array([2], np.int64), gpus, math.inf, space, rows, [gang], NOW, None, to_rack_2)
    assert elsewhere.outcome is Outcome.CLEAR and len(asked) == 1


def test_a_pod_that_leaves_the_gang_room_in_its_rack_is_not_blocked_and_one_that_ends_first_never_is() -> None:
    space = space_of(2, 2)  # rack 0: nodes 0, 1; rack 1: nodes 2, 3; all idle
    gang = Reservation("ml/six", NOW + 60, NOW + 160, (0,), (2,), (0, 1), (4, 2), ((1, 4), (1, 2)))
    rows = Holdings.of([])
    two = blocked_nodes(2, math.inf, space, rows, [gang], NOW)
    assert two.tolist() == [-1, -1, -1, -1]  # node 1's slack holds it; on node 0 the gang swaps its two pods
    three = blocked_nodes(3, math.inf, space, rows, [gang], NOW)
    assert three.tolist() == [0, 0, -1, -1]  # 4 + 1 left in the rack cannot hold pods of 4 and 2
    assert blocked_nodes(3, NOW + 60, space, rows, [gang], NOW).tolist() == [-1, -1, -1, -1]
    assert blocked_nodes(3, math.inf, space, rows, [gang], NOW, "ml/six").tolist() == [-1, -1, -1, -1]
    assert blocked_nodes(0, math.inf, space, rows, [gang], NOW).tolist() == [-1, -1, -1, -1]
