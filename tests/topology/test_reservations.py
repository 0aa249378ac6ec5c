"""Reservations with backfill: the earliest start a reservation promises, checked against exhaustive search, and
no job let through ahead of one delays it."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence

import numpy as np
import pytest

from kilter.model.errors import InputError
from kilter.topology.fleet import build_fleet
from kilter.topology.reservations import (
    Holding,
    Holdings,
    NodeSpace,
    Reservation,
    avoid_nodes,
    blocking_reservation,
    earliest_start,
    expected_end,
    node_space,
    reason,
)
from tests.topology.builders import node, rack

NOW = 1_796_119_200.0  # 2026-12-01T10:00:00Z
GangSpec = tuple[tuple[int, int], ...]


def space_of(domains: int, per_domain: int, gpus: int = 4, free: Sequence[int] | None = None) -> NodeSpace:
    n = domains * per_domain
    capacity = np.full(n, gpus, np.int64)
    return NodeSpace(
        np.repeat(np.arange(domains), per_domain).astype(np.int64),
        capacity,
        capacity.copy() if free is None else np.asarray(free, np.int64),
        domains,
    )


def busy(space: NodeSpace, holdings: Sequence[Holding]) -> NodeSpace:
    """The space with the holdings' GPUs taken from its free ones."""
    free = space.free.copy()
    for h in holdings:
        for n, g in zip(h.nodes, h.gpus, strict=True):
            free[n] -= g
    assert (free >= 0).all()
    return NodeSpace(space.node_domain, space.capacity, free, space.n_domains)


# --- exhaustive search, written independently of the module -------------------------------------------------------


def avail_at(
    space: NodeSpace, holdings: Sequence[Holding], earlier: Sequence[Reservation], t: float, run: float
) -> list[int]:
    out = []
    for n in range(len(space.free)):
        free = int(space.free[n]) + sum(
            g
            for h in holdings
            for m, g in zip(h.nodes, h.gpus, strict=True)
            if m == n and max(h.expected_end_s, NOW) <= t
        )
        free = min(free, int(space.capacity[n]))
        end = run if run > t else math.nextafter(t, math.inf)
        for r in earlier:
            r_end = r.expected_end_s if r.expected_end_s > r.start_s else math.nextafter(r.start_s, math.inf)
            if r.start_s < end and r_end > t:
                free -= sum(g for m, g in zip(r.nodes, r.gpus, strict=True) if m == n)
        out.append(max(free, 0))
    return out


def packs(avail: list[int], pods: list[int]) -> bool:
    """Whether every pod (GPUs each) fits some node, trying every assignment."""
    if not pods:
        return True
    first, rest = pods[0], pods[1:]
    for n, a in enumerate(avail):
        if a >= first:
            avail[n] -= first
            ok = packs(avail, rest)
            avail[n] += first
            if ok:
                return True
    return False


def fewest_brute(space: NodeSpace, avail: list[int], gang: GangSpec, k: int) -> int:
    pods = sorted((g for c, g in gang for _ in range(c)), reverse=True)
    for j in range(1, k + 1):
        for subset in itertools.combinations(range(space.n_domains), j):
            nodes = [n for n in range(len(avail)) if int(space.node_domain[n]) in subset]
            if packs([avail[n] for n in nodes], pods):
                return j
    return 0


def brute_start(
    space: NodeSpace,
    holdings: Sequence[Holding],
    earlier: Sequence[Reservation],
    gang: GangSpec,
    k: int,
    runtime: float,
) -> tuple[float, int] | None:
    ends = {NOW} | {max(h.expected_end_s, NOW) for h in holdings} | {r.expected_end_s for r in earlier}
    for t in sorted(e for e in ends if math.isfinite(e) and e >= NOW):
        j = fewest_brute(space, avail_at(space, holdings, earlier, t, t + runtime), gang, k)
        if j:
            return t, j
    return None


