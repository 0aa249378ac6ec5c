"""Volcano bodies mutated at random never make a verb raise: the answer is a verdict or a 400, never a 5xx."""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kilter.cli.serve import build_app
from kilter.extenders.volcano import VolcanoExtender
from tests.extenders.conftest import cluster_objects, serve_config, write_snapshot
from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import gpu_job, quota_objects, task_of
from tests.test_bad_input_fuzz import json_values, mutate, paths


@functools.cache
def extender() -> VolcanoExtender:
    snapshot = Path(tempfile.mkdtemp(prefix="kilter-fuzz-")) / "snapshot.json"
    write_snapshot(snapshot, [*cluster_objects(), *quota_objects()])
    app, _ = build_app(serve_config(snapshot))
    assert app.volcano is not None
    return app.volcano


def bodies() -> dict[str, dict[str, Any]]:
    gang = gpu_job("g", 2, 4)
    running = gpu_job("r", 2, 4, phase="Running", running_on=["r1-t00", "r1-t01"])
    task = task_of(gang)
    node = vp.node_info("r1-t02", gpus=4, labels={"nvidia.com/gpu.clique": "r1"})
    queue = vp.queue_info("ml-training", annotations={"kilter.dev/cluster-queue": "training"})
    return {
        "onSessionOpen": vp.session_open_args([gang, running], [node], [queue]),
        "predicate": vp.predicate_args(task, node),
        "prioritize": vp.prioritize_args(task, [node]),
        "reclaimable": vp.evict_args(task, [task_of(running)]),
        "preemptable": vp.evict_args(task, [task_of(running)]),
        "jobEnqueueable": vp.job_args(gang),
        "jobReady": vp.job_args(gang),
        "queueOverused": vp.queue_args(queue),
        "allocateFunc": vp.task_args(dict(task, NodeName="r1-t02", Status=vp.ALLOCATED)),
        "deallocateFunc": vp.task_args(dict(task, NodeName="r1-t02", Status=vp.PENDING)),
    }


BODIES = bodies()
CASES = [(verb, path) for verb, body in BODIES.items() for path in paths(body)]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), value=json_values)
def test_a_mutated_body_gets_an_answer(case: tuple[str, tuple[Any, ...]], value: Any) -> None:
    verb, path = case
    body = json.dumps(mutate(BODIES[verb], path, value)).encode()
    answer = extender().call(verb, body)
    assert answer.status in (200, 400), (verb, path, value, answer)
    if answer.status == 200:
        json.loads(answer.body)
