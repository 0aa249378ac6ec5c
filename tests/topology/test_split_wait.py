"""The rent-or-buy rule: budgets, decisions, the idle-fleet minimum and the annotations that set it."""

from __future__ import annotations

import math
from typing import Any

import pytest

from kilter.model import codec
from kilter.model.errors import InputError
from kilter.model.kueue import ClusterQueue, Cohort
from kilter.topology.fleet import build_fleet
from kilter.topology.split_wait import (
    QueueLoad,
    SplitWait,
    decide,
    fewest_domains_idle,
    format_duration,
    format_instant,
    nearest,
    parse_split_wait,
    queue_settings,
    resolve,
    room_may_come,
)
from tests.topology.builders import node, pod, rack


def test_budget_scales_with_extra_domains_and_runtime_and_stops_at_the_cap() -> None:
    rule = SplitWait(factor=1.0, max_s=10_000.0, split_slowdown=0.2)
    assert rule.budget_s(1, 3600.0) == pytest.approx(720.0)
    assert rule.budget_s(3, 3600.0) == pytest.approx(2160.0)
    assert rule.budget_s(2, 10 * 3600.0) == pytest.approx(10_000.0)
    assert rule.budget_s(0, 3600.0) == 0.0
    assert rule.budget_s(2, None) == 0.0
    assert SplitWait(factor=0.0).budget_s(2, 3600.0) == 0.0


def test_a_gang_waits_until_its_budget_is_spent_then_takes_what_it_has() -> None:
    rule = SplitWait(factor=2.0, max_s=86_400.0, split_slowdown=0.25)
    # budget = 2 x 0.25 x (4 - 2) x 6000 s = 6000 s
    early = decide(rule, domains_now=4, domains_min=2, expected_runtime_s=6000.0, waited_s=0.0)
    assert early.wait and early.remaining_s == pytest.approx(6000.0)
    assert early.reason == "waiting up to 1h40m for room in 2 domains; 4 available now"
    late = decide(rule, domains_now=4, domains_min=2, expected_runtime_s=6000.0, waited_s=6000.0)
    assert not late.wait and late.reason == ""
    at_minimum = decide(rule, domains_now=2, domains_min=2, expected_runtime_s=6000.0, waited_s=0.0)
    assert not at_minimum.wait
    unknown = decide(rule, domains_now=4, domains_min=2, expected_runtime_s=None, waited_s=0.0)
    assert not unknown.wait


def test_told_when_the_clock_started_a_decision_names_the_moment_its_budget_runs_out() -> None:
    rule = SplitWait(factor=2.0, max_s=86_400.0, split_slowdown=0.25)  # a 6000 s budget, as above
    started = 1_796_119_200.0  # 2026-12-01T10:00:00Z
    first = decide(rule, domains_now=4, domains_min=2, expected_runtime_s=6000.0, waited_s=600.0, started_s=started)
    later = decide(rule, domains_now=4, domains_min=2, expected_runtime_s=6000.0, waited_s=4000.0, started_s=started)
    assert first.until_s == later.until_s == started + 6000  # 11:40:00, whenever it is asked
    # The time left moves (6000 - 600 s = 1h30m, 6000 - 4000 s = 33m20s); the moment does not.
    assert (first.reason, later.reason) == (
        "waiting up to 1h30m for room in 2 domains; 4 available now",
        "waiting up to 33m20s for room in 2 domains; 4 available now",
    )
    standing = "waiting until 2026-12-01T11:40:00Z for room in 2 domains; 4 available now"
    assert first.standing == later.standing == standing
    unstarted = decide(rule, domains_now=4, domains_min=2, expected_runtime_s=6000.0, waited_s=600.0)
    assert unstarted.until_s is None and unstarted.standing == ""  # the moment only when the start is known


@pytest.mark.parametrize(
    ("unix_s", "text"),
    [
        pytest.param(1_796_119_200.0, "2026-12-01T10:00:00Z", id="a whole second"),
        pytest.param(1_796_119_200.25, "2026-12-01T10:00:01Z", id="a part of one: rounded up, never early"),
    ],
)
def test_instants_read_as_rfc_3339_in_utc(unix_s: float, text: str) -> None:
    assert format_instant(unix_s) == text