def random_scenario(rng: random.Random) -> tuple[NodeSpace, list[Holding]]:
    domains, per_domain = rng.randint(3, 4), rng.randint(2, 3)
    space = space_of(domains, per_domain)
    if rng.random() < 0.2:  # an unusable node counts nothing
        capacity = space.capacity.copy()
        capacity[rng.randrange(len(capacity))] = 0
        space = NodeSpace(space.node_domain, capacity, capacity.copy(), domains)
    free = space.free.copy()
    holdings = []
    for _ in range(rng.randint(0, 2 * len(free))):
        n = rng.randrange(len(free))
        if free[n] == 0:
            continue
        g = rng.randint(1, int(free[n]))
        free[n] -= g
        end = math.inf if rng.random() < 0.1 else NOW + rng.choice([-5, 0, 10, 20, 30, 40, 60])
        holdings.append(Holding((n,), (g,), end))
    return busy(space, holdings), holdings


def random_gang(rng: random.Random) -> GangSpec:
    shape = rng.randrange(3)
    if shape == 0:  # one pod set, any size
        return ((rng.randint(1, 5), rng.randint(1, 4)),)
    if shape == 1:  # whole nodes plus the rest, as trace jobs become pods
        return ((rng.randint(1, 3), 4), (1, rng.randint(1, 3)))
    return ((rng.randint(1, 2), 4), (rng.randint(0, 3), 2), (rng.randint(1, 3), 1))  # sizes dividing each other


def reserve_in_order(
    rng: random.Random, space: NodeSpace, holdings: Sequence[Holding], gangs: int
) -> list[tuple[Reservation, int]]:
    """Reservations as a scheduler would make them: each gang after the ones before it."""
    made: list[tuple[Reservation, int]] = []
    for i in range(gangs):
        k = rng.randint(1, space.n_domains)
        runtime = rng.choice([5.0, 25.0, 50.0])
        r = earliest_start(
            f"ns/gang-{i}", random_gang(rng), k, space, Holdings.of(holdings), [m for m, _ in made], NOW, runtime
        )
        if r is not None:
            made.append((r, k))
    return made


def test_the_earliest_start_matches_exhaustive_search_over_times_domains_and_pod_layouts() -> None:
    rng = random.Random(39)
    starts = later = never = 0
    for _ in range(300):
        space, holdings = random_scenario(rng)
        earlier = [r for r, _ in reserve_in_order(rng, space, holdings, rng.randint(0, 2))]
        gang, k = random_gang(rng), rng.randint(1, space.n_domains)
        runtime = rng.choice([5.0, 25.0, 50.0, math.inf])
        got = earliest_start("ml/llama", gang, k, space, Holdings.of(holdings), earlier, NOW, runtime)
        want = brute_start(space, holdings, earlier, gang, k, runtime)
        if want is None:
            never += 1
            assert got is None
            continue
        assert got is not None
        starts += 1
        later += got.start_s > NOW
        t, fewest = want
        assert got.start_s == t
        assert len(got.domains) == fewest <= k
        assert got.expected_end_s == t + runtime
        avail = avail_at(space, holdings, earlier, t, t + runtime)
        assert all(
            avail[n] >= g and int(space.node_domain[n]) in got.domains for n, g in zip(got.nodes, got.gpus, strict=True)
        )
        assert sum(got.gpus) == sum(c * g for c, g in gang)  # the claim is exactly the gang's pods, node by node
        assert packs(list(got.gpus), sorted((g for c, g in gang for _ in range(c)), reverse=True))
        assert sum(got.pods) == sum(c for c, _ in gang)
    assert starts > 200 and later > 60 and never > 25  # every branch is exercised


def in_own_domains(space: NodeSpace, r: Reservation) -> NodeSpace:
    capacity = np.where(np.isin(space.node_domain, r.domains), space.capacity, 0)
    return NodeSpace(space.node_domain, capacity, np.minimum(space.free, capacity), space.n_domains)


