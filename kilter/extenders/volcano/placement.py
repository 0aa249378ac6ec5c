"""Where a Volcano task may go: one node's verdict, the offered nodes' scores, and a gang held to its plan.

A gang's plan (``kilter.gangs``) binds its tasks: the planned nodes a task
may take (``gangs.seats``: its rank's slot, else a free one of its shape)
score ``MAX_NODE_SCORE`` and pass, the others fail unresolvably, an
allocation off them is refused and a job with a task off its plan is not ready. Any
other GPU task passes where the ladder (``kilter.topology.verdicts``) lets it
and scores best-fit, scaled to Volcano's 0..100.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import numpy.typing as npt

from kilter.extenders.volcano import wire as vw
from kilter.extenders.volcano.answers import MAX_NODE_SCORE
from kilter.extenders.volcano.shaping import task_pod
from kilter.gangs import GangPlan, seats
from kilter.model.core_v1 import Pod
from kilter.state.store import ClusterStore
from kilter.topology import verdicts
from kilter.topology.fleet import Fleet
from kilter.topology.score import score_indices

__all__ = ["fits", "off_plan", "off_plan_tasks", "scores", "seat"]


def seat(plan: GangPlan | None, store: ClusterStore, pod: Pod, *, uid: str, gpus: int) -> seats.Seat | None:
    """The planned nodes a task (``pod``, ``uid``) may take on its gang's feasible plan, None without one."""
    if plan is None or not plan.feasible:
        return None
    return seats.seat(plan, pod, uid, gpus, store)


def fits(
    ladder: verdicts.Ladder,
    fleet: Fleet,
    task: vw.TaskHead,
    *,
    node: vw.NodeName,
    resource: str,
    gpus: int,
    plan: Callable[[], GangPlan | None],
    store: ClusterStore,
    lending: Callable[[Pod], npt.NDArray[np.bool_] | None] | None = None,
    reserving: Callable[[Pod], tuple[npt.NDArray[np.bool_] | None, str]] | None = None,
) -> tuple[int, str]:
    """The ladder's verdict for one node, in Volcano's status codes (``FULL``/``GANG_WAITS``: Unschedulable).

    ``plan`` gives the task's gang plan; it is asked only on a node that passes the static rungs, so that
    a gang is planned on its first fit. ``lending`` says which domains lend their spares to a task of no gang
    (``GangBook.lending``), ``reserving`` where it would delay a kept reservation (``GangBook.reserved_for``).
    """
    index = fleet.node_index.get(node.name, -1)
    hold = None
    if ladder.static(fleet, resource)[0][index] == verdicts.PASS:
        made = plan()
        held = seat(made, store, task_pod(task), uid=task.uid, gpus=gpus)
        hold = seats.hold(made, held) if made is not None else None
    pod = task_pod(task)
    lent = lending(pod) if lending is not None and hold is None and index >= 0 else None
    reserved, why = reserving(pod) if reserving is not None and hold is None and index >= 0 else (None, "")
    code, free, total = ladder.judge_one(
        fleet,
        index,
        resource=resource,
        gpus=gpus,
        spec=pod.spec,
        hold=hold,
        idle=_idle(node, resource),
        lent=lent,
        reserved=reserved,
    )
    if code == verdicts.PASS:
        return vw.SUCCESS, ""
    text = verdicts.reason(code, gpus=gpus, resource=resource, free=free, total=total, hold=hold, reserved=why)
    return (vw.UNSCHEDULABLE if verdicts.OUTCOMES[code] == "failed" else vw.UNRESOLVABLE), text


def scores(
    fleet: Fleet, index: npt.NDArray[np.int32], *, gpus: int, plan: GangPlan | None, held: seats.Seat | None
) -> npt.NDArray[np.int32]:
    """Each offered node's score (0..MAX_NODE_SCORE): in the task's seat (``seat``) or not for a gang's task,
    best-fit otherwise."""
    if plan is not None:
        planned = held.nodes if held is not None else ()
        return np.where(np.isin(index, np.asarray(planned, dtype=np.int32)), MAX_NODE_SCORE, 0)
    best_fit = score_indices(fleet, index, gpus=gpus)
    return np.maximum(best_fit.astype(np.int32), 0) * (MAX_NODE_SCORE // 10)


def off_plan(plan: GangPlan | None, fleet: Fleet, *, node: str, held: seats.Seat | None) -> str:
    """Why allocating the task to ``node`` breaks its gang's plan ("" when it does not, or there is none);
    ``held`` is the task's seat on that plan (``seat``)."""
    if plan is None or not plan.feasible or held is None:
        return ""
    index = fleet.node_index.get(node)
    if index is None or index not in held.nodes:
        return f"kilter: {node} is outside the gang's plan ({plan.describe()})"
    return ""


def off_plan_tasks(plan: GangPlan | None, fleet: Fleet, tasks: Mapping[str, vw.TaskInfo] | None) -> list[str]:
    """``"task on node"`` for each task holding a known node outside its gang's feasible plan."""
    if plan is None or not plan.feasible:
        return []
    planned = {s.node for s in plan.slots}
    return [
        f"{t.name} on {t.node_name}"
        for t in (tasks or {}).values()
        if t.status & vw.HOLDING and t.node_name in fleet.node_index and t.node_name not in planned
    ]


def _idle(node: vw.NodeName, resource: str) -> int | None:
    """The node's idle GPUs as Volcano counts them (None: its Idle does not name the resource)."""
    scalars = node.idle.scalar_resources if node.idle is not None else None
    if scalars is None or resource not in scalars:
        return None
    return int(scalars[resource] // 1000)
