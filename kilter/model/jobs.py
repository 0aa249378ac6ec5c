"""Pod sets of the job kinds kilter plans: how many pods, from which template.

Each reader follows the upstream API of its kind and Kueue's podSet mapping
(``pkg/controller/jobs/*``): batch/v1 Job, JobSet, Kubeflow PyTorchJob and
MPIJob, LeaderWorkerSet (one gang per group), RayJob/RayCluster, Volcano Job,
a Kueue Workload, or a bare Pod. The Kueue TAS annotations on each pod
template are validated as Kueue's job webhooks validate them.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kilter.model import codec
from kilter.model.core_v1 import PodTemplateSpec
from kilter.model.errors import InputError, UnsupportedKind
from kilter.model.kueue import Workload

__all__ = [
    "ANNOTATION_PREFERRED",
    "ANNOTATION_REQUIRED",
    "ANNOTATION_SLICE_CONSTRAINTS",
    "ANNOTATION_SLICE_REQUIRED",
    "ANNOTATION_SLICE_SIZE",
    "ANNOTATION_UNCONSTRAINED",
    "JobSpec",
    "PodSetSpec",
    "TopologyRequest",
    "read_job",
    "supported_kinds",
]

ANNOTATION_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
ANNOTATION_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
ANNOTATION_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
ANNOTATION_SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
ANNOTATION_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
ANNOTATION_SLICE_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"


@dataclass(frozen=True)
class TopologyRequest:
    """Kueue's PodSetTopologyRequest: a level is a node-label key."""

    required: str | None = None
    preferred: str | None = None
    unconstrained: bool = False
    slice_level: str | None = None
    slice_size: int | None = None


@dataclass(frozen=True)
class PodSetSpec:
    name: str
    count: int
    template: PodTemplateSpec
    topology: TopologyRequest = field(default_factory=TopologyRequest)
    path: str = ""  # where the pod template sits in the job object ("$.spec.template"), for patches


@dataclass(frozen=True)
class JobSpec:
    """A job as kilter plans it: gangs (all pods of a gang start together) of pod sets."""

    kind: str
    name: str
    namespace: str
    gangs: tuple[tuple[PodSetSpec, ...], ...]


# ---------------------------------------------------------------- helpers


def _field(obj: Mapping[str, Any], key: str, path: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    value = obj.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) and kind is int:
        raise InputError(f"{key} must be an integer", path=f"{path}.{key}")
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise InputError(f"{key} must be {names}, not {type(value).__name__}", path=f"{path}.{key}")
    return value


