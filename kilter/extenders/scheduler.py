"""kube-scheduler extender verbs: filter, prioritize, preempt, bind (bytes in, bytes out).

Each verb decodes the scheduler's body (``wire``), asks the fleet model and
the gang book, and encodes the answer in the form the scheduler reads:
``NodeNames`` when it sent names (``nodeCacheCapable: true``), ``Nodes`` —
its own Node objects, passed back verbatim — when it sent full Nodes.
Problems go in the protocol's ``Error`` field; prioritize and preempt, whose
answers have no such field, answer HTTP 400 (the scheduler ignores a failed
prioritize, and fails preemption for that pod).

Filter verdicts: a node that fits passes; a node that is full now, or every
node a gang's pod could use while the gang waits (for room to fit, or for room
in fewer scale-up domains: ``gangs.waits``), goes to ``FailedNodes``, since
time or preemption may still change the answer; a node that can never take
the pod (unknown to kilter, other GPU kind, unusable, too small, excluded by
the gang's plan or the pod's selectors) goes to ``FailedAndUnresolvableNodes``.
Pods that ask for no GPU pass through untouched. Preempt keeps no node for a
gang that waits for fewer domains: it chose to wait rather than take room.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
import numpy as np
import numpy.typing as npt

from kilter.extenders import filter_answer, preemption, wire
from kilter.extenders.explain import DecisionLog, Record
from kilter.gangs import GangBook, GangPlan, identify, ranks, seats
from kilter.kube.api import check_name, check_namespace
from kilter.model import codec
from kilter.model.core_v1 import Name, Pod
from kilter.model.errors import InputError, KilterError
from kilter.state.store import MODIFIED, ClusterStore, Event, pod_uid
from kilter.topology import pod_gpus, spares, verdicts
from kilter.topology.fleet import ENDED_PHASES, Fleet
from kilter.topology.plan import MAX_POD_GPUS
from kilter.topology.score import score_pod, score_pod_json

__all__ = ["SchedulerExtender", "VerbAnswer"]

MAX_SCORE = 10
MAX_SEEN = 100_000  # pods remembered for bind: far more than are pending at once in a 100k-pod cluster
MAX_REFUSED = 128  # pods whose filter refusals prioritize honours (a fleet mask each); it follows its filter


@dataclass(frozen=True)
class VerbAnswer:
    """An HTTP status and body; ``outcome`` labels the decision in metrics."""

    status: int
    body: bytes
    outcome: str


@dataclass
class _Pod:
    pod: Pod
    uid: str
    resource: str
    gpus: int


@dataclass
class _Seen:
    """A pod this process was asked about (filter, prioritize, preempt): what its bind may be checked against."""

    namespace: str
    name: str
    gpus: int
    pending: bool  # the body showed no nodeName
    node: str = ""  # where kilter bound it
    gang: str = ""  # the key of the gang whose plan held it, "" if none
    place: ranks.Place | None = None  # the rank slot that plan holds it to, None if none


class SchedulerExtender:
    def __init__(self, store: ClusterStore, gangs: GangBook, log: DecisionLog) -> None:
        self.store = store
        self.gangs = gangs
        self.log = log
        # codec's decoders: a body nested past the recursion limit is a DecodeError like any malformed one
        self._args = codec.JsonDecoder(wire.ExtenderArgs)
        self._preempt_args = codec.JsonDecoder(wire.PreemptionArgs)
        self._bind_args = codec.JsonDecoder(wire.BindingArgs)
        self._node_name = codec.JsonDecoder(wire.NodeName)
        self._names = codec.JsonDecoder(list[Name])  # unknown nodes' names: none longer than a name can be
        self._encoder = msgspec.json.Encoder()
        self._ladder = verdicts.Ladder()
        self._seen: OrderedDict[str, _Seen] = OrderedDict()  # pods this process filtered, by uid: what bind trusts
        self._refused: OrderedDict[str, tuple[int, npt.NDArray[np.bool_]]] = OrderedDict()  # ``_remember_refused``

    # ------------------------------------------------------------------ shared

    def _pod(self, pod: Pod | None) -> _Pod:
        if pod is None:
            raise InputError("Pod is null")
        fleet = self.store.fleet()
        path = "$.Pod.spec"
        resource, gpus = pod_gpus.ask(pod.spec, fleet.catalog.device_resources, path=path) or ("", 0)
        if gpus > MAX_POD_GPUS:  # the gang planner's rule, for every pod: no node holds it, nor does an int32
            raise InputError(f"the pod asks for {gpus} {resource}; no node offers more than {MAX_POD_GPUS}", path=path)
        uid = pod_uid(pod)
        self._saw(uid, pod, gpus)
        return _Pod(pod, uid, resource, gpus)

    def _saw(self, uid: str, pod: Pod, gpus: int) -> None:
        """Remember a pod asked about (bind accepts only those); the oldest forgotten past ``MAX_SEEN``."""
        meta = pod.metadata
        seen = self._seen.get(uid)
        if seen is None or (seen.namespace, seen.name) != (meta.namespace, meta.name):
            self._seen[uid] = _Seen(meta.namespace, meta.name, gpus, not pod.spec.node_name)
        elif not seen.node or self._pending_in_state(uid, pod):
            seen.gpus, seen.pending, seen.node = gpus, not pod.spec.node_name, ""
        self._seen.move_to_end(uid)
        while len(self._seen) > MAX_SEEN:
            self._seen.popitem(last=False)

    def _pending_in_state(self, uid: str, pod: Pod) -> bool:
        """The state holds the pod, with this uid, unbound: what kilter bound before is no longer so (a pod put
        back, a binding the API undid), and the pod may be bound again."""
        held = self.store.pod_named(pod.metadata.namespace, pod.metadata.name)
        return held is not None and held.metadata.uid == uid and not held.spec.node_name

    def _candidates(self, fleet: Fleet, args: wire.ExtenderArgs) -> filter_answer.Candidates:
        raw_names = bytes(args.node_names)
        if raw_names != b"null":
            try:
                found = fleet.name_index.lookup_json(raw_names)
            except ValueError as exc:
                raise InputError(f"NodeNames: {exc}") from None
            if found is not None and found[1] == 0:
                return filter_answer.Candidates(found[0], None, None)
            names = self._names.decode(raw_names)
            index = np.empty(len(names), dtype=np.int32)
            fleet.name_index.lookup(names, index)
            return filter_answer.Candidates(index, names, None)
        if args.nodes is None or args.nodes.items is None:
            raise InputError("neither NodeNames nor Nodes is set")
        items = args.nodes.items
        try:
            names = [filter_answer.fast_name(item) or self._node_name.decode(item).metadata.name for item in items]
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise InputError(f"Nodes.items: {exc}") from None
        index = np.empty(len(names), dtype=np.int32)
        fleet.name_index.lookup(names, index)
        return filter_answer.Candidates(index, names, items)

    def _gang(self, p: _Pod) -> GangPlan | None:
        gang = identify(p.pod, self.store)
        if gang is None:
            return None
        plan = self.gangs.plan_for(gang, p.pod, p.gpus)
        seen = self._seen.get(p.uid)
        if seen is not None:  # bind gives the pod a slot only of a plan the book holds for it (not a refusal)
            seen.gang = gang.key if plan is not None and self.gangs.plan_of(gang.key) is plan else ""
        return plan

    def _seat(self, p: _Pod, plan: GangPlan | None) -> seats.Seat | None:
        """Where the pod may go on its gang's feasible plan (None: it has none); bind gives it the rank's slot."""
        if plan is None or not plan.feasible:
            return None
        found = seats.seat(plan, p.pod, p.uid, p.gpus, self.store)
        seen = self._seen.get(p.uid)
        if seen is not None:
            seen.place = found.place
        return found

    # ------------------------------------------------------------------ filter

    def filter(self, body: bytes) -> VerbAnswer:
        try:
            args = self._args.decode(body)
            p = self._pod(args.pod)
            fleet = self.store.fleet()
            cand = self._candidates(fleet, args)
            if not p.gpus:
                return VerbAnswer(200, filter_answer.pass_through(args), "not-gpu")
            plan = self._gang(p)
            found = self._seat(p, plan)
            hold = seats.hold(plan, found) if plan is not None else None
            lent = self.gangs.lending(fleet, p.pod) if plan is None else None  # spares a lone pod may borrow
            reserved, why = self.gangs.reserved_for(fleet, p.pod, p.gpus) if plan is None else (None, "")
            judged = (
                self._ladder.judge(
                    fleet,
                    cand.index,
                    resource=p.resource,
                    gpus=p.gpus,
                    spec=p.pod.spec,
                    hold=hold,
                    lent=lent,
                    reserved=reserved,
                )
                if fleet.n_nodes
                else filter_answer.all_unknown(len(cand.index))
            )
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return self._filter_error(f"malformed ExtenderArgs: {exc}")
        except KilterError as exc:
            return self._filter_error(str(exc))
        codes, free, total = judged.codes, judged.free, judged.total
        self._remember_refused(p.uid, fleet.n_nodes, cand.index[(codes != verdicts.PASS) & (cand.index >= 0)])
        reason_of = verdicts.Reasons(gpus=p.gpus, resource=p.resource, hold=hold, reserved=why)
        passing = np.flatnonzero(codes == verdicts.PASS)
        body_out = filter_answer.filter_body(
            fleet,
            cand,
            passing=passing,
            codes=codes,
            free=free,
            total=total,
            reason_of=reason_of,
            encoder=self._encoder,
        )
        summary = f"{len(passing)} of {len(cand.index)} nodes pass for {p.gpus} {p.resource}"
        gang_note = plan.describe() if plan is not None else ""
        if found is not None and found.note:
            gang_note += f"; {found.note}"
        kept = spares.note(fleet) if plan is not None and plan.feasible else ""
        gang_note += f"; {kept}" if kept else ""
        outcome = "gang" if plan is not None else ("fits" if len(passing) else "no-fit")
        self.log.add(
            p.pod.metadata.namespace,
            p.pod.metadata.name,
            Record(
                "filter",
                time.time(),
                f"{summary}; {gang_note}" if gang_note else summary,
                fleet.node_names,
                cand.index.copy() if cand.names is None else cand.index,
                codes,
                free.astype(np.int16),
                total.astype(np.int16),
                reason=reason_of,
                verdicts=verdicts.OUTCOMES,
                extra=verdicts.unusable_notes(fleet, cand.index, codes),
                sent=cand.names or (),
                outcome=outcome,
            ),
        )
        return VerbAnswer(200, body_out, outcome)

    def _remember_refused(self, uid: str, n_nodes: int, refused: npt.NDArray[np.int32]) -> None:
        """The nodes the last filter of pod ``uid`` refused, for its prioritize (the last ``MAX_REFUSED`` pods): a
        mask over the fleet's nodes and one more, false, for the nodes it does not know (index -1)."""
        mask = np.zeros(n_nodes + 1, dtype=np.bool_)
        mask[refused] = True
        self._refused[uid] = (self.store.generation, mask)
        self._refused.move_to_end(uid)
        while len(self._refused) > MAX_REFUSED:
            self._refused.popitem(last=False)

    def _refused_by_filter(self, uid: str) -> npt.NDArray[np.bool_] | None:
        """The nodes pod ``uid``'s last filter refused, as a fleet mask with one more entry, false, for unknown
        nodes (index -1); None when no filter of it in this fleet generation is on record."""
        found = self._refused.get(uid)
        return found[1] if found is not None and found[0] == self.store.generation else None

    def _filter_error(self, message: str) -> VerbAnswer:
        return VerbAnswer(200, self._encoder.encode(wire.FilterResult(error=message)), "error")

    # ------------------------------------------------------------------ prioritize

    def prioritize(self, body: bytes) -> VerbAnswer:
        try:
            args = self._args.decode(body)
            p = self._pod(args.pod)
            fleet = self.store.fleet()
            if not p.gpus:
                return VerbAnswer(200, b"[]", "not-gpu")
            plan = self._gang(p)
            found = self._seat(p, plan)
            planned: Sequence[int] = found.nodes if found is not None else ()
            raw_names = bytes(args.node_names)
            if raw_names != b"null":
                scores, index = score_pod_json(fleet, raw_names, gpus=p.gpus, planned=planned)
                names = None
            else:
                cand = self._candidates(fleet, args)
                names = cand.names or []
                scores, index = score_pod(fleet, names, gpus=p.gpus, planned=planned)
            refused = self._refused_by_filter(p.uid)
            if plan is not None:
                # A gang pod's GPUs are reserved on its planned nodes: those score top, nothing else scores.
                scores = np.where(np.isin(index, np.asarray(planned, dtype=np.int32)), MAX_SCORE, 0).astype(np.int8)
            elif refused is None:  # no filter on record: the reservations' rule itself (the filter's covers it)
                scores = self.gangs.below_reservations(fleet, p.pod, p.gpus, scores, index)
            if refused is not None:
                # A node the filter turned away never outscores one it passed, even for a caller that asks
                # prioritize about every node (kube-scheduler sends only the survivors).
                scores = np.where(refused[index], 0, scores).astype(np.int8)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return VerbAnswer(400, f"malformed ExtenderArgs: {exc}".encode(), "error")
        except KilterError as exc:
            return VerbAnswer(400, str(exc).encode(), "error")
        scores = np.maximum(scores, 0)
        if names is None and (index >= 0).all():
            body_out = fleet.json_names().host_scores(index, scores)
            shown = None
        else:
            shown = names if names is not None else self._names.decode(raw_names)
            body_out = self._encoder.encode(
                [wire.HostPriority(h, int(s)) for h, s in zip(shown, scores.tolist(), strict=True)]
            )
        self.log.add(
            p.pod.metadata.namespace,
            p.pod.metadata.name,
            Record(
                "prioritize",
                time.time(),
                f"{len(index)} nodes scored 0..{MAX_SCORE} for {p.gpus} {p.resource}",
                fleet.node_names,
                index,
                scores=scores,
                sent=shown or (),
                outcome="scored",
            ),
        )
        return VerbAnswer(200, body_out, "scored")

    # ------------------------------------------------------------------ preempt

    def preempt(self, body: bytes) -> VerbAnswer:
        try:
            args = self._preempt_args.decode(body)
            p = self._pod(args.pod)
            fleet = self.store.fleet()
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return VerbAnswer(400, f"malformed ExtenderPreemptionArgs: {exc}".encode(), "error")
        except KilterError as exc:
            return VerbAnswer(400, str(exc).encode(), "error")
        offered: dict[str, wire.MetaVictims] = dict(args.node_name_to_meta_victims or {})
        for node, victims in (args.node_name_to_victims or {}).items():
            metas = [wire.MetaPod(v.metadata.uid) for v in victims.pods or []]
            offered.setdefault(node, wire.MetaVictims(metas, victims.num_pdb_violations))
        plan = None
        try:
            plan = self._gang(p) if p.gpus else None
        except KilterError:
            plan = None
        found = self._seat(p, plan) if p.gpus else None
        allowed = set(found.nodes) if found is not None else None
        lent = self.gangs.lending(fleet, p.pod) if plan is None and p.gpus else None
        kept: dict[str, wire.MetaVictims] = {}
        notes: dict[str, str] = {}
        reserved = preemption.reserved(self.gangs, fleet, p.pod, p.gpus) if plan is None and p.gpus else None
        for node_name, meta in offered.items():
            if plan is not None and plan.waiting:  # it chose to wait for fewer domains: it evicts nobody meanwhile
                notes[node_name] = plan.plan.reason
                continue
            index = fleet.node_index.get(node_name)
            if reserved is not None and (why := reserved(index)):
                notes[node_name] = why
                continue
            on_node = [v for v in meta.pods or [] if self._on_node(v.uid, node_name, index)]
            if plan is not None and plan.victims:
                on_node = preemption.taken_back(on_node, plan.victims, node_name)
            if not on_node:
                notes[node_name] = "none of the victims runs on this node"
                continue
            if p.gpus and index is None:
                notes[node_name] = "not a GPU node kilter knows"
                continue
            if p.gpus and index is not None:
                freed = sum(self._gpus_of(v.uid, index) for v in on_node)
                why = preemption.refusal(
                    fleet, index, gpus=p.gpus, freed=freed, allowed=allowed, lone=plan is None, lent=lent
                )
                if why:
                    notes[node_name] = why
                    continue
            kept[node_name] = wire.MetaVictims(on_node, meta.num_pdb_violations)
        names = sorted(offered)
        self.log.add(
            p.pod.metadata.namespace,
            p.pod.metadata.name,
            Record(
                "preempt",
                time.time(),
                f"{len(kept)} of {len(offered)} candidate nodes kept",
                names,
                codes=np.array([0 if n in kept else 1 for n in names], dtype=np.int8),
                reason=lambda code, free, total: "victims confirmed on this node",
                verdicts=("kept", "dropped"),
                extra=notes,
                outcome="kept" if kept else "none",
            ),
        )
        return VerbAnswer(200, self._encoder.encode(wire.PreemptionResult(kept)), "kept" if kept else "none")

    def _on_node(self, uid: str, node_name: str, index: int | None) -> bool:
        pod = self.store.pod(uid)
        if pod is not None and pod.spec.node_name:
            return pod.spec.node_name == node_name
        booking = self.store.booking(uid)
        return booking is not None and index is not None and booking.node == index

    def _gpus_of(self, uid: str, index: int) -> int:
        booking = self.store.booking(uid)
        return booking.gpus if booking is not None and booking.node == index else 0

    # ------------------------------------------------------------------ bind

    def bind_request(self, body: bytes) -> wire.BindingArgs | VerbAnswer:
        """The binding asked for, or the answer that refuses it (the API call happens between these two steps).

        The bind verb is reachable by whoever reaches kilter's port, so nothing
        in the body is taken on trust: the names must be valid Kubernetes names
        (they go into an API path), the node must be a Node the state holds,
        and the pod must be one this process was asked to filter (same uid,
        namespace and name: kube-scheduler always filters before it binds),
        pending there, and — when the state holds it — pending in the state
        with that uid. A pod bound elsewhere is refused: a second binding would
        move its GPUs in the books while it runs where it is; one bound to this
        very node already is a retry, answered as done.
        """
        try:
            args = self._bind_args.decode(body)
            for field_name, value in (
                ("PodName", args.pod_name),
                ("PodNamespace", args.pod_namespace),
                ("PodUID", args.pod_uid),
                ("Node", args.node),
            ):
                if not value:
                    raise InputError(f"{field_name} is empty")
            check_namespace(args.pod_namespace, what="PodNamespace")
            check_name(args.pod_name, what="PodName")
            check_name(args.node, what="Node")
            self._check_bind(args)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return self.bind_failed(f"malformed ExtenderBindingArgs: {exc}")
        except KilterError as exc:
            return self.bind_failed(str(exc))
        return args

    def _check_bind(self, args: wire.BindingArgs) -> None:
        """InputError unless the node exists and the pod is one kilter saw pending (see ``bind_request``)."""
        where = f"pod {args.pod_namespace}/{args.pod_name}"
        if self.store.node_named(args.node) is None:
            raise InputError(f"node {args.node} does not exist")
        seen = self._seen.get(args.pod_uid)
        if seen is None or (seen.namespace, seen.name) != (args.pod_namespace, args.pod_name):
            raise InputError(f"{where} (uid {args.pod_uid}) was not filtered by kilter")
        held = self.store.pod_named(args.pod_namespace, args.pod_name)
        if held is not None and held.metadata.uid and held.metadata.uid != args.pod_uid:
            raise InputError(f"{where} has uid {held.metadata.uid}, not {args.pod_uid}")
        node = held.spec.node_name if held is not None else seen.node  # the state's word, else what kilter did
        if node and node != args.node:
            raise InputError(f'{where} is already assigned to node "{node}"')
        if not node and not seen.pending:
            raise InputError(f"{where} was not pending when kilter filtered it")
        if held is None:
            return  # not in the state yet: the API server's binding (with the uid as precondition) decides
        if held.status.phase in ENDED_PHASES:
            raise InputError(f"{where} has ended ({held.status.phase})")

    def bind_failed(self, message: str) -> VerbAnswer:
        return VerbAnswer(200, self._encoder.encode(wire.BindingResult(message)), "error")

    def bound(self, args: wire.BindingArgs) -> VerbAnswer:
        """The binding happened: book the pod where it went now, without waiting for the feed to show it.

        A retried bind to the same node books nothing again. A pod the state
        does not hold yet is booked as *assumed*, which expires
        (``ClusterStore.assume``) if the feed never shows it bound. Its GPUs
        take a slot of a gang's plan only when the filter found the pod in
        that gang (``_gang``).
        """
        fleet = self.store.fleet()
        uid = args.pod_uid
        pod = self.store.pod_named(args.pod_namespace, args.pod_name)
        if pod is not None and not pod.spec.node_name:
            bound = msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, node_name=args.node))
            self.store.apply([Event(MODIFIED, bound)])
        seen = self._seen.get(uid)
        if seen is None or seen.node:
            return VerbAnswer(200, self._encoder.encode(wire.BindingResult()), "bound")  # a retry: recorded already
        seen.pending, seen.node = False, args.node
        if seen.gpus and args.node in fleet.node_index:
            gang = self.gangs.bound(uid, args.node, seen.gpus, gang=seen.gang, place=seen.place) if seen.gang else None
            if gang is None:
                self.store.assume(uid, args.node, seen.gpus)
        return VerbAnswer(200, self._encoder.encode(wire.BindingResult()), "bound")