def test_no_job_admitted_ahead_of_a_reservation_delays_it_and_refusals_are_not_all_needless() -> None:
    rng = random.Random(7)
    admitted = refused = delaying = 0
    for _ in range(200):
        space, holdings = random_scenario(rng)
        made = reserve_in_order(rng, space, holdings, rng.randint(1, 4))
        reservations = [r for r, _ in made]
        for _ in range(4):
            free_nodes = [n for n in range(len(space.free)) if space.free[n] > 0]
            if not free_nodes:
                break
            nodes = rng.sample(free_nodes, min(len(free_nodes), rng.randint(1, 2)))
            gpus = [rng.randint(1, int(space.free[n])) for n in nodes]
            end = rng.choice([NOW + 5, NOW + 35, NOW + 100, math.inf])
            job = Holding(tuple(nodes), tuple(gpus), end)
            blocker = blocking_reservation(nodes, gpus, end, space, Holdings.of(holdings), reservations, NOW)
            ok = blocker is None
            with_job, after = busy(space, [job]), Holdings.of([*holdings, job])
            # each reservation alone, around the claims made before it; and all of them together, in their domains
            delays, kept = False, list[Reservation]()
            for i, (r, k) in enumerate(made):
                runtime = r.expected_end_s - r.start_s
                alone = earliest_start(r.owner, r.pod_sets, k, with_job, after, reservations[:i], NOW, runtime)
                delays |= alone is None or alone.start_s > r.start_s
                own = in_own_domains(with_job, r)
                again = earliest_start(r.owner, r.pod_sets, len(r.domains), own, after, kept, NOW, runtime)
                delays |= again is None or again.start_s > r.start_s
                kept.append(r if again is None else again)
            if ok:
                admitted += 1
                assert not delays
            else:
                refused += 1
                delaying += delays
    assert admitted > 300 and refused > 350 and delaying > 350  # most refusals would really delay


def two_racks_of_four(rack1: Sequence[tuple[int, float]]) -> tuple[NodeSpace, list[Holding]]:
    """Rack 0 busy until NOW+100; rack 1's nodes 4-7 as (GPUs held, expected end)."""
    holdings = [Holding((n,), (4,), NOW + 100) for n in range(4)]
    holdings += [Holding((4 + i,), (g,), end) for i, (g, end) in enumerate(rack1) if g]
    return busy(space_of(2, 4), holdings), holdings


def test_a_long_job_on_capacity_the_reservation_does_not_need_starts_and_one_on_its_claim_is_refused() -> None:
    space, holdings = two_racks_of_four([(0, 0), (4, NOW + 50), (4, NOW + 60), (2, NOW + 1000)])
    r = earliest_start("ml/llama-405b", ((3, 4),), 1, space, Holdings.of(holdings), [], NOW, 3600.0)
    assert r is not None and (r.start_s, r.domains, r.pods, r.nodes) == (NOW + 60, (1,), (3,), (4, 5, 6))
    args = (space, Holdings.of(holdings), [r], NOW)
    assert blocking_reservation([7], [2], math.inf, *args) is None  # node 7's two free GPUs: the gang never needs them
    assert blocking_reservation([4], [4], math.inf, *args) == r  # the free node the gang counts on
    assert blocking_reservation([4], [4], NOW + 60, *args) is None  # ...unless it is gone by the start
    mine = blocking_reservation([4], [4], math.inf, *args, owner="ml/llama-405b")
    assert mine is None  # nor does it block its own gang
    # and the refusal is real: with node 4 taken, the gang waits for rack 0
    job = Holding((4,), (4,), math.inf)
    later = earliest_start(
        "ml/llama-405b", ((3, 4),), 1, busy(space, [job]), Holdings.of([*holdings, job]), [], NOW, 3600.0
    )
    assert later is not None and later.start_s == NOW + 100 and later.domains == (0,)


def test_a_job_on_a_claimed_node_starts_when_the_reserved_rack_still_holds_the_gang_around_it() -> None:
    space, holdings = two_racks_of_four([(0, 0), (4, NOW + 50), (4, NOW + 50), (4, math.inf)])
    r = earliest_start("ml/a", ((2, 4),), 1, space, Holdings.of(holdings), [], NOW, 600.0)
    assert r is not None and (r.start_s, r.nodes) == (NOW + 50, (4, 5))
    args = (space, Holdings.of(holdings), [r], NOW)
    assert blocking_reservation([4], [4], NOW + 200, *args) is None  # nodes 5 and 6 hold the gang at its start
    assert blocking_reservation([4, 5], [4, 4], NOW + 200, *args) is not None  # but not around a job on two of them


