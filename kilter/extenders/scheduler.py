"""kube-scheduler extender verbs: filter, prioritize, preempt, bind (bytes in, bytes out).

Each verb decodes the scheduler's body (``wire``), asks the fleet model and
the gang book, and encodes the answer in the form the scheduler reads:
``NodeNames`` when it sent names (``nodeCacheCapable: true``), ``Nodes`` —
its own Node objects, passed back verbatim — when it sent full Nodes.
Problems go in the protocol's ``Error`` field; prioritize and preempt, whose
answers have no such field, answer HTTP 400 (the scheduler ignores a failed
prioritize, and fails preemption for that pod).

Filter verdicts: a node that fits passes; a node that is full now goes to
``FailedNodes``, so preemption may still free it; a node that can never take
the pod (unknown to kilter, other GPU kind, unusable, too small, excluded by
the gang's plan or the pod's selectors) goes to ``FailedAndUnresolvableNodes``.
Pods that ask for no GPU pass through untouched.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

import msgspec
import numpy as np
import numpy.typing as npt

from kilter._native.jsonout import JsonNames
from kilter.extenders import wire
from kilter.extenders.explain import DecisionLog, Record
from kilter.gangs import GangBook, GangPlan, identify
from kilter.kube.api import ApiError, ApiServer
from kilter.model.core_v1 import Pod, pod_request
from kilter.model.errors import InputError, KilterError
from kilter.state.store import MODIFIED, ClusterStore, Event
from kilter.topology import eligibility
from kilter.topology.fleet import Fleet
from kilter.topology.score import score_pod, score_pod_json

__all__ = ["Answer", "ApiBinder", "Binder", "SchedulerExtender"]

PASS, FULL, UNKNOWN, OTHER_KIND, UNUSABLE, TOO_SMALL, NOT_ELIGIBLE, NOT_PLANNED, GANG_WAITS = range(9)
VERDICTS = (
    "passed",
    "failed",
    "unresolvable",
    "unresolvable",
    "unresolvable",
    "unresolvable",
    "unresolvable",
    "unresolvable",
    "failed",
)
MAX_SCORE = 10


@dataclass(frozen=True)
class Answer:
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
class _Candidates:
    index: npt.NDArray[np.int32]
    names: list[str] | None  # the names as sent, when they had to be decoded
    raw_items: list[msgspec.Raw] | None  # full Node objects, in Nodes mode


class SchedulerExtender:
    def __init__(self, store: ClusterStore, gangs: GangBook, log: DecisionLog) -> None:
        self.store = store
        self.gangs = gangs
        self.log = log
        self._args = msgspec.json.Decoder(wire.ExtenderArgs)
        self._preempt_args = msgspec.json.Decoder(wire.PreemptionArgs)
        self._bind_args = msgspec.json.Decoder(wire.BindingArgs)
        self._node_name = msgspec.json.Decoder(wire.NodeName)
        self._encoder = msgspec.json.Encoder()
        self._names: tuple[int, JsonNames] = (-1, JsonNames([]))
        self._static_codes: dict[tuple[int, str], tuple[npt.NDArray[np.int8], npt.NDArray[np.int32]]] = {}
        self._masks: dict[tuple[int, bytes], npt.NDArray[np.bool_] | None] = {}
        self._seen: OrderedDict[str, tuple[int, str]] = OrderedDict()  # pod uid -> (GPUs, resource), for bind

    # ------------------------------------------------------------------ shared

    def _pod(self, pod: Pod | None) -> _Pod:
        if pod is None:
            raise InputError("Pod is null")
        fleet = self.store.fleet()
        path = "$.Pod.spec"
        asked = [(r, n) for r in sorted(fleet.catalog.device_resources) if (n := pod_request(pod.spec, r, path=path))]
        if len(asked) > 1:
            raise InputError(f"the pod asks for several GPU kinds: {', '.join(r for r, _ in asked)}")
        resource, gpus = asked[0] if asked else ("", 0)
        uid = pod.metadata.uid or f"{pod.metadata.namespace}/{pod.metadata.name}"
        if gpus:
            self._seen[uid] = (gpus, resource)
            self._seen.move_to_end(uid)
            while len(self._seen) > 100_000:
                self._seen.popitem(last=False)
        return _Pod(pod, uid, resource, gpus)

    def _candidates(self, fleet: Fleet, args: wire.ExtenderArgs) -> _Candidates:
        raw_names = bytes(args.node_names)
        if raw_names != b"null":
            try:
                found = fleet.name_index.lookup_json(raw_names)
            except ValueError as exc:
                raise InputError(f"NodeNames: {exc}") from None
            if found is not None and found[1] == 0:
                return _Candidates(found[0], None, None)
            names = msgspec.json.decode(raw_names, type=list[str])
            index = np.empty(len(names), dtype=np.int32)
            fleet.name_index.lookup(names, index)
            return _Candidates(index, names, None)
        if args.nodes is None or args.nodes.items is None:
            raise InputError("neither NodeNames nor Nodes is set")
        items = args.nodes.items
        try:
            names = [_fast_name(item) or self._node_name.decode(item).metadata.name for item in items]
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise InputError(f"Nodes.items: {exc}") from None
        index = np.empty(len(names), dtype=np.int32)
        fleet.name_index.lookup(names, index)
        return _Candidates(index, names, items)

    def _gang(self, p: _Pod) -> GangPlan | None:
        gang = identify(p.pod, self.store)
        if gang is None:
            return None
        return self.gangs.plan_for(gang, p.pod, p.gpus)

    # ------------------------------------------------------------------ filter

    def filter(self, body: bytes) -> Answer:
        try:
            args = self._args.decode(body)
            p = self._pod(args.pod)
            fleet = self.store.fleet()
            cand = self._candidates(fleet, args)
            if not p.gpus:
                return Answer(200, self._pass_through(args), "not-gpu")
            plan = self._gang(p)
            codes, free, total = self._verdicts(fleet, p, cand.index, plan)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return self._filter_error(f"malformed ExtenderArgs: {exc}")
        except KilterError as exc:
            return self._filter_error(str(exc))
        reason_of = _Reasons(p.gpus, p.resource, plan)
        passing = np.flatnonzero(codes == PASS)
        body_out = self._filter_body(fleet, cand, passing, codes, free, total, reason_of)
        summary = f"{len(passing)} of {len(cand.index)} nodes pass for {p.gpus} {p.resource}"
        gang_note = plan.describe() if plan is not None else ""
        self.log.add(
            p.pod.metadata.namespace,
            p.pod.metadata.name,
            Record(
                "filter",
                time.time(),
                f"{summary}; {gang_note}" if gang_note else summary,
                fleet.node_names if cand.names is None else cand.names,
                cand.index.copy() if cand.names is None else None,
                codes,
                free.astype(np.int16),
                total.astype(np.int16),
                reason=reason_of,
                verdicts=VERDICTS,
            ),
        )
        outcome = "gang" if plan is not None else ("fits" if len(passing) else "no-fit")
        return Answer(200, body_out, outcome)

    def _json_names(self, fleet: Fleet) -> JsonNames:
        if self._names[0] != self.store.generation:
            self._names = (self.store.generation, JsonNames(fleet.node_names))
        return self._names[1]

    def _filter_body(
        self,
        fleet: Fleet,
        cand: _Candidates,
        passing: npt.NDArray[np.intp],
        codes: npt.NDArray[np.int8],
        free: npt.NDArray[np.int32],
        total: npt.NDArray[np.int32],
        reason_of: _Reasons,
    ) -> bytes:
        """The ExtenderFilterResult, written from indices: one message per distinct reason, not per node."""
        names = self._json_names(fleet)
        index = cand.index
        known = index >= 0
        failed = _FAILED[codes]
        sized = (codes == FULL) | (codes == TOO_SMALL)
        base = int(total.max(initial=0)) + 1
        free_c = np.clip(free, 0, base - 1).astype(np.int64)
        keys = codes.astype(np.int64) * (base * base) + np.where(sized, free_c * base + total, 0)
        maps: list[bytes] = []
        for wanted in (failed & known, ~failed & known & (codes != PASS)):
            at = np.flatnonzero(wanted)
            first, value_of = _group(keys[at])
            values = [
                self._encoder.encode(reason_of(int(codes[at[j]]), int(free[at[j]]), int(total[at[j]])))
                for j in first.tolist()
            ]
            maps.append(names.object(index[at], value_of, values))
        unknown = np.flatnonzero(~known)
        if len(unknown):
            assert cand.names is not None  # unknown nodes only come with decoded names
            extra = b",".join(
                self._encoder.encode(cand.names[i]) + b":" + self._encoder.encode(reason_of(UNKNOWN, 0, 0))
                for i in unknown.tolist()
            )
            maps[1] = maps[1][:-1] + (b"," if len(maps[1]) > 2 else b"") + extra + b"}"
        if cand.raw_items is not None:
            items = cand.raw_items
            kept = b",".join([items[i] for i in passing.tolist()])  # Raw is bytes-like: joined without a copy each
            nodes_part, names_part = b'{"metadata":{},"items":[' + kept + b"]}", b"null"
        else:
            nodes_part, names_part = b"null", names.array(index[passing])
        return (
            b'{"Nodes":'
            + nodes_part
            + b',"NodeNames":'
            + names_part
            + b',"FailedNodes":'
            + maps[0]
            + b',"FailedAndUnresolvableNodes":'
            + maps[1]
            + b',"Error":""}'
        )

    def _filter_error(self, message: str) -> Answer:
        return Answer(200, self._encoder.encode(wire.FilterResult(error=message)), "error")

    def _pass_through(self, args: wire.ExtenderArgs) -> bytes:
        if bytes(args.node_names) != b"null":
            return (
                b'{"Nodes":null,"NodeNames":' + bytes(args.node_names) + b',"FailedNodes":{},'
                b'"FailedAndUnresolvableNodes":{},"Error":""}'
            )
        items = args.nodes.items if args.nodes is not None and args.nodes.items is not None else []
        nodes = b'{"metadata":{},"items":[' + b",".join(bytes(i) for i in items) + b"]}"
        return b'{"Nodes":' + nodes + b',"NodeNames":null,"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'

    def _verdicts(
        self, fleet: Fleet, p: _Pod, index: npt.NDArray[np.int32], plan: GangPlan | None
    ) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int32], npt.NDArray[np.int32]]:
        """Per candidate: its verdict code and free and total GPUs (index -1, an unknown node, reads the sentinel)."""
        base, total_all = self._static(fleet, p.resource)
        codes = base[index]
        total = total_all[index]
        used = fleet.bitmap.node_used_gpus
        free = total - used[np.where(index >= 0, index, 0)]
        ok = codes == PASS
        if plan is not None:
            if not plan.feasible:
                codes[ok] = GANG_WAITS
            else:
                allowed = np.zeros(fleet.n_nodes + 1, dtype=bool)
                allowed[plan.nodes_for(p.uid, p.gpus)] = True
                codes[ok & ~allowed[index]] = NOT_PLANNED
            return codes, free, total
        codes[ok & (free < p.gpus)] = FULL
        codes[ok & (total < p.gpus)] = TOO_SMALL
        mask = self._eligible(fleet, p)
        if mask is not None:
            codes[ok & ~mask[index]] = NOT_ELIGIBLE
        return codes, free, total

    def _eligible(self, fleet: Fleet, p: _Pod) -> npt.NDArray[np.bool_] | None:
        """The pod's node mask (one slot past the end for -1), shared by pods with the same constraints.

        Replicas of a Deployment or a Job's pods carry identical selectors and
        tolerations, so the mask is worked out once per fleet and shape.
        """
        spec = p.pod.spec
        key = (self.store.generation, self._encoder.encode((spec.node_selector, spec.affinity, spec.tolerations)))
        if key in self._masks:
            return self._masks[key]
        mask = eligibility.node_mask(fleet, spec, path="$.Pod.spec")
        extended = None if mask is None else np.append(mask, False)
        if len(self._masks) > 256:
            self._masks.clear()
        self._masks[key] = extended
        return extended

    def _static(self, fleet: Fleet, resource: str) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int32]]:
        """Verdicts that change only with the fleet (unknown, other GPU kind, unusable); a last slot serves -1."""
        key = (self.store.generation, resource)
        cached = self._static_codes.get(key)
        if cached is None:
            bm = fleet.bitmap
            kinds = np.array([pl.device_resource == resource for pl in fleet.platforms], dtype=bool)
            kind_ok = kinds[bm.domain_platforms[fleet.node_domain]] if fleet.n_nodes else np.zeros(0, dtype=bool)
            codes = np.full(fleet.n_nodes + 1, PASS, dtype=np.int8)
            codes[:-1][bm.node_usable_flags == 0] = UNUSABLE
            codes[:-1][~kind_ok] = OTHER_KIND
            codes[-1] = UNKNOWN
            total = np.append(bm.node_gpu_counts.astype(np.int32), np.int32(0))
            if len(self._static_codes) > 8:
                self._static_codes.clear()
            cached = self._static_codes[key] = (codes, total)
        return cached

    # ------------------------------------------------------------------ prioritize

    def prioritize(self, body: bytes) -> Answer:
        try:
            args = self._args.decode(body)
            p = self._pod(args.pod)
            fleet = self.store.fleet()
            if not p.gpus:
                return Answer(200, b"[]", "not-gpu")
            plan = self._gang(p)
            planned: Sequence[int] = plan.nodes_for(p.uid, p.gpus) if plan is not None and plan.feasible else ()
            raw_names = bytes(args.node_names)
            if raw_names != b"null":
                scores, index = score_pod_json(fleet, raw_names, gpus=p.gpus, planned=planned)
                names = None
            else:
                cand = self._candidates(fleet, args)
                names = cand.names or []
                scores, index = score_pod(fleet, names, gpus=p.gpus, planned=planned)
            if plan is not None:
                # A gang pod's GPUs are reserved on its planned nodes: those score top, nothing else scores.
                scores = np.where(np.isin(index, np.asarray(planned, dtype=np.int32)), MAX_SCORE, 0).astype(np.int8)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return Answer(400, f"malformed ExtenderArgs: {exc}".encode(), "error")
        except KilterError as exc:
            return Answer(400, str(exc).encode(), "error")
        scores = np.maximum(scores, 0)
        if names is None and (index >= 0).all():
            body_out = self._json_names(fleet).host_scores(index, scores)
            shown = None
        else:
            shown = names if names is not None else msgspec.json.decode(raw_names, type=list[str])
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
                fleet.node_names if shown is None else shown,
                index if shown is None else None,
                scores=scores,
            ),
        )
        return Answer(200, body_out, "scored")

    # ------------------------------------------------------------------ preempt

    def preempt(self, body: bytes) -> Answer:
        try:
            args = self._preempt_args.decode(body)
            p = self._pod(args.pod)
            fleet = self.store.fleet()
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return Answer(400, f"malformed ExtenderPreemptionArgs: {exc}".encode(), "error")
        except KilterError as exc:
            return Answer(400, str(exc).encode(), "error")
        offered: dict[str, wire.MetaVictims] = dict(args.node_name_to_meta_victims or {})
        for node, victims in (args.node_name_to_victims or {}).items():
            offered.setdefault(
                node,
                wire.MetaVictims(
                    [wire.MetaPod(v.metadata.uid) for v in victims.pods or []], victims.num_pdb_violations
                ),
            )
        plan = None
        try:
            plan = self._gang(p) if p.gpus else None
        except KilterError:
            plan = None
        allowed = set(plan.nodes_for(p.uid, p.gpus)) if plan is not None and plan.feasible else None
        kept: dict[str, wire.MetaVictims] = {}
        notes: dict[str, str] = {}
        for node_name, meta in offered.items():
            index = fleet.node_index.get(node_name)
            on_node = [v for v in meta.pods or [] if self._on_node(v.uid, node_name, index)]
            if not on_node:
                notes[node_name] = "none of the victims runs on this node"
                continue
            if p.gpus and index is None:
                notes[node_name] = "not a GPU node kilter knows"
                continue
            if p.gpus and index is not None:
                freed = sum(self._gpus_of(v.uid, index) for v in on_node)
                if fleet.bitmap.node_free_gpus(index) + freed < p.gpus:
                    notes[node_name] = f"evicting these victims frees {freed} GPUs; the pod needs {p.gpus}"
                    continue
                if allowed is not None and index not in allowed:
                    notes[node_name] = "not in the gang's plan"
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
            ),
        )
        return Answer(200, self._encoder.encode(wire.PreemptionResult(kept)), "kept" if kept else "none")

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

    def bind_request(self, body: bytes) -> wire.BindingArgs | Answer:
        """The binding asked for, or the answer that refuses it (the API call happens between these two steps)."""
        try:
            args = self._bind_args.decode(body)
            for field_name, value in (
                ("PodName", args.pod_name),
                ("PodNamespace", args.pod_namespace),
                ("Node", args.node),
            ):
                if not value:
                    raise InputError(f"{field_name} is empty")
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return self.bind_failed(f"malformed ExtenderBindingArgs: {exc}")
        except KilterError as exc:
            return self.bind_failed(str(exc))
        return args

    def bind_failed(self, message: str) -> Answer:
        return Answer(200, self._encoder.encode(wire.BindingResult(message)), "error")

    def bound(self, args: wire.BindingArgs) -> Answer:
        """The binding happened: book the pod where it went now, without waiting for the feed to show it."""
        fleet = self.store.fleet()
        uid = args.pod_uid or f"{args.pod_namespace}/{args.pod_name}"
        pod = self.store.pod_named(args.pod_namespace, args.pod_name)
        if pod is not None:
            bound = msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, node_name=args.node))
            self.store.apply([Event(MODIFIED, bound)])
        seen = self._seen.get(uid)
        if seen is not None and args.node in fleet.node_index:
            gpus, _ = seen
            if self.gangs.bound(uid, args.node, gpus) is None:
                self.store.assume(uid, args.node, gpus)
        return Answer(200, self._encoder.encode(wire.BindingResult()), "bound")


class Binder:
    """Snapshot mode's binder: there is no API to call; ``SchedulerExtender.bound`` records the binding."""

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        return None