def _map(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = _field(obj, key, path, dict, {})
    assert isinstance(value, dict)
    return value


def _count(obj: Mapping[str, Any], key: str, path: str, default: int) -> int:
    value = _field(obj, key, path, int, default)
    if value < 0:
        raise InputError(f"{key} must be >= 0", path=f"{path}.{key}")
    return int(value)


def _template(obj: Mapping[str, Any], key: str, path: str) -> PodTemplateSpec:
    raw = obj.get(key)
    if not isinstance(raw, dict):
        raise InputError(f"missing pod template {key!r}", path=f"{path}.{key}")
    return codec.convert(raw, PodTemplateSpec, path=f"{path}.{key}")


def topology_request(
    template: PodTemplateSpec, count: int, *, path: str, default_slice_size: int | None = None
) -> TopologyRequest:
    """The TAS request a pod template's annotations make, validated like Kueue's webhooks."""
    ann = template.metadata.annotations
    apath = f"{path}.metadata.annotations"
    required = ann.get(ANNOTATION_REQUIRED) or None
    preferred = ann.get(ANNOTATION_PREFERRED) or None
    unconstrained_raw = ann.get(ANNOTATION_UNCONSTRAINED)
    unconstrained = False
    if unconstrained_raw is not None:
        if unconstrained_raw.lower() not in ("true", "false", "1", "0", "t", "f"):
            raise InputError(f"{ANNOTATION_UNCONSTRAINED} must be true or false", path=apath)
        unconstrained = unconstrained_raw.lower() in ("true", "1", "t")
    if sum(x for x in (required is not None, preferred is not None, unconstrained)) > 1:
        raise InputError(
            f"{ANNOTATION_REQUIRED}, {ANNOTATION_PREFERRED} and {ANNOTATION_UNCONSTRAINED} are mutually exclusive",
            path=apath,
        )
    if ANNOTATION_SLICE_CONSTRAINTS in ann:
        if ANNOTATION_SLICE_REQUIRED in ann or ANNOTATION_SLICE_SIZE in ann:
            raise InputError(f"{ANNOTATION_SLICE_CONSTRAINTS} excludes the single-slice annotations", path=apath)
        return _multi_layer(ann[ANNOTATION_SLICE_CONSTRAINTS], required, preferred, count, apath)
    slice_level = ann.get(ANNOTATION_SLICE_REQUIRED) or None
    size_raw = ann.get(ANNOTATION_SLICE_SIZE)
    if size_raw is None and slice_level is not None:
        if default_slice_size is None:
            raise InputError(f"{ANNOTATION_SLICE_REQUIRED} needs {ANNOTATION_SLICE_SIZE}", path=apath)
        size_raw = str(default_slice_size)
    if size_raw is not None and slice_level is None:
        raise InputError(f"{ANNOTATION_SLICE_SIZE} needs {ANNOTATION_SLICE_REQUIRED}", path=apath)
    slice_size = None
    if size_raw is not None:
        if not size_raw.isdigit() or int(size_raw) < 1:
            raise InputError(f"{ANNOTATION_SLICE_SIZE} must be an integer >= 1, not {size_raw!r}", path=apath)
        slice_size = int(size_raw)
        if count and (slice_size > count or count % slice_size):
            raise InputError(
                f"{ANNOTATION_SLICE_SIZE} {slice_size} must evenly divide the pod set's {count} pods",
                path=apath,
            )
    return TopologyRequest(required, preferred, unconstrained, slice_level, slice_size)


def _multi_layer(raw: str, required: str | None, preferred: str | None, count: int, path: str) -> TopologyRequest:
    """Kueue's multi-layer slices, kept to what kilter's planner honours exactly.

    One layer is an ordinary slice. With more layers the innermost slice is
    planned and the outer ones must be levels the gang as a whole stays in,
    so they are accepted only when their size equals the pod count.
    """
    try:
        layers = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"{ANNOTATION_SLICE_CONSTRAINTS} is not JSON: {exc.msg}", path=path) from None
    except RecursionError:  # a value anyone may write, nested past the parser's depth
        raise InputError(f"{ANNOTATION_SLICE_CONSTRAINTS} is not JSON: nested too deep", path=path) from None
    if not isinstance(layers, list) or not 1 <= len(layers) <= 3:
        raise InputError(f"{ANNOTATION_SLICE_CONSTRAINTS} must be a list of 1 to 3 layers", path=path)
    parsed: list[tuple[str, int]] = []
    for i, layer in enumerate(layers):
        size = layer.get("size") if isinstance(layer, dict) else None
        level = layer.get("topology") if isinstance(layer, dict) else None
        if isinstance(size, str) and size.isdigit():
            size = int(size)
        if not isinstance(level, str) or not level or not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise InputError("each layer needs a topology label and a size >= 1", path=f"{path}[{i}]")
        parsed.append((level, size))
    for (_, outer), (_, inner) in itertools.pairwise(parsed):
        if outer % inner:
            raise InputError(f"layer size {outer} is not a multiple of the next layer's {inner}", path=path)
    if count and count % parsed[0][1]:
        raise InputError(f"outermost layer size {parsed[0][1]} must divide the pod set's {count} pods", path=path)
    for level, size in parsed[:-1]:
        if size != count:
            raise InputError(
                f"kilter plans one slice layer; outer layer {level} of size {size} must equal the pod count {count}",
                path=path,
            )
        if required is None:
            required = level
    level, size = parsed[-1]
    return TopologyRequest(required, preferred, False, level, size)


def _pod_set(
    name: str, count: int, template: PodTemplateSpec, path: str, default_slice: int | None = None
) -> PodSetSpec:
    return PodSetSpec(
        name, count, template, topology_request(template, count, path=path, default_slice_size=default_slice), path
    )