def test_a_job_waits_rather_than_move_one_reservation_onto_another_in_the_same_rack() -> None:
    holdings = [Holding((0,), (4,), NOW + 10), Holding((2,), (4,), NOW + 10)]
    space = busy(space_of(1, 3), holdings)  # node 1 free now, nodes 0 and 2 from NOW + 10
    a = earliest_start("ml/a", ((1, 4), (1, 3)), 1, space, Holdings.of(holdings), [], NOW, 50.0)
    assert a is not None and (a.start_s, a.nodes, a.gpus) == (NOW + 10, (0, 1), (4, 3))
    b = earliest_start("ml/b", ((2, 1),), 1, space, Holdings.of(holdings), [a], NOW, 50.0)
    assert b is not None and (b.start_s, b.nodes, b.gpus) == (NOW + 10, (1, 2), (1, 1))
    # Around a job on node 1, a alone still fits (nodes 0 and 2) and so does b alone (node 2), not both.
    assert blocking_reservation([1], [4], math.inf, space, Holdings.of(holdings), [a, b], NOW) == a
    job = Holding((1,), (4,), math.inf)
    with_job, after = busy(space, [job]), Holdings.of([*holdings, job])
    a2 = earliest_start("ml/a", ((1, 4), (1, 3)), 1, with_job, after, [], NOW, 50.0)
    assert a2 is not None and (a2.start_s, a2.nodes) == (NOW + 10, (0, 2))
    b2 = earliest_start("ml/b", ((2, 1),), 1, with_job, after, [a2], NOW, 50.0)
    assert b2 is not None and b2.start_s > b.start_s


def test_a_gang_takes_the_tightest_room_and_a_node_gone_unusable_frees_nothing() -> None:
    roomy = space_of(2, 2, free=[4, 4, 0, 4])
    r = earliest_start("ml/a", ((1, 4),), 1, roomy, Holdings.of([]), [], NOW, 60.0)
    assert r is not None and (r.domains, r.nodes) == ((1,), (3,))  # leave rack 0 whole
    half = space_of(1, 2, free=[4, 2])
    r = earliest_start("ml/a", ((1, 2),), 1, half, Holdings.of([]), [], NOW, 60.0)
    assert r is not None and r.nodes == (1,)  # leave node 0 whole
    capacity = np.asarray([0, 4], np.int64)
    broken = NodeSpace(np.zeros(2, np.int64), capacity, np.zeros(2, np.int64), 1)
    holdings = Holdings.of([Holding((0,), (4,), NOW + 10), Holding((1,), (4,), NOW + 20)])
    r = earliest_start("ml/a", ((1, 4),), 1, broken, holdings, [], NOW, 60.0)
    assert r is not None and (r.start_s, r.nodes) == (NOW + 20, (1,))


def test_earlier_reservations_claim_their_capacity_for_their_window_only() -> None:
    space = space_of(2, 2)
    first = earliest_start("ml/a", ((2, 4),), 1, space, Holdings.of([]), [], NOW, 100.0)
    assert first is not None and (first.start_s, first.domains) == (NOW, (0,))
    second = earliest_start("ml/b", ((2, 4),), 1, space, Holdings.of([]), [first], NOW, 100.0)
    assert second is not None and (second.start_s, second.domains) == (NOW, (1,))
    third = earliest_start("ml/c", ((3, 4),), 2, space, Holdings.of([]), [first, second], NOW, 10.0)
    assert third is not None and third.start_s == NOW + 100  # both claims end then
    endless = earliest_start("ml/d", ((2, 4),), 1, space, Holdings.of([]), [first, second], NOW, None)
    assert endless is not None and endless.start_s == NOW + 100 and endless.expected_end_s == math.inf


def test_a_gang_that_never_fits_or_waits_on_a_job_without_an_estimate_gets_no_reservation() -> None:
    space = space_of(2, 2)
    assert earliest_start("ml/a", ((5, 4),), 2, space, Holdings.of([]), [], NOW, 60.0) is None
    assert earliest_start("ml/a", ((3, 4),), 1, space, Holdings.of([]), [], NOW, 60.0) is None  # k = 1: one rack
    forever = [Holding((0, 1, 2), (4, 4, 4), math.inf)]
    assert earliest_start("ml/a", ((2, 4),), 1, busy(space, forever), Holdings.of(forever), [], NOW, 60.0) is None