class ApiBinder(Binder):
    """Creates the ``pods/binding`` subresource, as kube-scheduler's DefaultBinder does."""

    def __init__(self, api: ApiServer) -> None:
        self.api = api

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        meta: dict[str, str] = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
        try:
            self.api.call("POST", f"{path}/binding", binding)
        except ApiError as exc:
            if exc.code != 409 or not self._already(path, uid, node):
                raise

    def _already(self, path: str, uid: str, node: str) -> bool:
        """The pod is bound to ``node`` already: a retried bind whose first answer was lost is done, not refused."""
        try:
            pod = self.api.call("GET", path)
        except ApiError:
            return False
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        spec = pod.get("spec") if isinstance(pod, dict) else None
        same_pod = not uid or (isinstance(meta, dict) and meta.get("uid") == uid)
        return same_pod and isinstance(spec, dict) and spec.get("nodeName") == node


class _Reasons:
    """Sentences for verdict codes; also the explain renderer, so both always say the same."""

    def __init__(self, gpus: int, resource: str, plan: GangPlan | None) -> None:
        self.gpus = gpus
        self.resource = resource
        self.plan = plan
        self._cache: dict[tuple[int, int, int], str] = {}

    def __call__(self, code: int, free: int, total: int) -> str:
        key = (code, free, total) if code in (FULL, TOO_SMALL) else (code, 0, 0)
        text = self._cache.get(key)
        if text is None:
            text = self._cache[key] = self._text(code, free, total)
        return text

    def _text(self, code: int, free: int, total: int) -> str:
        g, r = self.gpus, self.resource
        if code == FULL:
            return f"{free} of {total} {r} free; the pod needs {g}"
        if code == TOO_SMALL:
            return f"the node has {total} {r}; the pod needs {g}"
        if code == UNKNOWN:
            return "not a GPU node in kilter's model of the fleet"
        if code == OTHER_KIND:
            return f"the node's GPUs are not {r}"
        if code == UNUSABLE:
            return "the node is cordoned, not Ready, or its GPUs are unhealthy"
        if code == NOT_ELIGIBLE:
            return "the pod's nodeSelector, node affinity or tolerations exclude the node"
        if code == NOT_PLANNED:
            return f"kilter holds this pod to its gang's plan ({self.plan.describe() if self.plan else ''})"
        if code == GANG_WAITS:
            return f"the gang does not fit yet: {self.plan.plan.reason if self.plan else ''}"
        return "passes"


