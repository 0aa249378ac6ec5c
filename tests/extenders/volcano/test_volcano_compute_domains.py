"""Volcano's verbs keep a job whose pods join an NVIDIA ComputeDomain in one clique, apart from other domains.

The fleet is the scenario's two NVL72 racks (r1-t05 cordoned; r2-t00 full, r2-t01 half used): r2 is the best fit
of a small gang. Each job's pods claim an IMEX channel from ``<job>-channel``, its ComputeDomain's template.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import GPU, Volcano, open_session, serve
from tests.extenders.volcano.test_volcano_http import R1, R2, predicate
from tests.gangs.cd_scenario import compute_domain


@pytest.fixture(params=["snapshot", "live"])
def volcano(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Volcano]:
    yield from serve(tmp_path, [compute_domain("a"), compute_domain("b"), compute_domain("big")], mode=request.param)


def cd_job(name: str, pods: int) -> dict[str, Any]:
    """A Volcano job of ``pods`` 4-GPU tasks whose pods join ComputeDomain ``name``."""
    tasks = []
    for i in range(pods):
        pod = vp.pod("ml", f"{name}-{i}", f"uid-{name}-{i}", gpus=4, group=name)
        pod["spec"]["resourceClaims"] = [{"name": "imex", "resourceClaimTemplateName": f"{name}-channel"}]
        tasks.append(vp.task_info(pod))
    return vp.job_info(
        "ml", name, queue="ml-training", min_available=pods, tasks=tasks, min_resources={GPU: str(4 * pods)}
    )


def first_task(job: dict[str, Any]) -> dict[str, Any]:
    return next(t for t in job["Tasks"].values() if t["Name"].endswith("-0"))


def passing(v: Volcano, job: dict[str, Any]) -> set[str]:
    return {n for n in R1 + R2 if n != "r1-t05" and predicate(v, first_task(job), n)[0] == vp.SUCCESS}


def test_two_compute_domain_jobs_get_one_clique_each_and_never_the_same(volcano: Volcano) -> None:
    a, b = cd_job("a", 4), cd_job("b", 4)
    open_session(volcano, [a, b])
    assert {n.split("-")[0] for n in passing(volcano, a)} == {"r2"}
    assert {n.split("-")[0] for n in passing(volcano, b)} == {"r1"}  # r2, the best fit, holds a's plan
    assert volcano.app.volcano is not None
    plan = volcano.app.volcano.gangs.plan_of("ml/podgroup/b")
    assert plan is not None
    assert "1 clique of other ComputeDomains left out" in plan.plan.reason


def test_a_compute_domain_job_no_clique_holds_is_not_spread(volcano: Volcano) -> None:
    big = cd_job("big", 20)  # 20 trays: r1 holds 17, r2 16
    open_session(volcano, [big])
    code, status = predicate(volcano, first_task(big), "r1-t00")
    assert code != vp.SUCCESS and "requires one scale-up domain for 20 pods x 4 GPUs" in status