# ---------------------------------------------------------------- readers


def _job_pods(spec: Mapping[str, Any], path: str) -> int:
    parallelism = _count(spec, "parallelism", path, 1)
    completions = _field(spec, "completions", path, int)
    return min(parallelism, completions) if isinstance(completions, int) else parallelism


def _read_batch_job(obj: Mapping[str, Any]) -> list[list[PodSetSpec]]:
    spec = _map(obj, "spec", "$")
    tpath = "$.spec.template"
    return [[_pod_set("main", _job_pods(spec, "$.spec"), _template(spec, "template", "$.spec"), tpath)]]


def _read_jobset(obj: Mapping[str, Any]) -> list[list[PodSetSpec]]:
    spec = _map(obj, "spec", "$")
    rjobs = _field(spec, "replicatedJobs", "$.spec", list, [])
    sets = []
    for i, rj in enumerate(rjobs):
        path = f"$.spec.replicatedJobs[{i}]"
        if not isinstance(rj, dict):
            raise InputError("replicated job must be an object", path=path)
        job_spec = _map(_map(rj, "template", path), "spec", f"{path}.template")
        per_job = _job_pods(job_spec, f"{path}.template.spec")
        replicas = _count(rj, "replicas", path, 1)
        template = _template(job_spec, "template", f"{path}.template.spec")
        sets.append(
            _pod_set(
                str(rj.get("name", f"rj{i}")),
                replicas * per_job,
                template,
                f"{path}.template.spec.template",
                per_job,
            )
        )
    return [sets]


def _read_replica_specs(obj: Mapping[str, Any], key: str, roles: tuple[str, ...]) -> list[list[PodSetSpec]]:
    spec = _map(obj, "spec", "$")
    replica_specs = _map(spec, key, "$.spec")
    ordered = [r for r in roles if r in replica_specs] + sorted(r for r in replica_specs if r not in roles)
    sets = []
    for role in ordered:
        path = f"$.spec.{key}.{role}"
        rs = replica_specs[role]
        if not isinstance(rs, dict):
            raise InputError("replica spec must be an object", path=path)
        sets.append(
            _pod_set(
                role.lower(),
                _count(rs, "replicas", path, 1),
                _template(rs, "template", path),
                f"{path}.template",
            )
        )
    return [sets]


def _read_pytorchjob(obj: Mapping[str, Any]) -> list[list[PodSetSpec]]:
    return _read_replica_specs(obj, "pytorchReplicaSpecs", ("Master", "Worker"))


def _read_mpijob(obj: Mapping[str, Any]) -> list[list[PodSetSpec]]:
    return _read_replica_specs(obj, "mpiReplicaSpecs", ("Launcher", "Worker"))


def _read_lws(obj: Mapping[str, Any]) -> list[list[PodSetSpec]]:
    spec = _map(obj, "spec", "$")
    groups = _count(spec, "replicas", "$.spec", 1)
    lwt = _map(spec, "leaderWorkerTemplate", "$.spec")
    path = "$.spec.leaderWorkerTemplate"
    size = _count(lwt, "size", path, 1)
    if size < 1:
        raise InputError("size must be >= 1", path=f"{path}.size")
    worker = _template(lwt, "workerTemplate", path)
    leader = _template(lwt, "leaderTemplate", path) if "leaderTemplate" in lwt else worker
    gangs = []
    for g in range(groups):
        sets = [_pod_set(f"leader-{g}", 1, leader, f"{path}.leaderTemplate")]
        if size > 1:
            sets.append(_pod_set(f"workers-{g}", size - 1, worker, f"{path}.workerTemplate"))
        gangs.append(sets)
    return gangs


