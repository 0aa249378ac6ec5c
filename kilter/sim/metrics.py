"""What a simulation is judged on: the numbers ``kilter simulate`` prints and writes as JSON.

- ``meanWaitSeconds``/``p95WaitSeconds``/``maxWaitSeconds``: start minus
  submit, over jobs that ran.
- ``meanJctSeconds``: finish minus submit, over jobs that ran.
- ``classes``: the same (``jobs``, ``meanWaitSeconds``, ``p95WaitSeconds``,
  ``meanJctSeconds``) apart for ``oneDomain`` jobs, whose fewest scale-up
  domains is one on some platform their ClusterQueue may use, and
  ``multiDomain`` jobs, the rest (a property of the job, not of where a
  policy put it): a mean over all jobs hides a policy that makes one class
  pay for the other.
- ``p95BoundedSlowdown``: the 95th percentile over jobs that ran of JCT over
  max(duration, 10 min), the duration being the job's own (unslowed), so
  time lost to a split counts against the placement that caused it and a
  short job's few seconds of wait do not dominate.
- ``makespanSeconds``: from the first submission to the last finish.
- ``utilization``: busy GPU-seconds over usable GPU-seconds, counted only
  while some job was waiting or running (an idle night does not dilute it).
- ``usefulUtilization``: the same with each gang's GPU-seconds cut to what
  it would have needed unslowed, so time lost to a bad placement is not
  counted as work.
- ``singleDomainFraction``: of gangs small enough for one scale-up domain,
  the share placed in one.
- ``meanDomainsPerGang``: over gangs that need several domains, domains used
  over the fewest possible (1.0 is perfect).
- ``fragmentation``: the time-averaged share of free GPUs that sit in partly
  used domains, where a gang wanting a whole domain cannot use them.
- ``jainFairness``: Jain's index over ClusterQueues of each queue's service
  ratio (run time over time in the system, summed over its jobs): 1.0 when
  every queue's jobs wait in proportion to their length.
- ``preemptions``: gangs evicted to make room for others.
- ``splitWaited``/``splitWaitMeanSeconds``/``splitWaitTookSplit``: gangs the
  split-wait rule held back for fewer domains (kilter only), the mean time
  from their first hold to their start, and how many of them started split
  all the same when their budget ran out.
- ``reservations`` (kilter, when it reserves: ``reserving``): reservations
  made, reserved gangs started, jobs backfilled into a reserved domain ahead
  of its reservation, jobs steered away from one, placements turned away,
  and the reserved gangs' start error (start less the start first promised:
  mean, p50, p95, and the share that started late).

With node failures (``failing``; these keys appear only then, also beside a rollout's):

- ``goodput``: useful GPU-hours over GPU-hours held. Useful is each
  finished gang's GPUs x its unslowed duration, the work it had to do;
  held is every GPU booked to a gang over time, computing, restarting,
  waiting for a repair or redoing lost work. So placement slowdown lowers it
  too; ``gpuHoursLostToFailures`` is the failures' part alone.
- ``gpuHoursLostToFailures``: GPU-hours of work thrown away (a gang's run
  time since its last checkpoint, on all its GPUs, at each failure).
- ``repairs``/``repairsSameDomainFraction``: pods placed again after a
  failure without requeueing the gang (kilter's repairs, Kueue's hot swaps)
  and the share that stayed in the failed node's scale-up domain.
- ``meanResumeSeconds``/``p95ResumeSeconds``: per failure that stopped a
  gang, the time until it computed again (repair or queue wait, plus the
  restart time).
- ``failuresInjected``/``gangsHitByFailures``/``failureEvictions``: node
  failures, gangs stopped by one, and gangs requeued because of one;
  ``evictedOnSecondFailure`` the Kueue TAS evictions for a second failure
  while a replacement was pending (the rest found no room in the domain).

With a maintenance rollout (``maintenance``; these keys appear only then):
``jobsKilled``, ``gpuHoursLostToMaintenance``, ``gpuHoursIdleCordoned``,
``rolloutHours``, ``mostDomainsOut`` and the rest of
``maintenance.rollout_metrics``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from kilter.sim.engine import Outcome, Simulation, Timeline
from kilter.sim.failing import NodeFailures
from kilter.sim.gangs import gang_for
from kilter.sim.maintenance import Maintenance, rollout_metrics
from kilter.sim.reserving import Reserving

__all__ = ["BOUNDED_SLOWDOWN_FLOOR_S", "job_classes", "job_min_domains", "metrics", "versus_best"]


def _mean(values: np.ndarray[Any, Any]) -> float:
    return float(values.mean()) if len(values) else 0.0


def jain(values: list[float]) -> float:
    """Jain's fairness index: (Σx)² / (n·Σx²); 1.0 for equal values, 1/n when one takes all."""
    if not values:
        return 1.0
    x = np.asarray(values, dtype=np.float64)
    square = float((x * x).sum())
    return float(x.sum() ** 2 / (len(x) * square)) if square else 1.0


