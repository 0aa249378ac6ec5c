"""The validating webhook: refuse, at submission, what can never run — and say what to change.

Checked on CREATE and UPDATE:

* ClusterQueues, Cohorts and ResourceFlavors: every ``kilter.dev/*``
  annotation is one kilter knows and parses (``split-wait``,
  ``split-wait-max`` and ``spare-nodes-per-domain`` included: at scheduling a
  bad one is only skipped, so here is where it is refused; a spare count
  above the most nodes a domain of the platforms the object reaches holds is
  refused too); ``kilter.dev/decayed-usage`` is written by kilter only.
* Pods, PodGroups and Workloads: ``kilter.dev/plan`` is written by kilter
  only (``plan_guard``).
* Jobs of every kind kilter reads (and plain pods): ``kilter.dev/topology``,
  the gang labels, and ``kilter.dev/split-wait``, ``split-wait-max`` and
  ``expected-runtime`` (on the object and on its pod templates) are well formed; Kueue's TAS pod-set annotations are
  consistent; a pod set confined by a required constraint fits the largest
  healthy domain of the fleet *when empty*, so waiting could never help; a
  job whose LocalQueue leads to a ClusterQueue that could never hold its
  requests, even borrowing everything it may (``potentialAvailable``).

Anything kilter cannot judge (no GPU nodes known, no such queue in the
state) is allowed: the webhook refuses only what it can prove.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import msgspec

from kilter.model import codec
from kilter.model.annotations import (
    GANG,
    GANG_SIZE,
    PREFIX,
    SPARE_NODES_PER_DOMAIN,
    SPARES_FOR_PREEMPTIBLE,
    TOPOLOGY,
    TOPOLOGY_POLICY,
    parse_gang_size,
)
from kilter.model.core_v1 import PodSpec, pod_request
from kilter.model.errors import InputError, KilterError, NoGpus, UnsupportedKind
from kilter.model.jobs import PodSetSpec, read_job
from kilter.model.kueue import ClusterQueue, Cohort, ResourceFlavor
from kilter.quota import amount
from kilter.quota.admit import assign_flavors
from kilter.quota.policy import DECAYED_USAGE, MIN_RUNTIME, USAGE_HALF_LIFE, parse_policy
from kilter.quota.runtimes import EXPECTED_RUNTIME, declared_runtime
from kilter.quota.tree import QuotaTree, build_tree
from kilter.state.store import ClusterStore
from kilter.topology import spare_settings
from kilter.topology.plan import gang_request, plan_gang
from kilter.topology.split_wait import SPLIT_WAIT, SPLIT_WAIT_MAX, parse_split_wait
from kilter.webhooks import plan_guard
from kilter.webhooks.admission import AdmissionRequest, Verdict

__all__ = ["QUEUE_KEYS", "TOPOLOGY", "TOPOLOGY_POLICY", "Validator", "pod_set_shape"]

TOPOLOGY_VALUES = ("auto", "off")
QUEUE_KEYS = (
    USAGE_HALF_LIFE,
    MIN_RUNTIME,
    DECAYED_USAGE,
    TOPOLOGY_POLICY,
    SPLIT_WAIT,
    SPLIT_WAIT_MAX,
    SPARE_NODES_PER_DOMAIN,
    SPARES_FOR_PREEMPTIBLE,
)
FLAVOR_KEYS = (SPARE_NODES_PER_DOMAIN, SPARES_FOR_PREEMPTIBLE)
KILTER_ONLY = (DECAYED_USAGE,)
QUEUE_NAME = "kueue.x-k8s.io/queue-name"
KUEUE = "kueue.x-k8s.io"


def _annotations(obj: Any) -> dict[str, str]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    return {str(k): str(v) for k, v in notes.items()} if isinstance(notes, Mapping) else {}


def _labels(obj: Any) -> dict[str, str]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


class Validator:
    def __init__(self, store: ClusterStore, *, kilter_users: tuple[str, ...] = ()) -> None:
        self.store = store
        self.kilter_users = kilter_users
        self._tree: tuple[int, QuotaTree] | None = None
        self._answers: dict[tuple[Any, ...], str] = {}

    def review(self, request: AdmissionRequest) -> Verdict:
        if request.operation not in ("CREATE", "UPDATE") or not isinstance(request.object, Mapping):
            return Verdict()
        obj = request.object
        try:
            forged = plan_guard.forged_plan(request, self.store, kilter_users=self.kilter_users)
            if forged:
                return Verdict(False, forged, 403)
            if request.kind.group == KUEUE and request.kind.kind in ("ClusterQueue", "Cohort", "ResourceFlavor"):
                return self._queue(request, obj)
            return self._job(request, obj)
        except KilterError as exc:
            return Verdict(False, str(exc), 422)

    # ------------------------------------------------------------------ queues

    def _queue(self, request: AdmissionRequest, obj: Mapping[str, Any]) -> Verdict:
        notes = _annotations(obj)
        known = FLAVOR_KEYS if request.kind.kind == "ResourceFlavor" else QUEUE_KEYS
        unknown = sorted(k for k in notes if k.startswith(PREFIX) and k not in known)
        if unknown:
            return Verdict(
                False,
                f"unknown annotation {unknown[0]}: kilter reads {', '.join(known)} on a {request.kind.kind}",
                422,
            )
        if request.kind.kind == "ResourceFlavor":
            self._spares(codec.convert(obj, ResourceFlavor, path="ResourceFlavor"))
            return Verdict()
        old = _annotations(request.old_object)
        for key in KILTER_ONLY:
            if notes.get(key) != old.get(key) and request.user_info.username not in self.kilter_users:
                return Verdict(
                    False,
                    f"annotation {key} is written by kilter only; remove it from your change "
                    f"(user {request.user_info.username or '?'} is not kilter)",
                    403,
                )
        parse_policy(notes, path=f"{request.kind.kind} {request.name or '?'}")
        parse_split_wait(notes, path=f"{request.kind.kind} {request.name or '?'}: metadata")
        policy = notes.get(TOPOLOGY_POLICY)
        if policy is not None and policy not in TOPOLOGY_VALUES:
            return Verdict(False, f"{TOPOLOGY_POLICY} must be one of {', '.join(TOPOLOGY_VALUES)}, not {policy!r}", 422)
        kind: type[Any] = ClusterQueue if request.kind.kind == "ClusterQueue" else Cohort
        self._spares(codec.convert(obj, kind, path=request.kind.kind))
        return Verdict()

    def _spares(self, obj: ResourceFlavor | ClusterQueue | Cohort) -> None:
        """The object's spare count fits what it would reach, and its spare lending reads (``spare_settings.check``);
        InputError if not."""
        notes = obj.metadata.annotations
        if SPARE_NODES_PER_DOMAIN not in notes and SPARES_FOR_PREEMPTIBLE not in notes:
            return
        state = self.store.state()
        spare_settings.check(
            self.store.idle_fleet(),
            obj,
            flavors=state.flavors,
            cluster_queues=state.cluster_queues,
            cohorts=state.cohorts,
        )

    # ------------------------------------------------------------------ jobs

    def _job(self, request: AdmissionRequest, obj: Mapping[str, Any]) -> Verdict:
        notes, labels = _annotations(obj), _labels(obj)
        topology = notes.get(TOPOLOGY)
        if topology is not None and topology not in TOPOLOGY_VALUES:
            return Verdict(False, f"{TOPOLOGY} must be one of {', '.join(TOPOLOGY_VALUES)}, not {topology!r}", 422)
        if GANG in labels:  # read as kilter.gangs.identity reads it: the label, else the annotation
            size = labels.get(GANG_SIZE, notes.get(GANG_SIZE))
            if size is None:
                return Verdict(False, f"label {GANG} needs {GANG_SIZE} (the gang's pod count)", 422)
            parse_gang_size(size, what=f"label {GANG_SIZE}")
        _check_waits(notes, path="$.metadata")
        try:
            job = read_job(dict(obj))
        except UnsupportedKind:
            return Verdict()
        for ps in (ps for gang in job.gangs for ps in gang):
            _check_waits(ps.template.metadata.annotations, path=f"{ps.path or ps.name}.metadata")
        for gang in job.gangs:
            problem = self._memo(("fits", pod_set_shape(gang)), partial(self._never_fits, gang))
            if problem:
                return Verdict(False, problem, 422)
        namespace, queue = request.namespace or job.namespace, labels.get(QUEUE_NAME)
        key = ("queue", namespace, queue or "", *(pod_set_shape(g) for g in job.gangs))
        problem = self._memo(key, lambda: self._never_admitted(namespace, queue, job.gangs))
        if problem:
            return Verdict(False, problem, 422)
        return Verdict()

    def _memo(self, key: tuple[Any, ...], judge: Callable[[], str]) -> str:
        """Answers per job shape and state version: a job's many pods, or a Deployment's replicas, are
        judged once (the answer depends only on the shape, the fleet and the queues)."""
        full = (self.store.generation, self.store.version, *key)
        if full not in self._answers:
            if len(self._answers) > 4096:
                self._answers.clear()
            self._answers[full] = judge()
        return self._answers[full]

    def _never_fits(self, gang: tuple[PodSetSpec, ...]) -> str:
        constrained = [ps for ps in gang if ps.topology.required or ps.topology.slice_level]
        if not constrained:
            return ""
        fleet = self.store.idle_fleet()
        try:
            request = gang_request("job", constrained, fleet.catalog)
        except NoGpus:
            return ""
        except InputError as exc:
            return str(exc)
        if not any(p.device_resource == request.resource for p in fleet.platforms):
            return ""  # no such GPUs known: nothing to prove
        plan = plan_gang(fleet, request)
        if plan.feasible:
            return ""
        return (
            f"this job can never run as asked: {plan.reason} (even with the cluster idle); "
            "relax the required topology annotation, use kueue.x-k8s.io/podset-slice-required-topology "
            "with a slice size that fits, or ask for fewer pods"
        )

    def _never_admitted(self, namespace: str, queue: str | None, gangs: tuple[tuple[PodSetSpec, ...], ...]) -> str:
        if not queue:
            return ""
        state = self.store.state()
        lq = next(
            (q for q in state.local_queues if q.metadata.namespace == namespace and q.metadata.name == queue), None
        )
        if lq is None:
            return ""
        if self._tree is None or self._tree[0] != self.store.version:
            self._tree = (self.store.version, build_tree(state.cluster_queues, state.cohorts))
        cq = self._tree[1].cluster_queues.get(lq.spec.cluster_queue)
        if cq is None or not cq.active:
            return ""
        totals: dict[str, int] = {}
        for gang in gangs:
            for ps in gang:
                for resource in _resources(ps.template.spec):
                    each = pod_request(ps.template.spec, resource, convert=_canonical(resource))
                    totals[resource] = totals.get(resource, 0) + each * ps.count
        assignment = assign_flavors(cq, totals)
        if assignment.mode != "nofit":
            return ""
        return f"ClusterQueue {cq.name} (LocalQueue {namespace}/{queue}) can never admit this job: {assignment.reason}"


def _check_waits(notes: Mapping[str, str], *, path: str) -> None:
    """The split-wait and expected-runtime annotations of a job (or pod template) read as scheduling reads them."""
    parse_split_wait(notes, path=path)
    if EXPECTED_RUNTIME in notes:
        declared_runtime({EXPECTED_RUNTIME: notes[EXPECTED_RUNTIME]}, None, None, path=path)


def pod_set_shape(gang: tuple[PodSetSpec, ...]) -> bytes:
    """What a gang's judgement depends on: per pod set its count, topology request and pod spec, as a digest.

    The memos keyed by it keep up to 4,096 shapes; a 32-byte BLAKE2b digest
    keeps them a few hundred KB where the specs themselves (a review may
    carry 16 MiB) could have made them gigabytes.
    """
    return hashlib.blake2b(
        _ENCODE([(ps.name, ps.count, ps.topology, ps.template.spec) for ps in gang]), digest_size=32
    ).digest()


_ENCODE = msgspec.json.Encoder().encode


def _resources(spec: PodSpec) -> set[str]:
    return {r for c in (*spec.containers, *spec.init_containers) for r in (*c.resources.requests, *c.resources.limits)}


def _canonical(resource: str) -> Any:
    def convert(value: Any, where: str) -> int:
        return amount.from_quantity(resource, value, path=where)

    return convert
