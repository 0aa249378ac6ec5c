"""The mutating webhook: fill in Kueue's TAS pod-set annotations that suit the platform.

Only for jobs that opt in — ``kilter.dev/topology: auto`` on the job, or
``kilter.dev/topology-policy: auto`` on the ClusterQueue its LocalQueue
leads to (``off`` on the job wins) — and only on pod templates where the
user set none of the TAS annotations: kilter never overwrites what a user
wrote, and a second pass changes nothing.

For each GPU pod set, judged on the fleet *when idle*: if one healthy
scale-up domain can hold it, require that domain (``podset-required-topology``
= the domain label, e.g. ``nvidia.com/gpu.clique``); otherwise require slices
of the largest size that divides the pod count and fits one domain, and
prefer the level above the domain (the rack's block) for the whole set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kilter.model.annotations import TOPOLOGY, TOPOLOGY_POLICY
from kilter.model.errors import InputError, KilterError
from kilter.model.jobs import (
    ANNOTATION_PREFERRED,
    ANNOTATION_REQUIRED,
    ANNOTATION_SLICE_CONSTRAINTS,
    ANNOTATION_SLICE_REQUIRED,
    ANNOTATION_SLICE_SIZE,
    ANNOTATION_UNCONSTRAINED,
    PodSetSpec,
    TopologyRequest,
    read_job,
)
from kilter.state.store import ClusterStore
from kilter.topology.catalog import Platform
from kilter.topology.fleet import Fleet
from kilter.topology.labels import HOSTNAME_LABEL
from kilter.topology.plan import gang_request, plan_gang
from kilter.webhooks.admission import AdmissionRequest, Verdict, json_pointer
from kilter.webhooks.validate import QUEUE_NAME, Validator, pod_set_shape

__all__ = ["Mutator"]

TAS_ANNOTATIONS = (
    ANNOTATION_REQUIRED,
    ANNOTATION_PREFERRED,
    ANNOTATION_UNCONSTRAINED,
    ANNOTATION_SLICE_REQUIRED,
    ANNOTATION_SLICE_SIZE,
    ANNOTATION_SLICE_CONSTRAINTS,
)
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _pointer(path: str) -> list[str | int]:
    """``$.spec.replicatedJobs[0].template`` as pointer parts."""
    parts: list[str | int] = []
    for name, index in _STEP.findall(path[1:]):
        parts.append(int(index) if index else name)
    return parts


class Mutator:
    def __init__(self, store: ClusterStore, validator: Validator) -> None:
        self.store = store
        self.validator = validator
        self._domain_keys: dict[tuple[int, str], str | None] = {}
        self._chosen: dict[tuple[int, int, bytes], dict[str, str] | None] = {}

    def review(self, request: AdmissionRequest) -> Verdict:
        if request.operation != "CREATE" or not isinstance(request.object, Mapping):
            return Verdict()
        obj = request.object
        try:
            if not self._opted_in(request.namespace, obj):
                return Verdict()
            job = read_job(dict(obj))
        except KilterError:
            return Verdict()  # not a job kilter reads, or malformed: the validating webhook speaks to that
        fleet = self.store.idle_fleet()
        patch: list[dict[str, Any]] = []
        warnings: list[str] = []
        for gang in job.gangs:
            for ps in gang:
                if any(k in ps.template.metadata.annotations for k in TAS_ANNOTATIONS):
                    continue
                key = (self.store.generation, ps.count, pod_set_shape((ps,)))
                if key not in self._chosen:
                    if len(self._chosen) > 4096:
                        self._chosen.clear()
                    self._chosen[key] = self._annotations_for(fleet, ps)
                chosen = self._chosen[key]
                if chosen is None:
                    continue
                patch.extend(_add_annotations(obj, ps, chosen))
                warnings.append(f"kilter set {', '.join(f'{k}={v}' for k, v in chosen.items())} on pod set {ps.name}")
        return Verdict(patch=patch, warnings=warnings)

    def _opted_in(self, namespace: str, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata")
        notes = meta.get("annotations") if isinstance(meta, Mapping) else None
        asked = notes.get(TOPOLOGY) if isinstance(notes, Mapping) else None
        if asked is not None:
            return bool(asked == "auto")
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        queue = labels.get(QUEUE_NAME) if isinstance(labels, Mapping) else None
        if not queue:
            return False
        state = self.store.state()
        lq = next(
            (q for q in state.local_queues if q.metadata.namespace == namespace and q.metadata.name == queue), None
        )
        cq = next((c for c in state.cluster_queues if lq and c.metadata.name == lq.spec.cluster_queue), None)
        return cq is not None and cq.metadata.annotations.get(TOPOLOGY_POLICY) == "auto"

    def _annotations_for(self, fleet: Fleet, ps: PodSetSpec) -> dict[str, str] | None:
        try:
            bare = gang_request(ps.name, [ps], fleet.catalog)
        except InputError:
            return None  # no GPUs in this pod set
        platforms = [p for p in fleet.platforms if p.device_resource == bare.resource]
        if not platforms:
            return None
        platform = platforms[0]
        domain = self._domain_key(fleet, platform) if platform.is_multi_node else HOSTNAME_LABEL
        if domain is None:
            return None
        above = fleet.levels.up_keys[0] if fleet.levels.up_keys else None
        if self._fits(fleet, ps, TopologyRequest(required=domain)):
            return {ANNOTATION_REQUIRED: domain}
        for size in sorted((d for d in range(1, ps.count) if ps.count % d == 0), reverse=True):
            if self._fits(fleet, ps, TopologyRequest(preferred=above, slice_level=domain, slice_size=size)):
                chosen = {ANNOTATION_SLICE_REQUIRED: domain, ANNOTATION_SLICE_SIZE: str(size)}
                if above:
                    chosen[ANNOTATION_PREFERRED] = above
                return chosen
        return None

    def _domain_key(self, fleet: Fleet, platform: Platform) -> str | None:
        """The domain label the platform's nodes really carry (the one the fleet was built from)."""
        key = (id(fleet), platform.name)
        if key not in self._domain_keys:
            self._domain_keys[key] = fleet.domain_label_key(platform)
        return self._domain_keys[key]

    def _fits(self, fleet: Fleet, ps: PodSetSpec, topology: TopologyRequest) -> bool:
        trial = PodSetSpec(ps.name, ps.count, ps.template, topology, ps.path)
        return plan_gang(fleet, gang_request(ps.name, [trial], fleet.catalog)).feasible


def _add_annotations(obj: Mapping[str, Any], ps: PodSetSpec, chosen: dict[str, str]) -> list[dict[str, Any]]:
    """JSON Patch ops adding ``chosen`` to the pod template at ``ps.path``, creating maps that are missing."""
    base = _pointer(ps.path)
    node: Any = obj
    for part in base:
        node = node[part]
    meta = node.get("metadata") if isinstance(node, Mapping) else None
    if not isinstance(meta, Mapping):
        return [{"op": "add", "path": json_pointer([*base, "metadata"]), "value": {"annotations": chosen}}]
    if not isinstance(meta.get("annotations"), Mapping):
        return [{"op": "add", "path": json_pointer([*base, "metadata", "annotations"]), "value": chosen}]
    return [
        {"op": "add", "path": json_pointer([*base, "metadata", "annotations", key]), "value": value}
        for key, value in chosen.items()
    ]