def split_waits(sim: Simulation) -> dict[str, Any]:
    """What the split-wait rule did: gangs held back, their mean wait, how many of them started split anyway."""
    hold = sim.hold
    waits = np.asarray(hold.waits if hold is not None else [], dtype=np.float64)
    return {
        "splitWaited": len(waits),
        "splitWaitMeanSeconds": round(_mean(waits), 1),
        "splitWaitTookSplit": hold.took_split if hold is not None else 0,
    }


def failure_metrics(sim: Simulation, failures: NodeFailures) -> dict[str, Any]:
    """What failures cost (module docstring)."""
    o = sim.outcome
    ran = ~np.isnan(o.end)
    gpus = np.fromiter((j.gpus for j in sim.jobs), dtype=np.float64, count=len(sim.jobs))
    duration = np.fromiter((j.duration_s for j in sim.jobs), dtype=np.float64, count=len(sim.jobs))
    useful = float((gpus * duration)[ran].sum())
    held = sim.timeline.busy_gpu_s
    st = failures.stats
    resume = np.asarray(st.resume_s, dtype=np.float64)
    return {
        "failurePolicy": failures.recovery,
        "failuresInjected": st.injected,
        "gangsHitByFailures": st.gangs_hit,
        "failureEvictions": st.evictions,
        "evictedOnSecondFailure": st.evictions_second_failure,
        "goodput": round(useful / held, 4) if held else 1.0,
        "gpuHoursHeld": round(held / 3600, 1),
        "gpuHoursLostToFailures": round(st.lost_gpu_s / 3600, 1),
        "repairs": st.repairs,
        "repairsSameDomainFraction": round(st.repairs_same_domain / st.repairs, 4) if st.repairs else 1.0,
        "meanResumeSeconds": round(_mean(resume), 1),
        "p95ResumeSeconds": round(float(np.percentile(resume, 95)) if len(resume) else 0.0, 1),
    }


BOUNDED_SLOWDOWN_FLOOR_S = 600.0  # the 10-minute floor the literature on bounded slowdown uses for batch jobs


def _p95(values: np.ndarray[Any, Any]) -> float:
    return float(np.percentile(values, 95)) if len(values) else 0.0


def job_classes(
    least: np.ndarray[Any, Any], wait: np.ndarray[Any, Any], jct: np.ndarray[Any, Any]
) -> dict[str, dict[str, float | int]]:
    """Wait and JCT apart for jobs whose fewest domains is one and for the rest; ``least`` is each job's fewest
    (``job_min_domains``, the same for every policy), all three over the jobs that ran."""
    out: dict[str, dict[str, float | int]] = {}
    for name, mine in (("oneDomain", least == 1), ("multiDomain", least > 1)):
        out[name] = {
            "jobs": int(mine.sum()),
            "meanWaitSeconds": round(_mean(wait[mine]), 1),
            "p95WaitSeconds": round(_p95(wait[mine]), 1),
            "meanJctSeconds": round(_mean(jct[mine]), 1),
        }
    return out


def job_min_domains(sim: Simulation) -> npt.NDArray[np.int32]:
    """Per job, the fewest scale-up domains it could run in on any platform its ClusterQueue may use (0 when it
    may use none): what sorts it into a job class, the same for every policy of a comparison."""
    out = np.zeros(len(sim.jobs), dtype=np.int32)
    seen: dict[tuple[str, int], int] = {}
    platforms = sim.fleet.platforms
    for j, job in enumerate(sim.jobs):
        key = (sim.cq_of[j], job.gpus)
        least = seen.get(key)
        if least is None:
            flavors = sim.queues.flavors[sim.cq_of[j]]
            least = seen[key] = min(
                (
                    platforms[p].unsplit_domains(gang_for(j, job.gpus, platforms[p], p, "preferred").pods)
                    for p, _ in flavors
                ),
                default=0,
            )
        out[j] = least
    return out