def test_expected_end_trusts_the_estimate_until_it_is_overrun_then_expects_as_long_again() -> None:
    assert expected_end(NOW - 100, 300.0, NOW) == NOW + 200
    assert expected_end(NOW - 500, 300.0, NOW) == NOW + 500
    assert expected_end(NOW - 300, 300.0, NOW) == NOW + 300
    assert expected_end(NOW - 100, None, NOW) == math.inf


def test_the_fleet_helper_counts_unusable_nodes_as_nothing_and_the_reason_names_rack_owner_and_start() -> None:
    nodes = [*rack("r0", trays=2, gpus=4), *rack("r1", trays=2, gpus=4)]
    nodes[1] = node(nodes[1].metadata.name, gpus=4, ready=False, labels=nodes[1].metadata.labels)
    fleet = build_fleet(nodes, [])
    space = node_space(fleet)
    assert space.capacity.tolist() == [4, 0, 4, 4] and space.free.tolist() == [4, 0, 4, 4]
    r = earliest_start("ml/llama-405b", ((2, 4),), 1, space, Holdings.of([]), [], NOW, 60.0)
    assert r is not None and r.domains == (1,)  # rack r0 lost a tray
    names = [f"rack {d}" for d in fleet.domain_ids]
    assert reason(r, names) == "rack r1 is reserved for ml/llama-405b from 2026-12-01T10:00:00Z"
    two = Reservation("ml/x", NOW + 0.5, math.inf, (0, 1), (1, 1), (0, 2), (4, 4), ((2, 4),))
    assert reason(two, lambda d: names[d]) == "rack r0 and rack r1 are reserved for ml/x from 2026-12-01T10:00:01Z"
    assert avoid_nodes(space, [r], NOW + 30).tolist() == [False, False, True, True]
    assert avoid_nodes(space, [r], NOW).tolist() == [False] * 4  # a job gone by the start may go there
    assert avoid_nodes(space, [r], math.inf, owner="ml/llama-405b").tolist() == [False] * 4


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: earliest_start("a", ((1, 4),), 0, space_of(1, 1), Holdings.of([]), [], NOW, 1.0), "at least 1 domain"),
        (lambda: earliest_start("a", ((1, 4),), 1, space_of(1, 1), Holdings.of([]), [], math.nan, 1.0), "NaN"),
        (lambda: earliest_start("a", ((1, 4),), 1, space_of(1, 1), Holdings.of([]), [], NOW, math.nan), "NaN"),
        (lambda: earliest_start("a", ((1, 4),), 1, space_of(1, 1), Holdings.of([]), [], NOW, -1.0), ">= 0 seconds"),
        (lambda: earliest_start("a", ((-1, 4),), 1, space_of(1, 1), Holdings.of([]), [], NOW, 1.0), "pod set"),
        (lambda: earliest_start("a", ((2, 0),), 1, space_of(1, 1), Holdings.of([]), [], NOW, 1.0), "pod set"),
        (lambda: Holdings.of([Holding((0,), (-2,), NOW)]), "negative"),
        (lambda: Holdings.of([Holding((0,), (2,), math.nan)]), "NaN"),
        (lambda: Holdings.of([Holding((0, 1), (2,), NOW)]), "one GPU count per node"),
        (lambda: space_of(1, 2, free=[4, -1]), ">= 0"),
        (lambda: space_of(1, 2, free=[4, 5]), "more free GPUs"),
        (lambda: expected_end(NOW, -5.0, NOW), ">= 0 seconds"),
        (lambda: expected_end(math.nan, 5.0, NOW), "NaN"),
        (lambda: blocking_reservation([0], [-4], NOW, space_of(1, 1), Holdings.of([]), [], NOW), ">= 0"),
        (lambda: blocking_reservation([0], [4], math.nan, space_of(1, 1), Holdings.of([]), [], NOW), "NaN"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(call: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        call()  # type: ignore[operator]