def _group(keys: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.int32]]:
    """For each distinct key, the position of its first occurrence; for each key, which distinct one it is.

    Keys are few and small (verdict, free and total GPUs), so a dense table
    beats sorting; huge keys fall back to ``np.unique``.
    """
    if not len(keys):
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.int32)
    top = int(keys.max()) + 1
    if top > 1 << 20:
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        return first, inverse.astype(np.int32).reshape(-1)
    slot = np.full(top, -1, dtype=np.int64)
    slot[keys[::-1]] = np.arange(len(keys) - 1, -1, -1)  # the first occurrence wins
    first = np.flatnonzero(slot >= 0)
    number = np.full(top, -1, dtype=np.int32)
    number[first] = np.arange(len(first), dtype=np.int32)
    return slot[first].astype(np.intp), number[keys]


_NAME_FIRST = b'{"metadata":{"name":"'


def _fast_name(item: msgspec.Raw) -> str | None:
    """The node's name when the object starts as Go's encoder writes a Node (``{"metadata":{"name":"…``).

    Saves parsing 16-50 KB of Node per item just to find its name; anything
    else (other key order, an escaped name) goes through the decoder.
    """
    head = memoryview(item)[:320].tobytes()
    if not head.startswith(_NAME_FIRST):
        return None
    end = head.find(b'"', len(_NAME_FIRST))
    name = head[len(_NAME_FIRST) : end] if end > 0 else b"\\"
    if b"\\" in name:
        return None
    try:
        return name.decode()
    except UnicodeDecodeError:
        return None


_FAILED = np.array([v == "failed" for v in VERDICTS], dtype=bool)