def metrics(sim: Simulation) -> dict[str, Any]:
    failures, rollout = sim.part(NodeFailures), sim.part(Maintenance)
    o: Outcome = sim.outcome
    tl: Timeline = sim.timeline
    submit = np.fromiter((j.submit_s for j in sim.jobs), dtype=np.float64, count=len(sim.jobs))
    ran = ~np.isnan(o.end)
    wait = (o.start - submit)[ran]
    jct = (o.end - submit)[ran]
    duration = np.fromiter((j.duration_s for j in sim.jobs), dtype=np.float64, count=len(sim.jobs))[ran]
    bounded = jct / np.maximum(duration, BOUNDED_SLOWDOWN_FLOOR_S)
    single = ran & (o.min_domains == 1)
    multi = ran & (o.min_domains > 1)
    ratios = []
    queues = np.asarray([sim.cq_names.index(cq) for cq in sim.cq_of], dtype=np.int32)
    per_queue: dict[str, dict[str, float | int]] = {}
    for i, name in enumerate(sim.cq_names):
        mine = ran & (queues == i)
        if not mine.any():
            continue
        ratio = float(o.run[mine].sum() / (o.end[mine] - submit[mine]).sum())
        ratios.append(ratio)
        per_queue[name] = {
            "jobs": int((queues == i).sum()),
            "completed": int(mine.sum()),
            "meanWaitSeconds": round(_mean((o.start - submit)[mine]), 1),
            "serviceRatio": round(ratio, 4),
        }
    return {
        "jobs": len(sim.jobs),
        "completed": int(ran.sum()),
        "neverFit": len(o.never),
        "meanWaitSeconds": round(_mean(wait), 1),
        "p95WaitSeconds": round(_p95(wait), 1),
        "maxWaitSeconds": round(float(wait.max()) if len(wait) else 0.0, 1),
        "meanJctSeconds": round(_mean(jct), 1),
        "classes": job_classes(job_min_domains(sim)[ran], wait, jct),
        "p95BoundedSlowdown": round(_p95(bounded), 3),
        "makespanSeconds": round(float(o.end[ran].max() - submit.min()) if ran.any() else 0.0, 1),
        "utilization": round(tl.busy_gpu_s / tl.available_gpu_s, 4) if tl.available_gpu_s else 0.0,
        "usefulUtilization": round(tl.useful_gpu_s / tl.available_gpu_s, 4) if tl.available_gpu_s else 0.0,
        "singleDomainFraction": round(float((o.domains[single] == 1).mean()), 4) if single.any() else 1.0,
        "meanDomainsPerGang": round(float((o.domains[multi] / o.min_domains[multi]).mean()), 4) if multi.any() else 1.0,
        "fragmentation": round(tl.stranded_share_s / tl.present_s, 4) if tl.present_s else 0.0,
        "jainFairness": round(jain(ratios), 4),
        "preemptions": sim.preemptions,
        "crossedBlockFraction": round(float(o.crossed_block[ran].mean()), 4) if ran.any() else 0.0,
        **split_waits(sim),
        **({"reservations": sim.reserving.metrics()} if isinstance(sim.reserving, Reserving) else {}),
        **(failure_metrics(sim, failures) if failures is not None and failures.injects_failures else {}),
        **(rollout_metrics(rollout) if rollout is not None else {}),
        "queues": per_queue,
    }


VERSUS = (
    ("meanJctSeconds", "mean JCT", ()),
    ("oneDomainWait", "one-domain jobs' mean wait", ("classes", "oneDomain", "meanWaitSeconds")),
    ("multiDomainWait", "multi-domain jobs' mean wait", ("classes", "multiDomain", "meanWaitSeconds")),
)


def _read(m: dict[str, Any], key: str, path: tuple[str, ...]) -> float:
    value: Any = m
    for part in path or (key,):
        value = value[part]
    return float(value)


def versus_best(policies: dict[str, dict[str, Any]], *, ours: str, others: list[str]) -> dict[str, Any]:
    """``ours`` over the best of ``others`` on mean JCT and on each job class's mean wait (lower is better, so a
    ratio below 1 is a win), naming that policy per figure; {} when either side is missing.

    A ratio is None where the best other figure is 0 and ours is not (no finite ratio says it).
    """
    rivals = [name for name in others if name in policies and name != ours]
    if ours not in policies or not rivals:
        return {}
    out: dict[str, Any] = {"policy": ours}
    parts, behind = [], []
    for key, label, path in VERSUS:
        mine = _read(policies[ours], key, path)
        best = min(rivals, key=lambda n: (_read(policies[n], key, path), rivals.index(n)))
        theirs = _read(policies[best], key, path)
        ratio = round(mine / theirs, 3) if theirs else (1.0 if not mine else None)
        out[key] = {"ratio": ratio, "best": best, "ours": mine, "theirs": theirs}
        shown = f"{ratio:g}" if ratio is not None else f"{mine:,.0f} s against 0"
        parts.append(f"{label} {shown} ({best})")
        if ratio is None or ratio > 1:
            behind.append(label)
    verdict = f"behind on {', '.join(behind)}" if behind else "ahead or level on all three"
    out["behind"] = behind
    out["summary"] = f"{ours} / best other policy: " + "; ".join(parts) + f" (below 1: better): {verdict}"
    return out
