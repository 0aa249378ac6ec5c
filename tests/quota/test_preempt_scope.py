"""Looking for targets only under the lowest binding borrowing limit gives Kueue's full-walk answer.

``find_targets`` skips candidates outside the subtree of the lowest node whose
borrowing limit caps the preemptor; ``walk_all=True`` walks every candidate of
the cohort as Kueue does. On random two-level trees with borrowing and lending
limits on queues and cohorts, both must choose the same targets for the same
reasons.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kilter.quota.available import add_usage, available, is_within_nominal
from kilter.quota.config import FairSharingConfig
from kilter.quota.preempt import find_targets
from kilter.quota.preempt.scope import find_scope, is_beyond_reach
from kilter.quota.shares import Shares
from kilter.quota.tree import FR, QuotaTree
from kilter.quota.usage import WorkloadInfo
from kilter.quota.whatif import Journal
from tests.quota.builders import cohort, cq, tree

GPU: FR = ("a100", "nvidia.com/gpu")
CPU: FR = ("a100", "cpu")
NOW = 100_000.0
QUEUES = ("q0", "q1", "q2", "q3", "q4")
TEAM_OF = {"q0": "t0", "q1": "t0", "q2": "t1", "q3": "t1", "q4": "t1"}

limits = st.tuples(st.integers(0, 8), st.none() | st.integers(0, 8), st.none() | st.integers(0, 6))
policies = st.fixed_dictionaries(
    {
        "withinClusterQueue": st.sampled_from(("LowerPriority", "LowerOrNewerEqualPriority", "Never")),
        "reclaimWithinCohort": st.sampled_from(("Any", "LowerPriority", "Never")),
    }
)
held_specs = st.lists(
    st.tuples(st.sampled_from(QUEUES), st.integers(1, 4), st.integers(0, 2), st.integers(0, 2), st.integers(0, 2000)),
    min_size=15,
    max_size=40,
)
configs = st.fixed_dictionaries(
    {
        "enabled": st.booleans(),
        "preempt_within_nominal": st.booleans(),
        "strategies": st.sampled_from(
            (
                ("LessThanOrEqualToFinalShare", "LessThanInitialShare"),
                ("LessThanOrEqualToFinalShare",),
                ("LessThanInitialShare",),
            )
        ),
    }
)
SCOPES: Counter[str] = Counter()


def _build(
    queue_limits: list[tuple[int, int | None, int | None]],
    team_limits: list[tuple[int, int | None, int | None]],
    queue_policies: list[dict[str, Any]],
    min_runtime: bool,
) -> QuotaTree:
    cqs = []
    for name, (nominal, bl, ll), policy in zip(QUEUES, queue_limits, queue_policies, strict=True):
        ll = None if ll is None else min(ll, nominal)
        annotations = {"kilter.dev/min-runtime": "10m"} if min_runtime and name == "q2" else None
        cqs.append(
            cq(
                name,
                {GPU: (nominal, bl, ll), CPU: (nominal, None, None)},
                cohort=TEAM_OF[name],
                preemption=policy,
                annotations=annotations,
            )
        )
    cohorts = [cohort("org")]
    for team, (nominal, bl, ll) in zip(("t0", "t1"), team_limits, strict=True):
        ll = None if ll is None else min(ll, nominal)
        cohorts.append(cohort(team, {GPU: (nominal, bl, ll), CPU: (nominal, None, None)}, parent="org"))
    t = tree(cqs, cohorts)
    t.raise_problems()
    return t


def _admit(t: QuotaTree, specs: list[tuple[str, int, int, int, int]]) -> dict[str, list[WorkloadInfo]]:
    """Admit each workload only if it fits when it arrives, as Kueue would."""
    admitted: dict[str, list[WorkloadInfo]] = {}
    for i, (name, gpus, cpus, priority, age) in enumerate(specs):
        node = t.cluster_queues[name]
        usage = {GPU: gpus, CPU: cpus * 1000} if cpus else {GPU: gpus}
        if all(v <= available(node, fr) for fr, v in usage.items()):
            for fr, v in usage.items():
                add_usage(node, fr, v)
            w = WorkloadInfo(
                "ns", f"w{i}", f"uid-{i:03d}", name, "lq", priority, float(i), True, NOW - age, usage=usage
            )
            admitted.setdefault(name, []).append(w)
    return admitted


@settings(max_examples=400, deadline=None)
@given(
    st.lists(limits, min_size=5, max_size=5),
    st.lists(limits, min_size=2, max_size=2),
    st.lists(policies, min_size=5, max_size=5),
    st.booleans(),
    held_specs,
    st.sampled_from(QUEUES),
    st.integers(1, 10),
    st.integers(0, 3),
    st.integers(0, 3),
    configs,
)
def _same_targets(
    queue_limits: list[tuple[int, int | None, int | None]],
    team_limits: list[tuple[int, int | None, int | None]],
    queue_policies: list[dict[str, Any]],
    min_runtime: bool,
    specs: list[tuple[str, int, int, int, int]],
    preemptor_cq: str,
    gpus: int,
    cpus: int,
    priority: int,
    config: dict[str, Any],
) -> None:
    t = _build(queue_limits, team_limits, queue_policies, min_runtime)
    admitted = _admit(t, specs)
    node = t.cluster_queues[preemptor_cq]
    preemptor = WorkloadInfo("ns", "new", "uid-new", preemptor_cq, "lq", priority, NOW, False)
    usage = {GPU: gpus, CPU: cpus * 1000} if cpus else {GPU: gpus}
    cfg = FairSharingConfig(**config)

    def run(walk_all: bool) -> tuple[list[tuple[str, str]], str]:
        result = find_targets(
            t, admitted, node, preemptor, usage, config=cfg, shares=Shares(t, now=NOW), now=NOW, walk_all=walk_all
        )
        return [(x.workload.name, x.reason) for x in result.targets], result.reason

    before = {n: dict(q.usage) for n, q in [*t.cluster_queues.items(), *t.cohorts.items()]}
    narrow, full = run(False), run(True)
    assert {n: dict(q.usage) for n, q in [*t.cluster_queues.items(), *t.cohorts.items()]} == before
    assert narrow[0] == full[0]
    if narrow[0]:
        assert narrow[1] == full[1] == ""
    frs = {fr for fr, v in usage.items() if v > available(node, fr)}
    if frs:
        root = find_scope(t, admitted, node, preemptor, usage, frs, now=NOW, walk_all=False).root
        SCOPES["queue" if root is node else "root" if root.parent is None else "cohort"] += 1


def test_walking_only_under_the_binding_borrowing_limit_picks_what_the_full_walk_picks() -> None:
    SCOPES.clear()
    _same_targets()
    # The comparison means something only if every kind of scope came up.
    assert SCOPES["queue"] and SCOPES["cohort"] and SCOPES["root"], SCOPES


def test_a_queue_at_its_borrowing_limit_takes_only_its_own_workloads() -> None:
    # a (nominal 4, borrowingLimit 2) holds 6; b borrows heavily. Only a's own workloads can make room.
    t = tree(
        [
            cq(
                "a",
                {GPU: (4, 2, None)},
                cohort="c",
                preemption={"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
            ),
            cq("b", {GPU: 10}, cohort="c"),
        ],
    )
    admitted = {
        "a": [WorkloadInfo("ns", "a1", "uid-a1", "a", "lq", 0, 1.0, True, 10.0, usage={GPU: 6})],
        "b": [
            WorkloadInfo("ns", f"b{i}", f"uid-b{i}", "b", "lq", 0, 1.0, True, 10.0, usage={GPU: 1}) for i in range(8)
        ],
    }
    for name, ws in admitted.items():
        for w in ws:
            add_usage(t.cluster_queues[name], GPU, w.usage[GPU])
    node = t.cluster_queues["a"]
    preemptor = WorkloadInfo("ns", "new", "uid-new", "a", "lq", 5, NOW, False)
    scope = find_scope(t, admitted, node, preemptor, {GPU: 2}, {GPU}, now=NOW, walk_all=False)
    assert scope.root is node and list(scope.candidates) == ["a"]
    result = find_targets(
        t, admitted, node, preemptor, {GPU: 2}, config=FairSharingConfig(), shares=Shares(t, now=NOW), now=NOW
    )
    assert [(x.workload.name, x.reason) for x in result.targets] == [("a1", "InClusterQueue")]
    # With nothing of its own to give, the answer names the cap instead of scanning the cohort.
    low = WorkloadInfo("ns", "new", "uid-new", "a", "lq", 0, NOW, False)
    result = find_targets(
        t, admitted, node, low, {GPU: 2}, config=FairSharingConfig(), shares=Shares(t, now=NOW), now=NOW
    )
    assert result.targets == ()
    assert result.reason.startswith("the borrowingLimit of ClusterQueue a caps a100/nvidia.com/gpu")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(limits, min_size=5, max_size=5),
    st.lists(limits, min_size=2, max_size=2),
    held_specs,
    st.sampled_from(QUEUES),
    st.sampled_from(((GPU,), (GPU, CPU))),
    st.integers(0, 1),
)
def test_the_out_of_reach_bound_equals_removing_every_borrowing_queue_one_by_one(
    queue_limits: list[tuple[int, int | None, int | None]],
    team_limits: list[tuple[int, int | None, int | None]],
    specs: list[tuple[str, int, int, int, int]],
    preemptor_cq: str,
    contested: tuple[FR, ...],
    beyond_on: int,
) -> None:
    policy = {"withinClusterQueue": "Never", "reclaimWithinCohort": "Any"}
    t = _build(queue_limits, team_limits, [policy] * 5, False)
    _admit(t, specs)
    node = t.cluster_queues[preemptor_cq]
    frs = set(contested)
    journal = Journal()
    borrowing = [q for q in t.cluster_queues.values() if q is not node and not is_within_nominal(q, frs)]
    for q in borrowing:
        journal.remove(q, {fr: q.usage.get(fr, 0) for fr in frs})
    # The largest request of each contested resource that fits once every borrowing queue is emptied.
    most = {fr: available(node, fr) for fr in frs}
    journal.undo()
    assert not is_beyond_reach(t, node, most, frs)
    over = contested[beyond_on % len(contested)]
    assert is_beyond_reach(t, node, {**most, over: most[over] + 1}, frs) == bool(borrowing)
