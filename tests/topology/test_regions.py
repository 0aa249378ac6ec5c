"""Which regions a waiting gang is sent to: each rule of the order, and the mixed-size ask against brute force."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from kilter.topology.regions import DomainRoom, GangAsk, RegionView, book, nominate, rank

GB = "GB200-NVL72"


def rack(trays: int, extra_gpus: int = 0) -> DomainRoom:
    """A rack with ``trays`` wholly free trays of 4 GPUs and ``extra_gpus`` free on a busy one."""
    return DomainRoom(GB, trays * 4 + extra_gpus, trays, 4)


def ask(pods: int = 16, **fields: object) -> GangAsk:
    base: dict[str, object] = {"platforms": (GB,), "pods": pods, "gpus_per_pod": 4, "home": "eu"}
    base.update(fields)
    return GangAsk(**base)  # type: ignore[arg-type]


def test_fewest_domains_comes_before_home() -> None:
    views = [RegionView("eu", (rack(9), rack(9))), RegionView("us", (rack(18),))]
    assert [c.region for c in rank(ask(), views)] == ["us", "eu"]


def test_home_or_the_data_region_breaks_a_tie_on_domains() -> None:
    views = [RegionView("ap", (rack(18),)), RegionView("eu", (rack(18),)), RegionView("us", (rack(18),))]
    assert nominate(ask(), views)[0] == "eu"
    assert nominate(ask(data_region="us"), views)[0] == "us"


def test_the_stated_preference_orders_equal_placements_and_limits_where_it_may_go() -> None:
    views = [RegionView("ap", (rack(18),)), RegionView("us", (rack(18),)), RegionView("sa", (rack(18),))]
    assert [c.region for c in rank(ask(home="xx", allowed=("us", "ap")), views)] == ["us", "ap"]
    assert [c.region for c in rank(ask(home="xx", avoided=frozenset({"ap"})), views)] == ["sa", "us"]


def test_best_fit_prefers_the_tightest_room() -> None:
    views = [RegionView("ap", (rack(18),)), RegionView("us", (rack(17),))]
    assert [c.region for c in rank(ask(home="xx"), views)] == ["us", "ap"]


def test_a_queue_without_headroom_or_unknown_there_is_no_candidate() -> None:
    views = [
        RegionView("ap", (rack(18),), {"ml/research": 63}),
        RegionView("us", (rack(18),), {"ml/other": 500}),
        RegionView("sa", (rack(18),), {"ml/research": 64}),
    ]
    assert [c.region for c in rank(ask(home="xx", queue="ml/research"), views)] == ["sa"]


def test_nominations_share_the_best_placement_and_are_at_most_three() -> None:
    views = [RegionView(f"r{i}", (rack(18),)) for i in range(5)] + [RegionView("split", (rack(9), rack(9)))]
    chosen = nominate(ask(home="xx"), views)
    assert chosen == ["r0", "r1", "r2"], "ties broken by name; never the region that would split it"
    assert nominate(ask(pods=100), views) == [], "fits nowhere now: nothing"


def test_a_launcher_beside_whole_tray_workers_fits_where_its_gpus_are() -> None:
    """16 workers of 4 GPUs and a launcher of 1: a rack of 16 free trays and 2 GPUs free on a busy one takes it.
    Asked as 17 pods of 4 (the largest size throughout), it would not."""
    launcher = GangAsk.of_pod_sets([(16, 4), (1, 1)], platforms=(GB,), home="xx")
    assert (launcher.pods, launcher.gpus_per_pod, launcher.other_gpus, launcher.gpus) == (16, 4, 1, 65)
    views = [RegionView("us", (rack(16, extra_gpus=2),)), RegionView("ap", (rack(9), rack(9)))]
    assert [(c.region, c.domains) for c in rank(launcher, views)] == [("us", 1), ("ap", 2)]
    assert [c.region for c in rank(ask(pods=17, home="xx"), views)] == ["ap"]


rooms = st.lists(
    st.builds(lambda trays, extra: rack(trays, extra), st.integers(0, 6), st.integers(0, 3)), min_size=1, max_size=6
)


@given(rooms=rooms, big=st.integers(1, 12), small=st.integers(0, 10))
def test_a_mixed_ask_needs_no_fewer_domains_than_brute_force_finds_for_either_constraint(
    rooms: list[DomainRoom], big: int, small: int
) -> None:
    """Each chosen count is a lower bound on the true need: no subset smaller satisfies both the largest pods'
    room and the GPUs; with no small pods, it is exactly the smallest subset that holds the pods."""
    gang = GangAsk.of_pod_sets([(big, 4), (small, 1)], platforms=(GB,), home="xx")
    ranked = rank(gang, [RegionView("r", tuple(rooms))])
    both = pods_only = gpus_only = None
    for k in range(1, len(rooms) + 1):
        for subset in itertools.combinations(rooms, k):
            pods_ok = sum(r.pods_of(4) for r in subset) >= big
            gpus_ok = sum(r.gpus_free for r in subset) >= gang.gpus
            if pods_ok and pods_only is None:
                pods_only = k
            if gpus_ok and gpus_only is None:
                gpus_only = k
            if pods_ok and gpus_ok and both is None:
                both = k
    if both is None:
        assert not ranked, "no subset holds it, not even all of them: not a candidate"
        return
    assert ranked, "a subset holds it, so the region is a candidate"
    assert pods_only is not None and gpus_only is not None
    assert max(pods_only, gpus_only) == ranked[0].domains <= both, "each constraint's own fewest, the larger"
    if small == 0:
        assert ranked[0].domains == pods_only == both


def test_a_booked_gang_takes_its_room_out_for_the_next_of_the_round() -> None:
    views = [RegionView("us", (rack(18),)), RegionView("ap", (rack(9), rack(9)))]
    first = nominate(ask(home="xx"), views)
    assert first == ["us"]
    after = [book(v, ask(home="xx")) if v.name == "us" else v for v in views]
    assert after[0].rooms == (DomainRoom(GB, 8, 2, 4),)
    assert nominate(ask(home="xx"), after) == ["ap"], "the second gang is not sent to the hole the first took"
    mixed = GangAsk.of_pod_sets([(2, 4), (3, 1)], platforms=(GB,), home="xx")
    assert book(RegionView("us", (rack(3, extra_gpus=2),)), mixed).rooms == (DomainRoom(GB, 3, 0, 4),), (
        "3 GPUs: no tray"
    )


def test_booking_smaller_pods_in_a_domain_of_larger_trays_leaves_no_more_trays_than_its_gpus_hold() -> None:
    eight = DomainRoom(GB, 72, 9, 8)  # 9 trays of 8 GPUs free
    small = GangAsk(platforms=(GB,), pods=2, gpus_per_pod=4, home="xx")
    (after,) = book(RegionView("us", (eight,)), small).rooms
    assert (after.gpus_free, after.largest_pods) == (64, 8), "8 GPUs taken: one tray fewer of 8"
