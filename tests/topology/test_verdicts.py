"""The node-fit ladder: each rung in order, the vector entry equal to the scalar one, one sentence per verdict."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter.model import codec
from kilter.model.core_v1 import PodSpec
from kilter.model.errors import InputError
from kilter.topology import spares
from kilter.topology import verdicts as v
from kilter.topology.fleet import Fleet, build_fleet
from tests.topology.builders import CLIQUE, node, pod
from tests.topology.test_spares import brute_force as spares_by_hand

ZONE = "example.com/zone"


def spec(**fields: Any) -> PodSpec:
    return codec.convert({"containers": [], **fields}, PodSpec)


def small_fleet() -> Fleet:
    """r1: four 4-GPU GB200 trays (t02 cordoned, t03 in zone b); one 8-GPU MI300X node."""
    nodes = [
        node("r1-t00", labels={CLIQUE: "r1", ZONE: "a"}),
        node("r1-t01", labels={CLIQUE: "r1", ZONE: "a"}),
        node("r1-t02", labels={CLIQUE: "r1", ZONE: "a"}, cordoned=True),
        node("r1-t03", labels={CLIQUE: "r1", ZONE: "b"}),
        node("mi-0", product="AMD_Instinct_MI300X", gpus=8, resource="amd.com/gpu"),
    ]
    return build_fleet(nodes, [pod("busy", "r1-t01", 3)])


def codes_by_name(fleet: Fleet, verdict: v.Verdicts, names: list[str]) -> dict[str, int]:
    return dict(zip(names, verdict.codes.tolist(), strict=True))


def index_of(fleet: Fleet, names: list[str]) -> np.ndarray[Any, np.dtype[np.int32]]:
    return np.array([fleet.node_index.get(n, -1) for n in names], dtype=np.int32)


NAMES = ["r1-t00", "r1-t01", "r1-t02", "r1-t03", "mi-0", "nowhere"]


@pytest.mark.parametrize(
    ("gpus", "fields", "expected"),
    [
        pytest.param(
            2,
            {},
            [v.PASS, v.FULL, v.UNUSABLE, v.PASS, v.OTHER_KIND, v.UNKNOWN],
            id="2 GPUs: t01 has 4-3=1 free, so full",
        ),
        pytest.param(
            5,
            {},
            [v.TOO_SMALL, v.TOO_SMALL, v.UNUSABLE, v.TOO_SMALL, v.OTHER_KIND, v.UNKNOWN],
            id="5 GPUs: no 4-GPU tray is big enough",
        ),
        pytest.param(
            5,
            {"nodeSelector": {ZONE: "b"}},
            [v.NOT_ELIGIBLE, v.NOT_ELIGIBLE, v.UNUSABLE, v.TOO_SMALL, v.OTHER_KIND, v.UNKNOWN],
            id="the selector rung comes before size",
        ),
    ],
)
def test_each_node_gets_the_first_rung_it_fails(gpus: int, fields: dict[str, Any], expected: list[int]) -> None:
    fleet = small_fleet()
    got = v.Ladder().judge(fleet, index_of(fleet, NAMES), resource="nvidia.com/gpu", gpus=gpus, spec=spec(**fields))
    assert got.codes.tolist() == expected


def test_a_gang_pod_is_held_to_its_planned_nodes_whatever_is_free() -> None:
    fleet = small_fleet()
    t01 = fleet.node_index["r1-t01"]
    hold = v.Hold(True, [t01], "gang ml/gang/g: planned")
    got = v.Ladder().judge(fleet, index_of(fleet, NAMES), resource="nvidia.com/gpu", gpus=2, spec=spec(), hold=hold)
    # t01 shows 1 free GPU to kilter, but the pod's 2 are reserved there by its plan: it passes.
    assert got.codes.tolist() == [v.NOT_PLANNED, v.PASS, v.UNUSABLE, v.NOT_PLANNED, v.OTHER_KIND, v.UNKNOWN]


def test_a_gang_that_does_not_fit_yet_waits_on_every_node_that_could_hold_its_pod() -> None:
    fleet = small_fleet()
    hold = v.Hold(False, (), "needs 3 domains")
    got = v.Ladder().judge(fleet, index_of(fleet, NAMES), resource="nvidia.com/gpu", gpus=2, spec=spec(), hold=hold)
    assert got.codes.tolist() == [v.GANG_WAITS, v.GANG_WAITS, v.UNUSABLE, v.GANG_WAITS, v.OTHER_KIND, v.UNKNOWN]
    assert v.is_resolvable(got.codes).tolist() == [True, True, False, True, False, False]


def test_the_schedulers_own_idle_count_caps_what_is_free() -> None:
    fleet = small_fleet()
    t00 = fleet.node_index["r1-t00"]
    ladder = v.Ladder()
    # kilter sees 4 free on t00; Volcano says 1 is idle: min(4, 1) = 1 < 2.
    assert ladder.judge_one(fleet, t00, resource="nvidia.com/gpu", gpus=2, spec=spec(), idle=1) == (v.FULL, 1, 4)
    held = v.Hold(True, [t00], "planned")
    assert ladder.judge_one(fleet, t00, resource="nvidia.com/gpu", gpus=2, spec=spec(), hold=held, idle=1) == (
        v.FULL,
        1,
        4,
    )
    assert ladder.judge_one(fleet, t00, resource="nvidia.com/gpu", gpus=2, spec=spec(), hold=held, idle=2)[0] == v.PASS


@pytest.mark.parametrize(
    ("code", "free", "total", "sentence"),
    [
        pytest.param(v.FULL, 1, 4, "1 of 4 nvidia.com/gpu free; the pod needs 2", id="full"),
        pytest.param(v.TOO_SMALL, 4, 4, "the node has 4 nvidia.com/gpu; the pod needs 2", id="too small"),
        pytest.param(v.UNKNOWN, 0, 0, "not a GPU node in kilter's model of the fleet", id="unknown"),
        pytest.param(v.OTHER_KIND, 8, 8, "the node's GPUs are not nvidia.com/gpu", id="other kind"),
        pytest.param(v.NOT_PLANNED, 4, 4, "kilter holds this pod to its gang's plan (the plan)", id="not planned"),
        pytest.param(v.GANG_WAITS, 4, 4, "the gang does not fit yet: the plan", id="gang waits"),
        pytest.param(
            v.SPARE, 4, 4, "kept spare for repairs of running gangs (kilter.dev/spare-nodes-per-domain)", id="spare"
        ),
    ],
)
def test_every_verdict_has_one_sentence(code: int, free: int, total: int, sentence: str) -> None:
    hold = v.Hold(False, (), "the plan")
    assert v.reason(code, gpus=2, resource="nvidia.com/gpu", free=free, total=total, hold=hold) == sentence
    assert v.Reasons(gpus=2, resource="nvidia.com/gpu", hold=hold)(code, free, total) == sentence


def test_a_pod_asking_for_two_gpu_kinds_is_bad_input() -> None:
    assert v.gpu_ask([("nvidia.com/gpu", 0), ("amd.com/gpu", 2)]) == ("amd.com/gpu", 2)
    assert v.gpu_ask([("nvidia.com/gpu", 0)]) is None
    with pytest.raises(InputError, match=r"the task asks for several GPU kinds: amd\.com/gpu, nvidia\.com/gpu"):
        v.gpu_ask([("nvidia.com/gpu", 4000.0), ("amd.com/gpu", 1000.0)], who="the task")


# ---------------------------------------------------------------------------- vector == scalar == brute force


def brute_force(fleet: Fleet, node: int, *, gpus: int, zone: str | None, hold: v.Hold | None, idle: int | None) -> int:
    """The ladder as DESIGN prose states it, rung by rung, from the fleet's raw facts."""
    if node < 0:
        return v.UNKNOWN
    if fleet.platform_of_node(node).device_resource != "nvidia.com/gpu":
        return v.OTHER_KIND
    if not fleet.bitmap.node_usable_flags[node]:
        return v.UNUSABLE
    if zone is not None and fleet.node_labels[node].get(ZONE) != zone:
        return v.NOT_ELIGIBLE
    total = int(fleet.bitmap.node_gpu_counts[node])
    if total < gpus:
        return v.TOO_SMALL
    if hold is not None:
        if not hold.feasible:
            return v.GANG_WAITS
        if node not in hold.nodes:
            return v.NOT_PLANNED
        return v.FULL if idle is not None and idle < gpus else v.PASS
    if fleet.spare_nodes is not None and node in spares_by_hand(fleet):
        return v.SPARE
    free = total - int(fleet.bitmap.node_used_gpus[node])
    if idle is not None:
        free = min(free, idle)
    return v.FULL if free < gpus else v.PASS