def _read_ray(obj: Mapping[str, Any]) -> list[list[PodSetSpec]]:
    spec = _map(obj, "spec", "$")
    kind = obj.get("kind")
    cluster, cpath = (
        (_map(spec, "rayClusterSpec", "$.spec"), "$.spec.rayClusterSpec") if kind == "RayJob" else (spec, "$.spec")
    )
    head = _map(cluster, "headGroupSpec", cpath)
    sets = [
        _pod_set(
            "head",
            1,
            _template(head, "template", f"{cpath}.headGroupSpec"),
            f"{cpath}.headGroupSpec.template",
        )
    ]
    for i, wg in enumerate(_field(cluster, "workerGroupSpecs", cpath, list, [])):
        path = f"{cpath}.workerGroupSpecs[{i}]"
        if not isinstance(wg, dict):
            raise InputError("worker group must be an object", path=path)
        pods = _count(wg, "replicas", path, 1) * max(1, _count(wg, "numOfHosts", path, 1))
        sets.append(
            _pod_set(
                str(wg.get("groupName", f"workers-{i}")),
                pods,
                _template(wg, "template", path),
                f"{path}.template",
            )
        )
    return [sets]


def _read_volcano_job(obj: Mapping[str, Any]) -> list[list[PodSetSpec]]:
    spec = _map(obj, "spec", "$")
    sets = []
    for i, task in enumerate(_field(spec, "tasks", "$.spec", list, [])):
        path = f"$.spec.tasks[{i}]"
        if not isinstance(task, dict):
            raise InputError("task must be an object", path=path)
        sets.append(
            _pod_set(
                str(task.get("name", f"task-{i}")),
                _count(task, "replicas", path, 1),
                _template(task, "template", path),
                f"{path}.template",
            )
        )
    return [sets]


def _read_workload(obj: Mapping[str, Any]) -> list[list[PodSetSpec]]:
    wl = codec.convert(obj, Workload)
    sets = []
    for i, ps in enumerate(wl.spec.pod_sets):
        path = f"$.spec.podSets[{i}]"
        tr = ps.topology_request
        if tr is not None:
            request = TopologyRequest(
                tr.required,
                tr.preferred,
                bool(tr.unconstrained),
                tr.pod_set_slice_required_topology,
                tr.pod_set_slice_size,
            )
        else:
            request = topology_request(ps.template, ps.count, path=f"{path}.template")
        sets.append(PodSetSpec(ps.name, ps.count, ps.template, request, f"{path}.template"))
    return [sets]


def _read_pod(obj: Mapping[str, Any]) -> list[list[PodSetSpec]]:
    template = codec.convert({"metadata": obj.get("metadata", {}), "spec": obj.get("spec", {})}, PodTemplateSpec)
    return [[_pod_set("main", 1, template, "$")]]


_READERS: dict[tuple[str, str], Callable[[Mapping[str, Any]], list[list[PodSetSpec]]]] = {
    ("batch", "Job"): _read_batch_job,
    ("jobset.x-k8s.io", "JobSet"): _read_jobset,
    ("kubeflow.org", "PyTorchJob"): _read_pytorchjob,
    ("kubeflow.org", "MPIJob"): _read_mpijob,
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): _read_lws,
    ("ray.io", "RayJob"): _read_ray,
    ("ray.io", "RayCluster"): _read_ray,
    ("batch.volcano.sh", "Job"): _read_volcano_job,
    ("kueue.x-k8s.io", "Workload"): _read_workload,
    ("", "Pod"): _read_pod,
}


def supported_kinds() -> list[str]:
    return sorted(f"{group}/{kind}" if group else kind for group, kind in _READERS)


def read_job(obj: Any) -> JobSpec:
    """Read any supported job object; InputError for unknown kinds or malformed fields."""
    if not isinstance(obj, dict):
        raise InputError("a job must be a Kubernetes object (a mapping)")
    api_version = obj.get("apiVersion")
    kind = obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise InputError("the job needs apiVersion and kind")
    group = api_version.rpartition("/")[0]
    reader = _READERS.get((group, kind))
    if reader is None:
        raise UnsupportedKind(f"unsupported kind {api_version}/{kind}; kilter plans {', '.join(supported_kinds())}")
    meta = _map(obj, "metadata", "$")
    gangs = reader(obj)
    return JobSpec(
        kind=kind,
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        gangs=tuple(tuple(g) for g in gangs),
    )
