"""Mutated jobs and snapshots never crash kilter: the answer is a plan or an InputError."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kilter.model.errors import InputError
from kilter.model.jobs import read_job
from kilter.state import cluster
from kilter.topology.catalog import BUILTIN, Catalog
from kilter.topology.plan import gang_request, plan_gang
from tests.conftest import REPO
from tests.topology.builders import node_dict

JOBS = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "examples" / "jobs").glob("*.yaml"))]
CATALOG = Catalog(BUILTIN)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 100) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += paths(v, (*prefix, i))
    return out


def mutate(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    clone = copy.deepcopy(obj)
    target = clone
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return clone


def small_state() -> cluster.ClusterState:
    nodes = [node_dict(f"r1-t{i}", labels={"nvidia.com/gpu.clique": "r1"}) for i in range(4)]
    nodes.append(node_dict("mi", product="AMD_Instinct_MI355X", gpus=8, resource="amd.com/gpu"))
    return cluster.from_objects(nodes)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_mutated_job_yields_a_plan_or_an_input_error(data: st.DataObject) -> None:
    job = data.draw(st.sampled_from(JOBS))
    path = data.draw(st.sampled_from(paths(job)))
    bad = mutate(job, path, data.draw(json_values))
    fleet = small_state().fleet()
    try:
        spec = read_job(bad)
        for pod_sets in spec.gangs:
            plan = plan_gang(fleet, gang_request(spec.name, pod_sets, CATALOG))
            assert isinstance(plan.reason, str) and plan.reason
    except InputError as exc:
        assert str(exc)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_mutated_snapshot_yields_a_fleet_or_an_input_error(data: st.DataObject) -> None:
    docs = [node_dict(f"r1-t{i}", labels={"nvidia.com/gpu.clique": "r1"}) for i in range(3)]
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "d"},
            "spec": {
                "nodeName": "r1-t0",
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
            },
            "status": {"phase": "Running"},
        }
    )
    index = data.draw(st.integers(0, len(docs) - 1))
    path = data.draw(st.sampled_from(paths(docs[index])))
    docs[index] = mutate(docs[index], path, data.draw(json_values))
    try:
        state = cluster.from_objects(docs)
        fleet = state.fleet()
        assert fleet.bitmap.n_nodes <= 3
    except InputError as exc:
        assert str(exc)


def test_the_fuzzed_examples_exist() -> None:
    assert len(JOBS) == 5 and all(isinstance(j, dict) for j in JOBS)
    assert Path(REPO / "examples" / "jobs").is_dir()