@st.composite
def cases(draw: st.DrawFn) -> tuple[Fleet, int, str | None, v.Hold | None, list[int | None]]:
    n = draw(st.integers(1, 9))
    nodes, pods = [], []
    for i in range(n):
        amd = draw(st.booleans()) and i % 3 == 2
        gpus = draw(st.sampled_from([4, 8])) if not amd else 8
        name = f"n{i:02d}"
        zone = draw(st.sampled_from(["a", "b"]))
        if amd:
            nodes.append(node(name, product="AMD_Instinct_MI300X", gpus=8, resource="amd.com/gpu"))
        else:
            nodes.append(node(name, gpus=gpus, labels={CLIQUE: f"r{i // 4}", ZONE: zone}, cordoned=draw(st.booleans())))
            used = draw(st.integers(0, gpus))
            if used:
                pods.append(pod(f"p{i}", name, used))
    fleet = build_fleet(nodes, pods)
    spares.assign(
        fleet, draw(st.lists(st.integers(0, 3), min_size=len(fleet.domain_ids), max_size=len(fleet.domain_ids)))
    )
    gpus = draw(st.integers(1, 8))
    wanted_zone = draw(st.sampled_from([None, "a", "b"]))
    hold: v.Hold | None = None
    kind = draw(st.sampled_from(["none", "waits", "planned"]))
    if kind == "waits":
        hold = v.Hold(False, (), "waits")
    elif kind == "planned":
        hold = v.Hold(True, draw(st.lists(st.integers(0, fleet.n_nodes - 1), max_size=4)), "planned")
    idle = [draw(st.none() | st.integers(0, 8)) for _ in range(fleet.n_nodes + 1)]
    return fleet, gpus, wanted_zone, hold, idle