def test_settings_must_be_finite_and_not_negative() -> None:
    for bad in (dict(factor=-1.0), dict(max_s=math.nan), dict(split_slowdown=math.inf)):
        with pytest.raises(InputError):
            SplitWait(**bad)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (45, "45s"), (200, "3m20s"), (3600, "1h"), (6000, "1h40m"), (6001, "1h41m"), (90000, "1d1h")],
)
def test_durations_read_as_kubectl_prints_ages(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_idle_minimum_counts_failed_trays_and_ignores_busy_gpus() -> None:
    nodes = rack("r0") + rack("r1") + rack("r2", trays=17) + [node("r3-t00", labels={"nvidia.com/gpu.clique": "r3"})]
    busy = [pod(f"p{t}", f"r0-t{t:02d}", 4) for t in range(18)]
    fleet = build_fleet(nodes, busy)
    assert fewest_domains_idle(fleet, 0, ((18, 4),)) == 1
    assert fewest_domains_idle(fleet, 0, ((36, 4),)) == 2
    assert fewest_domains_idle(fleet, 0, ((53, 4),)) == 3
    assert fewest_domains_idle(fleet, 0, ((54, 4),)) == 4
    assert fewest_domains_idle(fleet, 0, ((18, 4), (1, 2))) == 2
    assert fewest_domains_idle(fleet, 0, ((55, 4),)) == 0


def test_annotations_set_factor_and_cap_and_refuse_nonsense() -> None:
    assert parse_split_wait(None, path="$") == (None, None)
    assert parse_split_wait({"kilter.dev/split-wait": "0.5", "kilter.dev/split-wait-max": "2h"}, path="$") == (
        0.5,
        7200.0,
    )
    assert parse_split_wait({"kilter.dev/split-wait": "0"}, path="$") == (0.0, None)
    for bad in ("-1", "nan", "inf", "lots", "1e9"):
        with pytest.raises(InputError, match=r"kilter\.dev/split-wait"):
            parse_split_wait({"kilter.dev/split-wait": bad}, path="$")
    with pytest.raises(InputError):
        parse_split_wait({"kilter.dev/split-wait-max": "soon"}, path="$")


def test_the_nearest_object_that_sets_a_key_decides_it_key_by_key() -> None:
    chain = [(None, 3600.0), (0.5, 60.0), (2.0, None)]
    assert nearest(chain) == (0.5, 3600.0)
    assert nearest([]) == (None, None)
    base = SplitWait(factor=1.0, max_s=7200.0, split_slowdown=0.3)
    assert resolve(base, chain) == SplitWait(factor=0.5, max_s=3600.0, split_slowdown=0.3)
    assert resolve(base, [(None, None)]) == base


def test_room_may_come_only_while_a_gpu_of_the_platform_runs_a_job() -> None:
    """An idle platform's plan now is the best it gives: waiting could only stall (and queue-held gangs could wait
    on each other for ever); a failed tray, idle, frees nothing either; another platform's jobs do not count."""
    amd = [node(f"m{i}", product="AMD_Instinct_MI355X", gpus=8, resource="amd.com/gpu") for i in range(2)]
    fleet = build_fleet(rack("r0") + rack("r1") + amd, [pod("a", "m0", 8, resource="amd.com/gpu")])
    nvidia = next(i for i, p in enumerate(fleet.platforms) if p.device_resource == "nvidia.com/gpu")
    mi355 = next(i for i, p in enumerate(fleet.platforms) if p.device_resource == "amd.com/gpu")
    fleet.bitmap.set_usable(fleet.node_index["r0-t03"], False)
    assert not room_may_come(fleet, nvidia)
    assert room_may_come(fleet, mi355)
    busy = build_fleet(rack("r0") + rack("r1"), [pod("p", "r1-t07", 1)])
    assert room_may_come(busy, 0)


def test_the_remembered_idle_minimum_follows_trays_failing_and_coming_back() -> None:
    """Remembered per fleet, the answer must still change the moment a node's usability does."""
    fleet = build_fleet(rack("r0") + rack("r1"), [])
    bm, at = fleet.bitmap, fleet.node_index
    assert fewest_domains_idle(fleet, 0, ((18, 4),)) == 1
    assert fewest_domains_idle(fleet, 0, ((18, 4),)) == 1  # remembered
    bm.set_usable(at["r0-t00"], False)
    assert fewest_domains_idle(fleet, 0, ((18, 4),)) == 1  # r1 still holds it
    bm.set_usable(at["r1-t05"], False)
    assert fewest_domains_idle(fleet, 0, ((18, 4),)) == 2  # neither rack does alone now
    assert fewest_domains_idle(fleet, 0, ((17, 4),)) == 1
    bm.set_usable(at["r0-t00"], True)
    assert fewest_domains_idle(fleet, 0, ((18, 4),)) == 1  # back


def test_failed_trays_move_the_fewest_domains_waiting_could_bring_but_not_the_unsplit_baseline() -> None:
    """Two questions: what waiting could win now (the wait rule) and what the gang runs unsplit (a split's cost)."""
    fleet = build_fleet(rack("r0") + rack("r1"), [])
    platform = fleet.platforms[0]
    for t in (0, 1):
        fleet.bitmap.set_usable(fleet.node_index[f"r0-t{t:02d}"], False)
        fleet.bitmap.set_usable(fleet.node_index[f"r1-t{t:02d}"], False)
    assert fewest_domains_idle(fleet, 0, ((18, 4),)) == 2  # 16 usable trays a rack: no rack holds it now
    assert platform.unsplit_domains(18) == 1  # yet split over two it runs as slowly as any split gang
    assert fewest_domains_idle(fleet, 0, ((16, 4),)) == platform.unsplit_domains(16) == 1


def _queue(kind: str, name: str, parent: str = "", **notes: str) -> Any:
    spec = {"cohortName": parent} if kind == "ClusterQueue" else {"parentName": parent} if parent else {}
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": {"name": name, "annotations": notes}}
    return codec.convert({**obj, "spec": spec}, ClusterQueue if kind == "ClusterQueue" else Cohort)


def test_queue_settings_take_each_key_from_the_queue_else_the_nearest_cohort_up_the_tree() -> None:
    wait, cap = "kilter.dev/split-wait", "kilter.dev/split-wait-max"
    cqs = [
        _queue("ClusterQueue", "a", "team", **{wait: "0"}),
        _queue("ClusterQueue", "b", "team"),
        _queue("ClusterQueue", "c", "nowhere"),  # a Cohort no object defines: the walk stops there
        _queue("ClusterQueue", "d", "loop1"),
    ]
    cohorts = [
        _queue("Cohort", "team", "org", **{cap: "2h"}),
        _queue("Cohort", "org", "", **{wait: "3", cap: "5h"}),
        _queue("Cohort", "loop1", "loop2", **{wait: "0.5"}),
        _queue("Cohort", "loop2", "loop1", **{cap: "1m"}),  # a cycle: each Cohort counted once
    ]
    found = queue_settings(cqs, cohorts)
    assert found.settings == {"a": (0.0, 7200.0), "b": (3.0, 7200.0), "c": (None, None), "d": (0.5, 60.0)}
    assert found.problems == ()


def test_a_queue_setting_that_does_not_read_counts_as_unset_and_is_named_once() -> None:
    wait, cap = "kilter.dev/split-wait", "kilter.dev/split-wait-max"
    cqs = [_queue("ClusterQueue", "a", "team", **{wait: "often", cap: "1h"})]
    cohorts = [_queue("Cohort", "team", "", **{wait: "2", cap: "soon"})]
    found = queue_settings(cqs, cohorts)
    assert found.settings == {"a": (2.0, 3600.0)}  # each bad key falls to the next that sets it
    assert [(p.kind, p.name) for p in found.problems] == [("Cohort", "team"), ("ClusterQueue", "a")]
    assert found.problems[0].line.startswith("Cohort team: 'soon' is not a duration")
    assert found.problems[0].line.endswith("; ignored: the setting above it, else the flag's, applies")
    refusal = found.problems[1].refusal()
    assert isinstance(refusal, InputError) and str(refusal).startswith("ClusterQueue a: kilter.dev/split-wait: 'often'")


def test_a_split_on_a_saturated_fleet_is_priced_beyond_any_wait_and_the_gang_holds_out() -> None:
    rule = SplitWait(factor=1.0, max_s=3600.0, split_slowdown=0.2)
    quiet = QueueLoad(waiting_jobs=0.0, usable_gpus=2880)
    turning = QueueLoad(waiting_jobs=0.5, usable_gpus=2880)  # half the time one job waited
    saturated = QueueLoad(waiting_jobs=40.0, usable_gpus=2880)
    assert rule.budget_s(1, 1000.0, quiet, 64) == pytest.approx(200.0)  # its own slowdown alone
    # One job waiting half the time is delayed 0.2 x 64 x 1000 / 2880 s per extra GPU-second's share.
    assert rule.budget_s(1, 1000.0, turning, 64) == pytest.approx(200.0 * (1 + 0.5 * 64 / 2880))
    assert rule.budget_s(1, 100_000.0, turning, 64) == 3600.0  # the cap bounds what the gang pays itself
    assert math.isinf(rule.budget_s(1, 1000.0, saturated, 64))  # the cap does not bound what the queue pays
    assert rule.budget_s(0, 1000.0, saturated, 64) == 0.0  # nothing to wait for
    waiting = decide(rule, domains_now=2, domains_min=1, expected_runtime_s=1000.0, waited_s=1e6, load=saturated,
                     gpus=64, started_s=0.0)  # fmt: skip
    assert waiting.wait and math.isinf(waiting.remaining_s) and waiting.until_s is None
    assert (
        waiting.reason
        == waiting.standing
        == ("waiting while jobs queue behind it: a split would slow them (for room in 1 domain; 2 available now)")
    )
    with pytest.raises(InputError):
        QueueLoad(waiting_jobs=-1.0, usable_gpus=10)
