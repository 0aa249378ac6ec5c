"""Which spare count reaches each domain: ResourceFlavors, ClusterQueues, Cohorts, the default; the largest wins."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kilter.model import codec
from kilter.model.errors import InputError
from kilter.model.kueue import ClusterQueue, Cohort, ResourceFlavor
from kilter.topology import spare_settings
from kilter.topology.fleet import Fleet, build_fleet
from tests.topology.builders import node

KEY = "kilter.dev/spare-nodes-per-domain"
GPU = "nvidia.com/gpu"
AMD = "amd.com/gpu"


def fleet() -> Fleet:
    """GB200 racks a1, a2 (pool a) and b1 (pool b), 18 trays each; an MI355X 8-GPU node, its own domain."""
    nodes = []
    for name, pool in (("a1", "a"), ("a2", "a"), ("b1", "b")):
        nodes += [node(f"{name}-t{t:02d}", labels={"nvidia.com/gpu.clique": name, "pool": pool}) for t in range(18)]
    nodes.append(node("mi-0", product="AMD_Instinct_MI355X", gpus=8, resource=AMD))
    return build_fleet(nodes)


def rf(name: str, labels: dict[str, str] | None = None, spares: str | None = None) -> ResourceFlavor:
    meta: dict[str, Any] = {"name": name, "annotations": {KEY: spares} if spares is not None else {}}
    return codec.convert({"metadata": meta, "spec": {"nodeLabels": labels or {}}}, ResourceFlavor)


def cq(
    name: str, flavors: list[str], *, cohort: str = "", spares: str | None = None, resource: str = GPU
) -> ClusterQueue:
    quotas = [{"name": f, "resources": [{"name": resource, "nominalQuota": "0"}]} for f in flavors]
    return codec.convert(
        {
            "metadata": {"name": name, "annotations": {KEY: spares} if spares is not None else {}},
            "spec": {"cohortName": cohort, "resourceGroups": [{"coveredResources": [resource], "flavors": quotas}]},
        },
        ClusterQueue,
    )


def cohort(name: str, *, parent: str = "", spares: str | None = None) -> Cohort:
    meta = {"name": name, "annotations": {KEY: spares} if spares is not None else {}}
    return codec.convert({"metadata": meta, "spec": {"parentName": parent}}, Cohort)


def per_domain(f: Fleet, settings: spare_settings.SpareSettings) -> dict[str, int]:
    return {f.domain_ids[d]: int(n) for d, n in enumerate(settings.per_domain)}


FLAVORS = [rf("pool-a", {"pool": "a"}), rf("pool-b", {"pool": "b"}), rf("any")]


@pytest.mark.parametrize(
    ("objects", "default", "want"),
    [
        pytest.param({}, 0, {"a1": 0, "a2": 0, "b1": 0}, id="nothing set: no spares"),
        pytest.param({}, 2, {"a1": 2, "a2": 2, "b1": 2}, id="the default reaches every rack"),
        pytest.param(
            {"flavors": [rf("pool-a", {"pool": "a"}, "3"), rf("pool-b", {"pool": "b"})]},
            1,
            {"a1": 3, "a2": 3, "b1": 1},
            id="a flavor's 3 over its nodeLabels' racks beats the default 1",
        ),
        pytest.param(
            {"flavors": [rf("all", spares="1")]}, 0, {"a1": 1, "a2": 1, "b1": 1}, id="no nodeLabels: every rack"
        ),
        pytest.param(
            {"flavors": FLAVORS, "cluster_queues": [cq("team-b", ["pool-b"], spares="4")]},
            0,
            {"a1": 0, "a2": 0, "b1": 4},
            id="a ClusterQueue reaches the racks of its flavors",
        ),
        pytest.param(
            {"flavors": FLAVORS, "cluster_queues": [cq("amd", ["any"], spares="4", resource=AMD)]},
            0,
            {"a1": 0, "a2": 0, "b1": 0},
            id="a queue's flavor counts only on the platforms of the resources it covers",
        ),
        pytest.param(
            {"flavors": FLAVORS, "cluster_queues": [cq("ghost", ["missing"], spares="4")]},
            0,
            {"a1": 0, "a2": 0, "b1": 0},
            id="a flavor without a ResourceFlavor reaches nothing",
        ),
        pytest.param(
            {
                "flavors": FLAVORS,
                "cluster_queues": [cq("team-a", ["pool-a"], cohort="child"), cq("team-b", ["pool-b"])],
                "cohorts": [cohort("root", spares="2"), cohort("child", parent="root")],
            },
            1,
            {"a1": 2, "a2": 2, "b1": 1},
            id="a Cohort reaches the queues under its child Cohorts, not the others",
        ),
        pytest.param(
            {
                "flavors": [rf("pool-a", {"pool": "a"}, "1"), rf("pool-b", {"pool": "b"})],
                "cluster_queues": [cq("team-a", ["pool-a"], spares="5", cohort="root")],
                "cohorts": [cohort("root", spares="2")],
            },
            3,
            {"a1": 5, "a2": 5, "b1": 3},
            id="largest wins: queue 5 over cohort 2, flavor 1 and default 3",
        ),
    ],
)
def test_each_domain_gets_the_largest_setting_that_reaches_it(
    objects: dict[str, Any], default: int, want: dict[str, int]
) -> None:
    f = fleet()
    settings = spare_settings.resolve(f, default=default, **objects)
    assert settings.problems == ()
    assert per_domain(f, settings) == {**want, "mi-0": 0}  # an 8-GPU node is its own domain: never a spare


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        pytest.param("two", "'two'", id="not a number"),
        pytest.param("-1", "'-1'", id="negative"),
        pytest.param("1.5", "'1.5'", id="not whole"),
        pytest.param("19", "from 0 to 18, got '19'", id="above an 18-node domain of its platform"),
        pytest.param(" 2", "' 2'", id="spaces"),
    ],
)
def test_a_bad_count_is_skipped_and_named_while_the_others_still_decide(value: str, problem: str) -> None:
    f = fleet()
    # GB200-NVL72 holds 18 trays a domain: the most a setting reaching only GB200 racks may ask.
    settings = spare_settings.resolve(
        f, flavors=[rf("pool-a", {"pool": "a"}, value), rf("pool-b", {"pool": "b"}, "2")], default=1
    )
    assert per_domain(f, settings) == {"a1": 1, "a2": 1, "b1": 2, "mi-0": 0}
    [line] = settings.problems
    assert line.startswith(f"ResourceFlavor pool-a: {KEY} must be a whole number")
    assert problem in line and line.endswith("; skipped")


def test_a_setting_reaching_no_domain_is_bounded_by_the_largest_catalog_domain() -> None:
    f = fleet()
    nowhere = spare_settings.resolve(f, flavors=[rf("gone", {"pool": "z"}, "72")])
    assert nowhere.problems == () and not nowhere.per_domain.any()
    too_many = spare_settings.resolve(f, flavors=[rf("gone", {"pool": "z"}, "73")])
    assert "from 0 to 72" in too_many.problems[0]


def test_check_refuses_what_resolve_would_skip_and_judges_the_object_as_changed() -> None:
    f = fleet()
    spare_settings.check(f, cq("team-a", ["pool-a"], spares="18"), flavors=FLAVORS)
    with pytest.raises(InputError, match=r"ClusterQueue team-a: .* from 0 to 18, got '19'"):
        spare_settings.check(f, cq("team-a", ["pool-a"], spares="19"), flavors=FLAVORS)
    queues = [cq("team-a", ["pool-a"], cohort="root")]
    with pytest.raises(InputError, match=r"Cohort root: .* got 'x'"):
        spare_settings.check(f, cohort("root", spares="x"), flavors=FLAVORS, cluster_queues=queues)
    spare_settings.check(f, rf("any", spares="0"))


LEND = "kilter.dev/spares-for-preemptible"


def lending(obj: Any, value: str) -> Any:
    obj.metadata.annotations[LEND] = value
    return obj


@pytest.mark.parametrize(
    ("objects", "default", "want"),
    [
        pytest.param({}, False, set(), id="nothing set: nothing lent"),
        pytest.param({}, True, {"a1", "a2", "b1"}, id="the flag lends every rack's spares"),
        pytest.param(
            {"flavors": [lending(rf("pool-a", {"pool": "a"}), "true"), rf("pool-b", {"pool": "b"})]},
            False,
            {"a1", "a2"},
            id="a flavor lends over its nodeLabels' racks",
        ),
        pytest.param(
            {
                "flavors": [lending(rf("pool-a", {"pool": "a"}), "true"), rf("pool-b", {"pool": "b"})],
                "cluster_queues": [lending(cq("team-a", ["pool-a"], cohort="root"), "false")],
            },
            True,
            {"b1"},
            id='"false" wins over "true" and the flag where it reaches',
        ),
        pytest.param(
            {
                "flavors": FLAVORS,
                "cluster_queues": [cq("team-a", ["pool-a"], cohort="root")],
                "cohorts": [lending(cohort("root"), "true")],
            },
            False,
            {"a1", "a2"},
            id="a Cohort lends over its queues' racks",
        ),
    ],
)
def test_a_domain_lends_its_spares_where_a_true_reaches_and_no_false(
    objects: dict[str, Any], default: bool, want: set[str]
) -> None:
    f = fleet()
    settings = spare_settings.resolve(f, **objects, default=2, lend_default=default)
    assert settings.lent is not None
    assert {f.domain_ids[d] for d in np.flatnonzero(settings.lent)} == want  # the MI355X node's domain never lends


@pytest.mark.parametrize("value", ["True", "yes", "1", "", " true"])
def test_a_lending_value_other_than_true_or_false_is_skipped_named_and_refused(value: str) -> None:
    f = fleet()
    flavors = [lending(rf("any", spares="1"), value)]
    settings = spare_settings.resolve(f, flavors=flavors)
    assert settings.problems == (f'ResourceFlavor any: {LEND} must be "true" or "false", got {value!r}; skipped',)
    assert settings.lent is not None and not settings.lent.any()
    assert settings.per_domain.tolist()[:3] == [1, 1, 1]  # the count beside it still holds
    with pytest.raises(InputError, match=LEND):
        spare_settings.check(f, flavors[0])