@settings(max_examples=150, deadline=None)
@given(cases())
def test_vector_and_scalar_entries_equal_the_ladder_done_by_hand(
    case: tuple[Fleet, int, str | None, v.Hold | None, list[int | None]],
) -> None:
    fleet, gpus, zone, hold, idles = case
    pod_spec = spec(nodeSelector={ZONE: zone}) if zone else spec()
    ladder = v.Ladder()
    index = np.arange(-1, fleet.n_nodes, dtype=np.int32)
    vector = ladder.judge(fleet, index, resource="nvidia.com/gpu", gpus=gpus, spec=pod_spec, hold=hold)
    for at, node_index in enumerate(index.tolist()):
        want = brute_force(fleet, node_index, gpus=gpus, zone=zone, hold=hold, idle=None)
        one = ladder.judge_one(fleet, node_index, resource="nvidia.com/gpu", gpus=gpus, spec=pod_spec, hold=hold)
        assert int(vector.codes[at]) == one[0] == want
        assert (int(vector.free[at]), int(vector.total[at])) == one[1:]
    # With the scheduler's idle counts: the vector entry takes them as an array aligned with the candidates.
    idle_known = np.array([i if i is not None else 99 for i in idles], dtype=np.int32)
    vector = ladder.judge(fleet, index, resource="nvidia.com/gpu", gpus=gpus, spec=pod_spec, hold=hold, idle=idle_known)
    for at, node_index in enumerate(index.tolist()):
        idle = int(idle_known[at])
        want = brute_force(fleet, node_index, gpus=gpus, zone=zone, hold=hold, idle=idle)
        one = ladder.judge_one(
            fleet, node_index, resource="nvidia.com/gpu", gpus=gpus, spec=pod_spec, hold=hold, idle=idle
        )
        assert int(vector.codes[at]) == one[0] == want
        assert (int(vector.free[at]), int(vector.total[at])) == one[1:]


def test_a_lone_pod_is_kept_off_the_spares_a_planned_gang_pod_is_not_judged_by_them() -> None:
    fleet = small_fleet()  # r1: t00 idle, t01 3 of 4 busy, t02 cordoned, t03 idle
    spares.assign(fleet, [1 if d == "r1" else 0 for d in fleet.domain_ids])  # r1 keeps its top idle tray, t03
    ladder = v.Ladder()
    index = index_of(fleet, NAMES)
    lone = ladder.judge(fleet, index, resource="nvidia.com/gpu", gpus=2, spec=spec())
    assert lone.codes.tolist() == [v.PASS, v.FULL, v.UNUSABLE, v.SPARE, v.OTHER_KIND, v.UNKNOWN]
    assert not v.is_resolvable(lone.codes)[3]
    t03 = fleet.node_index["r1-t03"]
    assert ladder.judge_one(fleet, t03, resource="nvidia.com/gpu", gpus=2, spec=spec()) == (v.SPARE, 4, 4)
    repair = v.Hold(True, [t03], "a repair's plan")
    assert ladder.judge_one(fleet, t03, resource="nvidia.com/gpu", gpus=2, spec=spec(), hold=repair)[0] == v.PASS
