"""``kilter simulate --quota volcano`` decides as the Volcano verbs do: the same jobs, the same answers.

Each scenario is one queue tree and one set of jobs, fed twice: to a real
``kilter serve`` as Volcano sends them (``onSessionOpen``, ``jobEnqueueable``,
``reclaimable`` and ``preemptable`` over HTTP), and to the simulator's
admission step (``sim.volcano_queues.VolcanoQueues``, which ``kilter simulate
--quota volcano`` runs). The permits, rejections and victims must agree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kilter.quota.bound_queues import QueueVerdict
from kilter.quota.config import FairSharingConfig
from kilter.sim.queues import queue_setup
from kilter.sim.trace import TraceJob
from kilter.sim.volcano_queues import VolcanoQueues
from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import Volcano, gpu_job, open_session, quota_objects, serve, task_of
from tests.sim.conftest import nvl72

NODES = [f"r{r}-t{t:02d}" for r in (1, 2) for t in range(18)]
VOLCANO_QUEUE = {"training": "ml-training", "research": "research"}  # ml-training is bound by annotation
NOW = 1_796_122_800.0


@dataclass(frozen=True)
class Job:
    name: str
    queue: str  # the ClusterQueue (the simulator's Volcano Queue of that name)
    gpus: int  # 4 per task
    running: bool = False


SCENARIOS = {
    # training: 64 nominal, may borrow 32 of research's 32 (cohort pool).
    "three 48s: 48 fits, 96 = 64 + 32 borrowed fits, the third waits": (
        [],
        [Job("a", "training", 48), Job("b", "training", 48), Job("c", "training", 48)],
    ),
    "research reclaims 16 from the borrower": (  # training 80 = 64 + 16 borrowed; 80 + 16 + 16 = 112 > 96
        [Job("big", "training", 80, running=True), Job("small", "research", 16, running=True)],
        [Job("want", "research", 16)],
    ),
    "no right to evict beyond nominal": (  # research asks 48 > its 32 while training is within its 64
        [Job("fair", "training", 64, running=True)],
        [Job("want", "research", 48)],
    ),
    "quota is not the obstacle": (  # 32 + 16 of 96
        [Job("fair", "training", 32, running=True)],
        [Job("want", "research", 16)],
    ),
    "never fits": ([], [Job("huge", "research", 100)]),  # 100 > 96, all the pool could ever give
}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Volcano]:
    """A fresh server per scenario: nothing one scenario permitted is left for the next."""
    yield from serve(tmp_path, [])


def _wire_jobs(running: list[Job], asking: list[Job]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    free = iter(NODES)
    for job in running:
        pods = job.gpus // 4
        nodes = [next(free) for _ in range(pods)]
        out[job.name] = gpu_job(job.name, pods, 4, queue=VOLCANO_QUEUE[job.queue], phase="Running", running_on=nodes)
    for job in asking:
        out[job.name] = gpu_job(job.name, job.gpus // 4, 4, queue=VOLCANO_QUEUE[job.queue])
    return out


def verbs(v: Volcano, running: list[Job], asking: list[Job]) -> tuple[list[int], set[str]]:
    """What the served verbs answer: each asking job's jobEnqueueable, then the last one's victims (job names)."""
    wire = _wire_jobs(running, asking)
    open_session(v, list(wire.values()))
    statuses = []
    for job in asking:
        status, body = v.post("jobEnqueueable", vp.job_args(wire[job.name]))
        assert status == 200
        statuses.append(body["status"])
    evictees = [t for job in running for t in wire[job.name]["Tasks"].values()]
    victims: set[str] = set()
    for verb in ("reclaimable", "preemptable"):
        status, body = v.post(verb, vp.evict_args(task_of(wire[asking[-1].name]), evictees))
        assert status == 200
        victims |= {t["Job"].partition("/")[2] for t in body["victims"]}
    return statuses, victims


def simulator(running: list[Job], asking: list[Job]) -> tuple[list[int], set[str]]:
    """What the simulator's admission step decides for the same jobs on a GB200 fleet of 4-GPU trays."""
    fleet = nvl72(2)
    jobs = [TraceJob(i, 0.0, 600.0, j.gpus, j.queue) for i, j in enumerate([*running, *asking])]
    objects = [o for o in quota_objects() if o["kind"] != "Queue"]
    queues = VolcanoQueues(
        fleet, jobs, queues=queue_setup(objects, fleet, Counter(j.queue for j in jobs)), config=FairSharingConfig()
    )
    for j in range(len(running)):  # as the running jobs got there: enqueued, then their tasks placed
        assert queues.enqueue(j, NOW).status == QueueVerdict.PERMIT
        [(platform, _)] = queues.platforms(j)
        assert queues.take(j, fleet.platforms[platform].device_resource, node=fleet.node_names[0]) == ""
    first = len(running)
    statuses = [int(queues.enqueue(first + i, NOW).status) for i in range(len(asking))]
    names = [j.name for j in [*running, *asking]]
    return statuses, {names[v] for v in queues.victims(len(jobs) - 1, NOW)}


@pytest.mark.parametrize(("running", "asking"), SCENARIOS.values(), ids=SCENARIOS.keys())
def test_the_simulator_permits_rejects_and_picks_victims_as_the_volcano_verbs_do(
    served: Volcano, running: list[Job], asking: list[Job]
) -> None:
    assert simulator(running, asking) == verbs(served, running, asking)


def test_the_scenarios_cover_permit_reject_and_victims() -> None:
    answers = [simulator(r, a) for r, a in SCENARIOS.values()]
    assert answers[0] == ([1, 1, -1], set())
    assert answers[1] == ([1], {"big"})
    assert answers[2][0] == [-1] and answers[-1] == ([-1], set())
