"""Volcano's ``extender`` plugin verbs (bytes in, bytes out) on the same engine as the kube-scheduler extender.

What each verb answers (wire facts: ``wire``):

- ``jobEnqueueable``: Permit when the job fits its bound ClusterQueue now, or
  once Kueue's preemption would reclaim quota for it; Reject while it must
  wait, and Reject with an Event on the PodGroup when it can never fit.
  Abstain for queues bound to no ClusterQueue.
- ``queueOverused``: true while the ClusterQueue holds more than it may
  (above nominal plus what its cohort can lend now).
- ``reclaimable`` / ``preemptable``: the evictees whose jobs Kueue's
  preemption (fair sharing included) would take quota from, echoed back
  exactly as received; Reject (no victims) when quota gives no right to
  evict, Abstain when quota is not the obstacle.
- ``predicate`` / ``prioritize``: GPUs per node as kilter's fleet model and
  Volcano's own ``Idle`` both see them; a gang (PodGroup ``minMember`` > 1)
  is planned whole with the core and held to its plan (planned nodes score
  100, others fail unresolvably); other tasks are scored best-fit 0..100,
  the scale of Volcano's own node-order plugins.
- ``allocateFunc`` / ``deallocateFunc``: book and unbook a task's GPUs (a
  gang task off its plan is refused, which rolls the allocation back).
- ``jobReady``: false only for a planned gang with a task allocated off its plan.
- ``onSessionOpen`` / ``onSessionClose``: the session's jobs and queues are
  kilter's freshest view while the session lasts; every verb falls back to
  the cluster state when a session was never opened or its body was lost.

Bad bodies answer in the verb's own error field where it has one
(predicate ``status`` with code Error, ``errorMessage``), else HTTP 400.
Each handler decodes (``reading``), calls one decision (``quota_view``,
``placement``, ``shaping``, the gang book) and encodes (``answers``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence

import msgspec
import numpy as np
import numpy.typing as npt

from kilter.extenders.scheduler import VerbAnswer
from kilter.extenders.volcano import answers, placement, quota_jobs, shaping
from kilter.extenders.volcano import wire as vw
from kilter.extenders.volcano.events import EventSink, PacedEvents
from kilter.extenders.volcano.nodeinfo_stream import NodeNamesReader, StreamedNodes
from kilter.extenders.volcano.notes import Notes
from kilter.extenders.volcano.quota_view import QuotaViews, offered_victims
from kilter.extenders.volcano.reading import BodyReader
from kilter.extenders.volcano.session import Placed, Sessions
from kilter.gangs import GangBook, GangId, GangPlan, identify
from kilter.gangs.identity import GANG_LABEL
from kilter.model.core_v1 import Pod
from kilter.model.errors import InputError, KilterError
from kilter.model.kueue import ClusterQueue, Cohort, ResourceFlavor
from kilter.quota.bound_queues import BoundQueues, QueueVerdict
from kilter.quota.config import FairSharingConfig
from kilter.state.store import ClusterStore
from kilter.topology import verdicts
from kilter.topology.fleet import Fleet

__all__ = ["VOLCANO_VERBS", "VolcanoExtender"]

VOLCANO_VERBS = (
    "onSessionOpen",
    "onSessionClose",
    "predicate",
    "prioritize",
    "preemptable",
    "reclaimable",
    "queueOverused",
    "jobEnqueueable",
    "jobEnqueued",
    "jobReady",
    "allocateFunc",
    "deallocateFunc",
)
_OUTCOMES = {vw.PERMIT: "permit", vw.ABSTAIN: "abstain", vw.REJECT: "reject"}  # jobEnqueueable's metric labels


class VolcanoExtender:
    """Every verb of Volcano's extender plugin; all methods run on the server's event-loop thread.

    What lasts between calls lives with its owner: the session and its placed and permitted jobs
    (``sessions``), the quota view (``views``), each job's gang (``shapes``), the gangs' plans
    (``gangs``), the reasons for ``/debug/volcano`` (``notes``). The counters say how bodies were read:
    ``whole_decodes`` by body kind, and how many prioritize bodies read while they arrived were
    answered from that reading (``streamed_answers``) or read again whole (``streamed_fallbacks``).
    """

    def __init__(
        self,
        store: ClusterStore,
        gangs: GangBook,
        *,
        queues: Sequence[ClusterQueue | Cohort | ResourceFlavor] = (),
        events: EventSink | None = None,
        config: FairSharingConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.gangs = gangs
        self.clock = clock
        self.notes = Notes()
        self.sessions = Sessions()
        self.views = QuotaViews(
            store, self.sessions, queues=list(queues), config=config or FairSharingConfig(), notes=self.notes
        )
        self.shapes = shaping.GangShapes(store)
        self.warnings = PacedEvents(events, clock=clock)
        self.reader = BodyReader()
        self.whole_decodes: Counter[str] = self.reader.whole_decodes
        self.streamed_answers = 0
        self.streamed_fallbacks = 0
        self._ladder = verdicts.Ladder()
        self._encoder = msgspec.json.Encoder()
        self._handlers: dict[str, Callable[[bytes], VerbAnswer]] = {
            "onSessionOpen": self.session_open,
            "onSessionClose": self.session_close,
            "predicate": self.predicate,
            "prioritize": self.prioritize,
            "preemptable": lambda body: self.evict(body, cross_queue=False),
            "reclaimable": lambda body: self.evict(body, cross_queue=True),
            "queueOverused": self.queue_overused,
            "jobEnqueueable": self.job_enqueueable,
            "jobEnqueued": self.job_enqueued,
            "jobReady": self.job_ready,
            "allocateFunc": lambda body: self.allocate(body, allocate=True),
            "deallocateFunc": lambda body: self.allocate(body, allocate=False),
        }

    def call(self, verb: str, body: bytes, *, legacy: bool = False) -> VerbAnswer:
        """One verb; ``legacy`` answers predicate in the list form Volcano read up to v1.9."""
        answer = self._handlers[verb](body)
        if legacy and verb == "predicate" and answer.status == 200:
            return answers.legacy_predicate(answer, self._encoder)
        return answer

    def view(self) -> BoundQueues:
        """The quota view the verbs decide on now (the session's jobs, else the state's)."""
        return self.views.current()

    # ------------------------------------------------------------------ session

    def session_open(self, body: bytes) -> VerbAnswer:
        try:
            args = self.reader.session_open(body)
        except KilterError as exc:
            self.sessions.lost()
            return answers.bad_request(exc)
        self.sessions.open(args)
        return VerbAnswer(200, b"{}", "opened")

    def session_close(self, body: bytes) -> VerbAnswer:
        self.sessions.close()
        return VerbAnswer(200, b"{}", "closed")

    # ------------------------------------------------------------------ quota

    def job_enqueueable(self, body: bytes) -> VerbAnswer:
        try:
            job = quota_jobs.named_job(self.reader.decode(vw.JobArgs, body).job)
            answer = self.view().enqueueable(job, self.clock())
        except KilterError as exc:
            return answers.bad_request(exc)
        self.notes.add(job.key, "enqueue", answer.reason)
        if answer.status == vw.PERMIT:
            self.views.permit(job)
        if answer.never:
            self.warnings.warn(job, "KilterNeverFits", f"kilter refused to enqueue the job: it {answer.reason}")
        return VerbAnswer(200, b'{"status":%d}' % answer.status, _OUTCOMES[answer.status])

    def job_enqueued(self, body: bytes) -> VerbAnswer:
        try:
            job = quota_jobs.named_job(self.reader.decode(vw.JobArgs, body).job)
        except KilterError as exc:
            return answers.bad_request(exc)
        self.notes.add(job.key, "enqueued", "Volcano enqueued the job")
        return VerbAnswer(200, b"{}", "enqueued")

    def queue_overused(self, body: bytes) -> VerbAnswer:
        try:
            name = quota_jobs.queue_name(self.reader.decode(vw.QueueArgs, body).queue)
            overused, reason = self.view().overused(name)
        except KilterError as exc:
            return answers.bad_request(exc)
        self.notes.add(f"queue/{name}", "overused", reason)
        return VerbAnswer(200, b'{"overused":true}' if overused else b'{"overused":false}', str(overused).lower())

    def evict(self, body: bytes, *, cross_queue: bool) -> VerbAnswer:
        """preemptable (inside the evictor's queue) and reclaimable (from other queues): victims as received."""
        try:
            args = self.reader.decode(vw.EvictArgs, body)
            if args.evictor is None:
                raise InputError("evictor is null")
            raw = [bytes(r) for r in args.evictees or []]
            evictees = [self.reader.decode(vw.TaskHead, r) for r in raw]
            job = self.views.evictor(args.evictor)
            view = self.view()
            answer = view.victims(job, self.clock())
        except KilterError as exc:
            return answers.bad_request(exc)
        kept = offered_victims(view, answer, job, zip(evictees, raw, strict=True), cross_queue=cross_queue)
        status, reason = answer.status, answer.reason
        if status == vw.PERMIT and not kept:
            status, reason = QueueVerdict.REJECT, f"{reason}; none of the offered tasks belongs to those jobs"
        self.notes.add(job.key, "reclaimable" if cross_queue else "preemptable", reason)
        body_out = b'{"status":%d,"victims":[%s]}' % (status, b",".join(kept))
        return VerbAnswer(200, body_out, "victims" if kept else "none")

    # ------------------------------------------------------------------ placement

    def predicate(self, body: bytes) -> VerbAnswer:
        try:
            args = self.reader.predicate(body)
            if args.node is None or not args.node.name:
                raise InputError("node is null or has no Name")
            fleet = self.store.fleet()
            resource, gpus = shaping.task_gpus(args.task, fleet)
            task, node = args.task, args.node
            assert task is not None
            code, reason = (
                placement.fits(
                    self._ladder,
                    fleet,
                    task,
                    node=node,
                    resource=resource,
                    gpus=gpus,
                    plan=lambda: self._plan(task, gpus, fleet),
                    store=self.store,
                    lending=lambda pod: self.gangs.lending(fleet, pod),
                    reserving=lambda pod: self.gangs.reserved_for(fleet, pod, gpus),
                )
                if gpus
                else (vw.SUCCESS, "")
            )
        except KilterError as exc:
            return answers.predicate(vw.ERROR, str(exc))
        return answers.predicate(code, reason)

    def prioritize_reader(self) -> NodeNamesReader | None:
        """A reader to feed a prioritize body to as it arrives, for ``prioritize_streamed`` (None: read it whole)."""
        try:
            return NodeNamesReader(self.store.fleet().name_index)
        except KilterError:  # prioritize words the error
            return None

    def prioritize_streamed(self, streamed: StreamedNodes | None) -> VerbAnswer | None:
        """``prioritize``'s answer from the nodes a ``prioritize_reader`` found while the body arrived.

        This is ``prioritize``'s header path with the headers already read: the
        task is decoded alone from its bytes. None when the body must be read
        whole by ``prioritize`` (the reader gave up, the fleet was rebuilt
        since it began, or the task does not decode alone), which then answers
        as it always has; the two never differ for the same body.
        """
        answer = self._streamed(streamed)
        if answer is None:
            self.streamed_fallbacks += 1
        else:
            self.streamed_answers += 1
        return answer

    def _streamed(self, streamed: StreamedNodes | None) -> VerbAnswer | None:
        if streamed is None:
            return None
        try:
            fleet = self.store.fleet()
        except KilterError:
            return None
        task = self.reader.task(streamed.task)
        if streamed.names is not fleet.name_index or task is None:
            return None
        return self._prioritize(task, streamed.index, fleet)

    def prioritize(self, body: bytes) -> VerbAnswer:
        """Scores for the known nodes among those offered (0..MAX_NODE_SCORE), keyed by name."""
        try:
            fleet = self.store.fleet()
            task, index = self.reader.prioritize(body, fleet)
        except KilterError as exc:
            return answers.score_error(str(exc))
        return self._prioritize(task, index, fleet)

    def _prioritize(self, task: vw.TaskHead, index: npt.NDArray[np.int32], fleet: Fleet) -> VerbAnswer:
        """The answer for ``task`` over the offered nodes, given as fleet indices (-1: unknown)."""
        try:
            _, gpus = shaping.task_gpus(task, fleet)
            if not gpus:
                return VerbAnswer(200, b'{"nodeScore":{},"errorMessage":""}', "not-gpu")
            plan = self._plan(task, gpus, fleet)
            known = self._known_pod(task)
            held = placement.seat(plan, self.store, known or shaping.task_pod(task), uid=task.uid, gpus=gpus)
            scores = placement.scores(fleet, index, gpus=gpus, plan=plan, held=held)
            if plan is None and known is not None:  # an unknown pod's runtime is unknown: the predicate judged it
                scores = self.gangs.below_reservations(fleet, known, gpus, scores, index)
        except KilterError as exc:
            return answers.score_error(str(exc))
        return answers.node_scores(fleet, index, scores)

    def allocate(self, body: bytes, *, allocate: bool) -> VerbAnswer:
        """allocateFunc (``allocate``) and deallocateFunc: a task took or gave back its node."""
        try:
            task = self.reader.decode(vw.TaskArgs, body).task
            fleet = self.store.fleet()
            _, gpus = shaping.task_gpus(task, fleet)
            assert task is not None
            if allocate and not task.node_name:
                raise InputError("task has no NodeName")
            asks = quota_jobs.from_resource(task.resreq)
        except KilterError as exc:
            return answers.error_message(str(exc), "error")
        uid = task.uid or f"{task.namespace}/{task.name}"
        if not allocate:
            return self._deallocate(uid, gpus)
        plan = self.gangs.plan_of(shaping.gang_key(task.job)) if gpus else None
        held = placement.seat(plan, self.store, self._pod_of(task), uid=uid, gpus=gpus)
        off = placement.off_plan(plan, fleet, node=task.node_name, held=held)
        if off:
            return answers.error_message(off, "refused")
        refused = self.views.take(uid, Placed(task.job, asks, task.node_name))
        if refused:
            self.notes.add(task.job, "allocate", f"{task.name} refused: {refused}")
            return answers.error_message(f"kilter: {refused}", "refused")
        # Only the task's own gang's plan gives it a slot: a task of another job allocated onto a planned node
        # books its own GPUs and leaves that gang's slot open (as the bind verb does).
        slot = None
        if gpus and task.job and task.node_name in fleet.node_index:
            place = held.place if held is not None else None
            slot = self.gangs.bound(uid, task.node_name, gpus, gang=shaping.gang_key(task.job), place=place)
        if gpus and slot is None and task.node_name in fleet.node_index:
            self.store.assume(uid, task.node_name, gpus)
        return VerbAnswer(200, b'{"errorMessage":""}', "allocated")

    def _deallocate(self, uid: str, gpus: int) -> VerbAnswer:
        self.views.give_back(uid)
        if gpus and not self.gangs.unbound(uid):
            self.store.forget(uid)
        return VerbAnswer(200, b'{"errorMessage":""}', "deallocated")

    def job_ready(self, body: bytes) -> VerbAnswer:
        try:
            args = self.reader.decode(vw.JobArgs, body)
            job = quota_jobs.named_job(args.job)
            assert args.job is not None
            fleet = self.store.fleet()
        except KilterError as exc:
            return answers.bad_request(exc)
        off = placement.off_plan_tasks(self.gangs.plan_of(shaping.gang_key(job.key)), fleet, args.job.tasks)
        if off:
            self.notes.add(job.key, "ready", f"not ready: off the gang's plan: {', '.join(off[:5])}")
            return VerbAnswer(200, b'{"status":false}', "off-plan")
        return VerbAnswer(200, b'{"status":true}', "ready")

    # ------------------------------------------------------------------ gangs

    def _pod_of(self, task: vw.TaskHead) -> Pod:
        """The task's Pod (what its rank is read from): ``_known_pod``, else an empty Pod."""
        return self._known_pod(task) or shaping.task_pod(task)

    def _known_pod(self, task: vw.TaskHead) -> Pod | None:
        """The task's Pod as Volcano sent it with the task, else as the open session's job holds it, else as the
        cluster state does; None when none does (a prioritize body's task is read without its Pod)."""
        if getattr(task, "pod", None) is not None:
            return shaping.task_pod(task)
        job = self.sessions.job(task.job) if task.job else None
        held = (job.tasks or {}).get(task.uid) if job is not None else None
        if held is not None and held.pod is not None:
            return shaping.task_pod(held)
        return self.store.pod(task.uid)

    def _labelled(self, task: vw.TaskHead) -> GangId | None:
        """The gang the task's Pod names by kilter's gang labels (``kilter.dev/gang``), when its Volcano job is no
        gang (a PodGroup of one, Volcano's default for a bare pod): planned whole as the extender plans it."""
        found = identify(self._pod_of(task), self.store)
        return found if found is not None and found.source == GANG_LABEL else None

    def _plan(self, task: vw.TaskHead, gpus: int, fleet: Fleet) -> GangPlan | None:
        """The plan of the task's gang, made on first need; None when the task is placed on its own."""
        if not task.job:
            return None
        key = shaping.gang_key(task.job)
        gang, members = self.shapes.gang(task.job, fleet, self.sessions.current)
        if gang is None and not self.gangs.is_planned(key):  # no Volcano gang: one its pod's labels name, if any
            gang, members = self._labelled(task), frozenset({task.uid})
        if gang is None or (task.uid not in members and not self.gangs.is_planned(key)):
            return self.gangs.plan_of(key)
        plan = self.gangs.plan_for(gang, self._pod_of(task), gpus)
        if plan is not None and plan.waiting:
            self.notes.add(task.job, "wait", plan.plan.reason)
        elif plan is not None and plan.feasible:
            self.notes.get(task.job, {}).pop("wait", None)
        if plan is not None and plan.feasible and "plan" not in self.notes.get(task.job, {}):
            self.notes.add(task.job, "plan", plan.describe())
            self.notes.add(task.job, "hypernode", shaping.lowest_hypernode(fleet, plan.plan.node_indices) or "")
        return plan
