"""Volcano's ``extender`` plugin verbs (bytes in, bytes out) on the same engine as the kube-scheduler extender.

What each verb answers (wire facts: ``volcano_wire``):

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
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import msgspec
import numpy as np
import numpy.typing as npt

from kilter.extenders import volcano_wire as vw
from kilter.extenders.nodeinfo_stream import NodeNamesReader, StreamedNodes
from kilter.extenders.scheduler import Answer
from kilter.extenders.volcano_quota import build_view, from_resource, job_from_info, jobs_from_state, queue_annotations
from kilter.gangs import GangBook, GangId, GangKey, GangPlan
from kilter.model.core_v1 import Container, Pod, PodTemplateSpec, ResourceRequirements, pod_request
from kilter.model.errors import InputError, KilterError
from kilter.model.jobs import PodSetSpec, TopologyRequest
from kilter.model.jobs import topology_request as template_topology
from kilter.model.kueue import ClusterQueue, Cohort, ResourceFlavor
from kilter.model.volcano import NetworkTopologySpec
from kilter.quota.bound_jobs import BoundJob
from kilter.quota.bound_queues import BoundQueues, Verdict
from kilter.quota.config import FairSharingConfig
from kilter.state.store import ClusterStore
from kilter.topology import verdicts
from kilter.topology.fleet import Fleet
from kilter.topology.hypernodes import TIER_LABEL_PREFIX, tier_label
from kilter.topology.score import score_indices

__all__ = ["VOLCANO_VERBS", "EventSink", "VolcanoExtender", "legacy_predicate"]

log = logging.getLogger("kilter.volcano")

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
MAX_NODE_SCORE = 100  # Volcano adds extender scores to its plugins', which use the framework's 0..100
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
SCORE_TEXT = [str(v).encode() for v in range(MAX_NODE_SCORE + 1)]
EVENT_EVERY_S = 600.0  # one "never fits" Event per job per reason in this long
MAX_NOTES = 10_000

EventSink = Callable[[str, str, str, str], object]  # (namespace, PodGroup name, reason, message)


@dataclass
class _Session:
    jobs: dict[str, vw.JobInfo]
    queues: dict[str, vw.QueueInfo]
    serial: int


class VolcanoExtender:
    """Every verb of Volcano's extender plugin; all methods run on the server's event-loop thread."""

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
        self.queues = list(queues)
        self.events = events
        self.config = config or FairSharingConfig()
        self.clock = clock
        self.session: _Session | None = None
        self.notes: OrderedDict[str, dict[str, str]] = OrderedDict()
        self._serial = 0
        self._permitted: dict[str, BoundJob] = {}
        self._placed: dict[
            str, tuple[str, dict[str, int], str]
        ] = {}  # task uid -> (job, resources, node), this session
        self._view: tuple[tuple[int, int], BoundQueues] | None = None
        self._evented: dict[tuple[str, str], float] = {}
        self._state_jobs: tuple[int, dict[str, BoundJob]] | None = None
        self._gangs_epoch: tuple[int, int, int] = (-1, -1, -1)
        self._gang_cache: dict[str, tuple[GangId | None, frozenset[str]]] = {}
        self._ladder = verdicts.Ladder()
        self._encoder = msgspec.json.Encoder()
        self._jobs_decoder = msgspec.json.Decoder(dict[str, vw.JobInfo] | None)
        self._task_decoder = msgspec.json.Decoder(vw.TaskInfo | None)
        self._resource_decoder = msgspec.json.Decoder(vw.Resource | None)
        self._queues_decoder = msgspec.json.Decoder(dict[str, vw.QueueInfo] | None)
        self._decoders: dict[type, msgspec.json.Decoder[object]] = {}
        self._handlers: dict[str, Callable[[bytes], Answer]] = {
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

    def call(self, verb: str, body: bytes, *, legacy: bool = False) -> Answer:
        """One verb; ``legacy`` answers predicate in the list form Volcano read up to v1.9."""
        answer = self._handlers[verb](body)
        if legacy and verb == "predicate" and answer.status == 200:
            return legacy_predicate(answer, self._encoder)
        return answer

    def _decode(self, kind: type[msgspec.Struct], body: bytes) -> msgspec.Struct:
        decoder = self._decoders.get(kind)
        if decoder is None:
            decoder = self._decoders[kind] = msgspec.json.Decoder(kind)
        try:
            return decoder.decode(body)  # type: ignore[return-value]
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise InputError(f"malformed {kind.__name__}: {exc}") from None

    def _note(self, job: str, what: str, text: str) -> None:
        notes = self.notes.setdefault(job, {})
        notes[what] = text
        self.notes.move_to_end(job)
        while len(self.notes) > MAX_NOTES:
            self.notes.popitem(last=False)

    # ------------------------------------------------------------------ session

    def session_open(self, body: bytes) -> Answer:
        try:
            args = self._session_args(body)
        except KilterError as exc:
            self.session = None  # a session kilter could not read: the state is the view until the next one
            return Answer(400, str(exc).encode(), "error")
        self._serial += 1
        jobs = {f"{j.namespace}/{j.name}": j for j in (args.jobs or {}).values()}
        queues = {q.name: q for q in (args.queues or {}).values() if q.name}
        self.session = _Session(jobs, queues, self._serial)
        self._placed.clear()  # the new session's jobs already count what the last one allocated and kept
        for key in list(self._permitted):
            info = jobs.get(key)
            group = info.pod_group.normalized() if info is not None and info.pod_group is not None else None
            if info is None or (group is not None and group.status.phase != "Pending"):
                del self._permitted[key]
        return Answer(200, b"{}", "opened")

    def _session_args(self, body: bytes) -> vw.SessionOpenArgs:
        """Jobs and Queues of the session, without reading its Nodes.

        The Nodes (every NodeInfo of the cluster, ~15 KB each) are most of an
        onSessionOpen body and kilter does not need them; Go writes the
        request's fields in order (Jobs, Nodes, Queues, NamespaceInfo, ...), so
        the Jobs and Queues values are cut out by their keys and decoded alone.
        Anything that does not decode that way is decoded whole.
        """
        head = b'{"Jobs":'
        nodes = body.find(b',"Nodes":') if body.startswith(head) else -1
        queues = body.rfind(b',"Queues":') if nodes > 0 else -1
        after = body.find(b',"NamespaceInfo":', queues) if queues > nodes else -1
        if after > 0:
            try:
                jobs = self._jobs_decoder.decode(body[len(head) : nodes])
                found = self._queues_decoder.decode(body[queues + len(b',"Queues":') : after])
                return vw.SessionOpenArgs(jobs=jobs, queues=found)
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass
        args = self._decode(vw.SessionOpenArgs, body)
        assert isinstance(args, vw.SessionOpenArgs)
        return args

    def session_close(self, body: bytes) -> Answer:
        self.session = None
        self._placed.clear()
        return Answer(200, b"{}", "closed")

    # ------------------------------------------------------------------ quota

    def view(self) -> BoundQueues:
        key = (self.store.version, self.session.serial if self.session else 0)
        if self._view is None or self._view[0] != key:
            state = self.store.state()
            # A session holds every job whose queue exists, fresher than the state: then the state adds nothing.
            if self.session is not None:
                jobs = {}
                for k, info in self.session.jobs.items():
                    try:
                        jobs[k] = job_from_info(info)
                    except KilterError as exc:  # one unreadable job must not take quota away from all the others
                        self._note(k, "unreadable", str(exc))
            else:
                jobs = dict(self._jobs_from_state())
            annotations = queue_annotations(state, self.session.queues.values() if self.session else ())
            view = build_view(
                state, self.queues, jobs=jobs, annotations=annotations, permitted=self._permitted, config=self.config
            )
            for job_key, asks, node in self._placed.values():
                view.place(job_key, asks, node, taken=True)
            self._view = (key, view)
        return self._view[1]

    def _jobs_from_state(self) -> dict[str, BoundJob]:
        if self._state_jobs is None or self._state_jobs[0] != self.store.version:
            self._state_jobs = (self.store.version, jobs_from_state(self.store.state()))
        return self._state_jobs[1]

    def _job(self, info: vw.JobInfo | None) -> BoundJob:
        if info is None:
            raise InputError("job is null")
        if not info.name or not info.namespace:
            raise InputError("job has no Name or Namespace")
        return job_from_info(info)

    def job_enqueueable(self, body: bytes) -> Answer:
        try:
            args = self._decode(vw.JobArgs, body)
            assert isinstance(args, vw.JobArgs)
            job = self._job(args.job)
            answer = self.view().enqueueable(job, self.clock())
        except KilterError as exc:
            return Answer(400, str(exc).encode(), "error")
        self._note(job.key, "enqueue", answer.reason)
        if answer.status == vw.PERMIT:
            self._permitted[job.key] = job
            self.view().permit(job)
        if answer.never:
            self._event(job, "KilterNeverFits", f"kilter refused to enqueue the job: it {answer.reason}")
        outcome = {vw.PERMIT: "permit", vw.ABSTAIN: "abstain", vw.REJECT: "reject"}[answer.status]
        return Answer(200, b'{"status":%d}' % answer.status, outcome)

    def job_enqueued(self, body: bytes) -> Answer:
        try:
            args = self._decode(vw.JobArgs, body)
            assert isinstance(args, vw.JobArgs)
            job = self._job(args.job)
        except KilterError as exc:
            return Answer(400, str(exc).encode(), "error")
        self._note(job.key, "enqueued", "Volcano enqueued the job")
        return Answer(200, b"{}", "enqueued")

    def queue_overused(self, body: bytes) -> Answer:
        try:
            args = self._decode(vw.QueueArgs, body)
            assert isinstance(args, vw.QueueArgs)
            queue = args.queue
            name = (queue.name or (queue.queue.queue_name if queue.queue else "")) if queue is not None else ""
            if not name:
                raise InputError("queue is null or has no Name")
            overused, reason = self.view().overused(name)
        except KilterError as exc:
            return Answer(400, str(exc).encode(), "error")
        self._note(f"queue/{name}", "overused", reason)
        return Answer(200, b'{"overused":true}' if overused else b'{"overused":false}', str(overused).lower())

    def evict(self, body: bytes, *, cross_queue: bool) -> Answer:
        """preemptable (inside the evictor's queue) and reclaimable (from other queues): victims as received."""
        verb = "reclaimable" if cross_queue else "preemptable"
        try:
            args = self._decode(vw.EvictArgs, body)
            assert isinstance(args, vw.EvictArgs)
            if args.evictor is None:
                raise InputError("evictor is null")
            raw = args.evictees or []
            evictees = [self._decode(vw.TaskHead, bytes(r)) for r in raw]
            job = self._evictor_job(args.evictor)
            view = self.view()
            answer = view.victims(job, self.clock())
        except KilterError as exc:
            return Answer(400, str(exc).encode(), "error")
        kept = []
        evictor_cq = view.cluster_queue(job.queue)
        for task, item in zip(evictees, raw, strict=True):
            assert isinstance(task, vw.TaskHead)
            victim = view.jobs.get(task.job)
            if task.job not in answer.keys or victim is None:
                continue
            same = view.cluster_queue(victim.queue) == evictor_cq
            if same != (not cross_queue):
                continue
            kept.append(bytes(item))
        status, reason = answer.status, answer.reason
        if status == vw.PERMIT and not kept:
            status, reason = Verdict.REJECT, f"{reason}; none of the offered tasks belongs to those jobs"
        self._note(job.key, verb, reason)
        body_out = b'{"status":%d,"victims":[%s]}' % (status, b",".join(kept))
        return Answer(200, body_out, "victims" if kept else "none")

    def _evictor_job(self, task: vw.TaskHead) -> BoundJob:
        if not task.job:
            raise InputError("evictor has no Job")
        info = self.session.jobs.get(task.job) if self.session else None
        if info is not None:
            return job_from_info(info)
        known = self.view().jobs.get(task.job)
        if known is not None:
            return known
        asks = from_resource(task.resreq)
        return BoundJob(task.job, task.uid, "", task.priority, 0.0, "", {}, asks)

    # ------------------------------------------------------------------ placement

    def _task(self, task: vw.TaskHead | None, fleet: Fleet) -> tuple[str, int]:
        """The task's device resource and GPU count (whole GPUs from Volcano's milli-units)."""
        if task is None:
            raise InputError("task is null")
        scalars = task.resreq.scalar_resources if task.resreq is not None else None
        devices = fleet.catalog.device_resources
        asked = verdicts.gpu_ask(((r, v) for r, v in (scalars or {}).items() if r in devices), who="the task")
        if asked is None:
            return "", 0
        resource, milli = asked
        if milli % 1000:
            raise InputError(f"the task asks for {milli / 1000:g} {resource}; kilter places whole GPUs")
        return resource, int(milli // 1000)

    def predicate(self, body: bytes) -> Answer:
        try:
            args = self._predicate_args(body)
            if args.node is None or not args.node.name:
                raise InputError("node is null or has no Name")
            fleet = self.store.fleet()
            resource, gpus = self._task(args.task, fleet)
            assert args.task is not None
            code, reason = self._fits(fleet, args.task, args.node, resource, gpus) if gpus else (vw.SUCCESS, "")
        except KilterError as exc:
            return self._predicate_answer(vw.ERROR, str(exc))
        return self._predicate_answer(code, reason)

    def _predicate_args(self, body: bytes) -> vw.PredicateArgs:
        """The task, and the node's Name and Idle, without reading the node's Node object and Tasks.

        Called once per task x node, with a ~15 KB NodeInfo of which kilter reads
        two fields: Go writes ``{"task":…,"node":{"Name":…,"Node":{…},…,"Idle":{…},"Used":…``
        in that order, so those are cut out by their keys and decoded alone.
        Anything that does not decode that way is decoded whole.
        """
        marker = b',"node":{"Name":"'
        at = body.find(marker) if body.startswith(b'{"task":') and body.endswith(b"}}") else -1
        if at > 0:
            name_end = body.find(b'"', at + len(marker))
            idle = body.find(b',"Idle":', name_end)
            used = body.find(b',"Used":', idle)
            name = body[at + len(marker) : name_end]
            if name_end > 0 and idle > name_end and used > idle and b"\\" not in name:
                try:
                    task = self._task_decoder.decode(body[len(b'{"task":') : at])
                    free = self._resource_decoder.decode(body[idle + len(b',"Idle":') : used])
                    return vw.PredicateArgs(task, vw.NodeName(name.decode(), free))
                except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
                    pass
        args = self._decode(vw.PredicateArgs, body)
        assert isinstance(args, vw.PredicateArgs)
        return args

    def _predicate_answer(self, code: int, reason: str) -> Answer:
        body = self._encoder.encode({"status": reason, "code": code})
        return Answer(200, body, "passed" if code == vw.SUCCESS else "failed")

    def _fits(self, fleet: Fleet, task: vw.TaskHead, node: vw.NodeName, resource: str, gpus: int) -> tuple[int, str]:
        """The ladder's verdict for one node, in Volcano's status codes (``FULL``/``GANG_WAITS``: Unschedulable)."""
        index = fleet.node_index.get(node.name, -1)
        hold = None
        if self._ladder.static(fleet, resource)[0][index] == verdicts.PASS:  # a gang is planned on its first fit
            plan = self._plan(task, gpus, fleet)
            if plan is not None:
                planned = plan.nodes_for(task.uid, gpus) if plan.feasible else []
                hold = verdicts.Hold(plan.feasible, planned, plan.describe() if plan.feasible else plan.plan.reason)
        spec = _pod(task).spec
        code, free, total = self._ladder.judge_one(
            fleet, index, resource=resource, gpus=gpus, spec=spec, hold=hold, idle=_idle(node, resource)
        )
        if code == verdicts.PASS:
            return vw.SUCCESS, ""
        text = verdicts.reason(code, gpus=gpus, resource=resource, free=free, total=total, hold=hold)
        return (vw.UNSCHEDULABLE if verdicts.OUTCOMES[code] == "failed" else vw.UNRESOLVABLE), text

    def prioritize_reader(self) -> NodeNamesReader | None:
        """A reader to feed a prioritize body to as it arrives, for ``prioritize_streamed`` (None: read it whole)."""
        try:
            return NodeNamesReader(self.store.fleet().name_index)
        except KilterError:  # prioritize words the error
            return None

    def prioritize_streamed(self, streamed: StreamedNodes | None) -> Answer | None:
        """``prioritize``'s answer from the nodes a ``prioritize_reader`` found while the body arrived.

        This is ``prioritize``'s header path with the headers already read: the
        task is decoded alone from its bytes. None when the body must be read
        whole by ``prioritize`` (the reader gave up, the fleet was rebuilt
        since it began, or the task does not decode alone), which then answers
        as it always has; the two never differ for the same body.
        """
        if streamed is None:
            return None
        try:
            fleet = self.store.fleet()
            task = self._task_decoder.decode(streamed.task)
        except (KilterError, msgspec.DecodeError, msgspec.ValidationError):
            return None
        if streamed.names is not fleet.name_index or not isinstance(task, vw.TaskHead):
            return None
        return self._prioritize(task, streamed.index, fleet)

    def prioritize(self, body: bytes) -> Answer:
        """Scores for the known nodes among those offered (0..MAX_NODE_SCORE), keyed by name."""
        try:
            fleet = self.store.fleet()
            task, index = self._prioritize_args(body, fleet)
        except KilterError as exc:
            return Answer(200, self._encoder.encode({"nodeScore": {}, "errorMessage": str(exc)}), "error")
        return self._prioritize(task, index, fleet)

    def _prioritize(self, task: vw.TaskHead, index: npt.NDArray[np.int32], fleet: Fleet) -> Answer:
        """The answer for ``task`` over the offered nodes, given as fleet indices (-1: unknown)."""
        try:
            _, gpus = self._task(task, fleet)
            if not gpus:
                return Answer(200, b'{"nodeScore":{},"errorMessage":""}', "not-gpu")
            plan = self._plan(task, gpus, fleet)
        except KilterError as exc:
            return Answer(200, self._encoder.encode({"nodeScore": {}, "errorMessage": str(exc)}), "error")
        if plan is not None:
            planned = plan.nodes_for(task.uid, gpus) if plan.feasible else []
            scaled = np.where(np.isin(index, np.asarray(planned, dtype=np.int32)), MAX_NODE_SCORE, 0)
        else:
            scores = score_indices(fleet, index, gpus=gpus)
            scaled = np.maximum(scores.astype(np.int32), 0) * (MAX_NODE_SCORE // 10)
        known = np.flatnonzero(index >= 0)
        scores_json = fleet.json_names().object(index[known], scaled[known].astype(np.int32), SCORE_TEXT)
        return Answer(200, b'{"nodeScore":' + scores_json + b',"errorMessage":""}', "scored")

    def _prioritize_args(self, body: bytes, fleet: Fleet) -> tuple[vw.TaskHead, npt.NDArray[np.int32]]:
        """The task and the offered nodes' fleet indices (-1: unknown), read without decoding the nodes.

        Go writes ``{"task":…,"nodes":[NodeInfo…]}`` at ~15 KB per NodeInfo, of
        which only the names matter: the task is decoded alone and the names
        are read off the elements' headers by ``NameIndex.lookup_nodeinfos``
        (~5x faster than decoding 5,000 nodes). Anything unexpected
        (``"nodes"`` null, empty or not right after the task, a header that
        does not verify) takes the full decode, which also words the errors.
        ``prioritize_streamed`` follows the same rules on headers read while
        the body arrived.
        """
        if body.startswith(b'{"task":') and body.endswith(b"]}"):  # json.Marshal's output, not cut short
            pos = body.find(b',"nodes":[')
            if pos > 0:
                try:
                    task = self._task_decoder.decode(body[len(b'{"task":') : pos])
                except (msgspec.DecodeError, msgspec.ValidationError):  # the marker was not the top-level key
                    task = None
                found = fleet.name_index.lookup_nodeinfos(body, pos) if isinstance(task, vw.TaskHead) else None
                if found is not None:
                    assert isinstance(task, vw.TaskHead)
                    return task, found[0]
        args = self._decode(vw.PrioritizeArgs, body)
        assert isinstance(args, vw.PrioritizeArgs)
        if args.task is None:
            raise InputError("task is null")
        if args.nodes is None:
            raise InputError("nodes is null")
        index = np.empty(len(args.nodes), dtype=np.int32)
        fleet.name_index.lookup([n.name for n in args.nodes], index)
        return args.task, index

    def allocate(self, body: bytes, *, allocate: bool) -> Answer:
        try:
            args = self._decode(vw.TaskArgs, body)
            assert isinstance(args, vw.TaskArgs)
            fleet = self.store.fleet()
            _, gpus = self._task(args.task, fleet)
            task = args.task
            assert task is not None
            if allocate and not task.node_name:
                raise InputError("task has no NodeName")
        except KilterError as exc:
            return Answer(200, self._encoder.encode({"errorMessage": str(exc)}), "error")
        uid = task.uid or f"{task.namespace}/{task.name}"
        try:
            asks = from_resource(task.resreq)
        except KilterError as exc:
            return Answer(200, self._encoder.encode({"errorMessage": str(exc)}), "error")
        if not allocate:
            placed = self._placed.pop(uid, None)
            if placed is not None:
                self.view().place(placed[0], placed[1], placed[2], taken=False)
            if gpus and not self.gangs.unbound(uid):
                self.store.forget(uid)
            return Answer(200, b'{"errorMessage":""}', "deallocated")
        plan = self.gangs.plans.get(_gang_key(task.job)) if gpus else None
        if plan is not None and plan.feasible:
            index = fleet.node_index.get(task.node_name)
            if index is None or index not in plan.nodes_for(uid, gpus):
                message = f"kilter: {task.node_name} is outside the gang's plan ({plan.describe()})"
                return Answer(200, self._encoder.encode({"errorMessage": message}), "refused")
        if uid not in self._placed:
            refused = self.view().place(task.job, asks, task.node_name, taken=True)
            if refused:
                self._note(task.job, "allocate", f"{task.name} refused: {refused}")
                return Answer(200, self._encoder.encode({"errorMessage": f"kilter: {refused}"}), "refused")
            self._placed[uid] = (task.job, asks, task.node_name)
        if gpus and task.node_name in fleet.node_index and self.gangs.bound(uid, task.node_name, gpus) is None:
            self.store.assume(uid, task.node_name, gpus)
        return Answer(200, b'{"errorMessage":""}', "allocated")

    def job_ready(self, body: bytes) -> Answer:
        try:
            args = self._decode(vw.JobArgs, body)
            assert isinstance(args, vw.JobArgs)
            job = self._job(args.job)
            assert args.job is not None
            fleet = self.store.fleet()
        except KilterError as exc:
            return Answer(400, str(exc).encode(), "error")
        plan = self.gangs.plans.get(_gang_key(job.key))
        off = []
        if plan is not None and plan.feasible:
            planned = {s.node for s in plan.slots}
            off = [
                f"{t.name} on {t.node_name}"
                for t in (args.job.tasks or {}).values()
                if t.status & vw.HOLDING and t.node_name in fleet.node_index and t.node_name not in planned
            ]
        if off:
            self._note(job.key, "ready", f"not ready: off the gang's plan: {', '.join(off[:5])}")
            return Answer(200, b'{"status":false}', "off-plan")
        return Answer(200, b'{"status":true}', "ready")

    # ------------------------------------------------------------------ gangs

    def _plan(self, task: vw.TaskHead, gpus: int, fleet: Fleet) -> GangPlan | None:
        """The plan of the task's gang, made on first need; None when the task is placed on its own."""
        if not task.job:
            return None
        key = _gang_key(task.job)
        gang, members = self._gang(task.job, fleet)
        if gang is None or (task.uid not in members and key not in self.gangs.plans):
            return self.gangs.plans.get(key)
        plan = self.gangs.plan_for(gang, _pod(task), gpus)
        if plan is not None and plan.feasible and "plan" not in self.notes.get(task.job, {}):
            self._note(task.job, "plan", plan.describe())
            self._note(task.job, "hypernode", lowest_hypernode(fleet, plan.plan.node_indices) or "")
        return plan

    def _gang(self, job: str, fleet: Fleet) -> tuple[GangId | None, frozenset[str]]:
        """The gang a job's pending tasks form (and their uids), worked out once per session and state version."""
        epoch = (self.session.serial if self.session else 0, self.store.version, self.store.generation)
        if self._gangs_epoch != epoch:
            self._gangs_epoch = epoch
            self._gang_cache.clear()
        cached = self._gang_cache.get(job)
        if cached is None:
            cached = self._gang_cache[job] = self._make_gang(job, fleet)
        return cached

    def _make_gang(self, job: str, fleet: Fleet) -> tuple[GangId | None, frozenset[str]]:
        info = self.session.jobs.get(job) if self.session else None
        if info is None:
            info = self._state_job(job)
        if info is None:
            return None, frozenset()
        group = info.pod_group.normalized() if info.pod_group is not None else None
        minimum = info.min_available or (group.spec.min_member if group is not None else 0)
        tasks = list((info.tasks or {}).values())
        need = minimum - sum(1 for t in tasks if t.status & vw.HOLDING)
        if minimum < 2 or need <= 0:
            return None, frozenset()
        pending = sorted(
            (t for t in tasks if t.status & vw.PENDING and self._task(t, fleet)[1] > 0),
            key=lambda t: (t.task_role, t.name),
        )[:need]
        topology = info.network_topology or (group.spec.network_topology if group is not None else None)
        request = _network_request(topology, fleet, self._tier_names())
        pod_sets = self._pod_sets(pending, request, fleet)
        if not pod_sets:
            return None, frozenset()
        return GangId(_gang_key(job), "volcano", need, pod_sets, placed=0), frozenset(t.uid for t in pending)

    def _state_job(self, job: str) -> vw.JobInfo | None:
        """The job as the cluster state shows it: its PodGroup, and its pods as tasks."""
        namespace, _, name = job.partition("/")
        state = self.store.state()
        group = next(
            (g for g in state.pod_groups if g.metadata.namespace == namespace and g.metadata.name == name), None
        )
        if group is None:
            return None
        fleet = self.store.fleet()
        tasks: dict[str, vw.TaskInfo] = {}
        for pod in state.pods:
            meta = pod.metadata
            if meta.namespace != namespace or meta.annotations.get(GROUP_ANNOTATION) != name:
                continue
            if pod.status.phase in ("Succeeded", "Failed"):
                continue
            scalars = {
                r: float(n * 1000)
                for r in fleet.catalog.device_resources
                if (n := pod_request(pod.spec, r, path=f"Pod {namespace}/{meta.name}: spec"))
            }
            uid = meta.uid or f"{namespace}/{meta.name}"
            tasks[uid] = vw.TaskInfo(
                uid=uid,
                job=job,
                name=meta.name,
                namespace=namespace,
                resreq=vw.Resource(scalar_resources=scalars),
                node_name=pod.spec.node_name,
                status=vw.BOUND if pod.spec.node_name else vw.PENDING,
                pod=vw.TaskPod(meta, pod.spec),
            )
        return vw.JobInfo(
            uid=group.metadata.uid,
            name=name,
            namespace=namespace,
            queue=group.spec.queue,
            min_available=group.spec.min_member,
            network_topology=group.spec.network_topology,
            tasks=tasks,
            pod_group=vw.WirePodGroup(metadata=group.metadata, spec=group.spec, status=group.status),
        )

    def _pod_sets(
        self, pending: Sequence[vw.TaskInfo], topology: TopologyRequest | None, fleet: Fleet
    ) -> tuple[PodSetSpec, ...]:
        """Pending tasks grouped by role and GPU shape, each group one pod set of the gang."""
        groups: dict[tuple[str, str, int], list[vw.TaskInfo]] = {}
        for t in pending:
            resource, gpus = self._task(t, fleet)
            groups.setdefault((t.task_role or "tasks", resource, gpus), []).append(t)
        out = []
        for (role, resource, gpus), tasks in groups.items():
            pod = tasks[0].pod or vw.TaskPod()
            spec = pod.spec
            if pod_request(spec, resource, path="$.Pod.spec") != gpus:
                asks = ResourceRequirements(requests={resource: gpus}, limits={resource: gpus})
                spec = msgspec.structs.replace(spec, containers=(Container("task", asks),), init_containers=())
            template = PodTemplateSpec(metadata=pod.metadata, spec=spec)
            request = topology or template_topology(template, len(tasks), path=f"$.task[{tasks[0].name}].Pod")
            out.append(PodSetSpec(f"{role}-{gpus}", len(tasks), template, request))
        return tuple(out)

    def _tier_names(self) -> dict[str, int]:
        return {hn.spec.tier_name: hn.spec.tier for hn in self.store.state().hypernodes if hn.spec.tier_name}

    # ------------------------------------------------------------------ events

    def _event(self, job: BoundJob, reason: str, message: str) -> None:
        now = self.clock()
        key = (job.key, reason)
        if now - self._evented.get(key, -EVENT_EVERY_S) < EVENT_EVERY_S:
            return
        self._evented[key] = now
        log.info("PodGroup %s: %s: %s", job.key, reason, message)
        if self.events is not None:
            self.events(job.namespace, job.name, reason, message)


def _gang_key(job: str) -> str:
    """The gang key of a Volcano job (``NAMESPACE/PODGROUP``, as Volcano's session names it)."""
    namespace, _, name = job.partition("/")
    return GangKey(namespace, "podgroup", (name,)).format()


def _pod(task: vw.TaskHead) -> Pod:
    pod = getattr(task, "pod", None) or vw.TaskPod()
    return Pod(metadata=pod.metadata, spec=pod.spec)


def _idle(node: vw.NodeName, resource: str) -> int | None:
    scalars = node.idle.scalar_resources if node.idle is not None else None
    if scalars is None or resource not in scalars:
        return None
    return int(scalars[resource] // 1000)


def _network_request(
    spec: NetworkTopologySpec | None, fleet: Fleet, tier_names: Mapping[str, int]
) -> TopologyRequest | None:
    """A PodGroup's networkTopology as a topology level: the highest HyperNode tier it allows."""
    if spec is None or (spec.highest_tier_allowed is None and not spec.highest_tier_name):
        return None
    if spec.highest_tier_name:
        if spec.highest_tier_name not in tier_names:
            raise InputError(f"networkTopology.highestTierName {spec.highest_tier_name!r} names no HyperNode tier")
        limit = tier_names[spec.highest_tier_name]
    else:
        assert spec.highest_tier_allowed is not None
        limit = spec.highest_tier_allowed
    tiers = sorted(int(k[len(TIER_LABEL_PREFIX) :]) for k in fleet.levels.up_keys if k.startswith(TIER_LABEL_PREFIX))
    allowed = [t for t in tiers if t <= limit]
    if not allowed:
        raise InputError(
            f"networkTopology allows tiers up to {limit}; the fleet's HyperNode tiers are {tiers or 'none'}"
        )
    key = tier_label(allowed[-1])
    return TopologyRequest(required=key) if spec.mode != "soft" else TopologyRequest(preferred=key)


def lowest_hypernode(fleet: Fleet, nodes: Sequence[int]) -> str | None:
    """The lowest-tier HyperNode holding every one of ``nodes`` (Volcano's job-allocated-hypernode)."""
    if not len(nodes):
        return None
    tiers = sorted(
        (int(k[len(TIER_LABEL_PREFIX) :]), k) for k in fleet.levels.up_keys if k.startswith(TIER_LABEL_PREFIX)
    )
    for _, key in tiers:
        values = {fleet.node_labels[n].get(key) for n in nodes}
        if len(values) == 1 and None not in values:
            return values.pop()
    return None


def legacy_predicate(answer: Answer, encoder: msgspec.json.Encoder) -> Answer:
    """``{"status":[api.Status…]}``, Volcano v1.9's PredicateResponse: empty when the node fits."""
    new = msgspec.json.decode(answer.body)
    if not new["status"]:
        return Answer(200, b'{"status":[]}', answer.outcome)
    old = {"status": [{"Code": new["code"], "Reason": new["status"], "Plugin": "kilter"}]}
    return Answer(200, encoder.encode(old), answer.outcome)
