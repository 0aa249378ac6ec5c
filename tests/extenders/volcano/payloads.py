"""Request bodies of the Volcano scheduler ``extender`` plugin, shaped as Go's encoding/json writes them.

The builders return plain dicts/lists.  ``json.dumps`` of them gives what the plugin POSTs, except for
whitespace and HTML escaping; :func:`to_go_json` gives the exact compact bytes Go writes.

Conventions copied from Go's encoding/json:
* struct fields keep their Go declaration order; a struct without json tags uses the Go field names;
* map keys are sorted (byte order), integer map keys become strings (``TaskStatusIndex`` → ``"1"``, ``"32"``);
* nil maps, slices and pointers are ``null``; zero ``metav1.Time`` is ``null``; zero ``time.Time`` is
  ``"0001-01-01T00:00:00Z"``;
* ``float64`` fields (``Resource.MilliCPU`` etc.) are written without a fraction when integral (Go prints
  ``4000``, not ``4000.0``).  The builders therefore store integral floats as Python ints, so
  ``json.dumps`` prints the same digits Go does.  Go's decoder accepts either form, a Python
  decoder must accept both ``int`` and ``float``.

Typical use::

    t = task_info(pod("ml", "w-0", stable_uid("pod", "ml", "w-0"), gpus=8, group="pg"))
    n = node_info("n1", gpus=8)
    body = to_go_json(predicate_args(t, n))

Versions (``version=`` on every builder that has one): ``"v1.13"``, ``"v1.14"``, ``"v1.15"`` and
``"head"`` (the default).  The differences that matter, all read from source:

* **v1.13.x only**: the PodGroup inside ``JobInfo.PodGroup`` and the Queue inside ``QueueInfo.Queue`` are
  the *internal* ``volcano.sh/apis/pkg/apis/scheduling`` types, which in apis v1.13.x carry **no json
  tags** on PodGroup/Queue/Spec/Status.  ObjectMeta is therefore *flattened* into the object
  (``{"name":…,"namespace":…,"uid":…,"Spec":{"MinMember":…,"Queue":…},"Status":{"Phase":…},
  "Version":"v1beta1"}``) and Spec/Status keys are PascalCase.  Tags were added in apis commit
  afdb1bc (Dec 2025), first shipped in Volcano v1.14.0, which gives
  ``{"metadata":…,"spec":{"minMember":…},"status":{"phase":…},"Version":"v1beta1"}``.
* ``JobInfo.AllocatedHyperNode``/``SubJobs``/``TaskToSubJob``/``MinSubJobs`` since v1.14;
  ``JobInfo.NetworkTopology`` since v1.15; ``NetworkTopologySpec.highestTierName`` since v1.14.
* ``TaskInfo.DRAResreq``/``ResourceClaimKeys``/``ResourceClaimDRAResreq`` since v1.15;
  ``TaskInfo.PodAnnotations`` only at HEAD.
* ``NodeInfo.Generation``/``BindGeneration`` since v1.14; ``NodeInfo.NumaChgFlag`` (≤v1.15) became
  ``UnassignedNumaPods`` at HEAD; ``NodeInfo.Others`` is ``{"GpuShare":null,"hamivgpu":null}`` on v1.13
  and ``{}`` later (unless device sharing is switched on).

Upstream read (volcano-sh/volcano, tags v1.9.0…v1.15.0 and HEAD ed72c7c8, Aug 2026; volcano-sh/apis
v1.13.0…v1.13.3 and 536f121; kubernetes/kube-scheduler v0.36.1):
pkg/scheduler/plugins/extender/{extender.go,argument.go}; pkg/scheduler/api/{job_info.go,node_info.go,
resource_info.go,queue_info.go,namespace_info.go,types.go,numa_info.go,pod_info.go,pod_group_info.go,
sub_job_info.go,helpers.go,unschedule_info.go,well_known_labels.go}; pkg/scheduler/cache/{cache.go,
event_handlers.go}; pkg/scheduler/framework/{framework.go,session.go,session_plugins.go,statement.go};
pkg/scheduler/actions/{allocate,reclaim,preempt,enqueue}; pkg/scheduler/util/scheduler_helper.go;
apis pkg/apis/scheduling/{types.go,v1beta1/types.go,v1beta1/labels.go}, staging/src/volcano.sh/apis (v1.14+).

Where this differs from the commonly documented Volcano extender wire format:
* the PodGroup/Queue shape on v1.13.x (flattened ObjectMeta, PascalCase Spec/Status), see above;
* ``NodeInfo.Tasks`` is keyed by ``"namespace/podName"`` (``api.PodKey``), not by task UID
  (``JobInfo.Tasks`` and ``TaskStatusIndex`` are keyed by UID);
* several fields it lists exist only in later releases (list above);
* ``ScalarResources`` also holds ``ephemeral-storage`` in milli-units (bytes × 1000) and zero-valued
  ``hugepages-*`` entries; only ``pods`` is a plain count;
* ``ImageStates`` values are ``{"Size":…,"NumNodes":…,"Nodes":null}``;
* ``NodeInfo.State.Phase`` is 1 (Ready) for every node that has a v1.Node, whatever its Ready condition.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from kilter.model import quantity

Json = dict[str, Any]
VolcanoVersion = Literal["v1.13", "v1.14", "v1.15", "head"]
DEFAULT_VERSION: VolcanoVersion = "head"
_RANK: dict[str, int] = {"v1.13": 13, "v1.14": 14, "v1.15": 15, "head": 16}

# api.TaskStatus (pkg/scheduler/api/types.go): a bit per state.
PENDING, ALLOCATED, PIPELINED, BINDING, BOUND, RUNNING = 1, 2, 4, 8, 16, 32
RELEASING, SUCCEEDED, FAILED, UNKNOWN = 64, 128, 256, 512
TASK_STATUS: dict[str, int] = {
    "Pending": PENDING,
    "Allocated": ALLOCATED,
    "Pipelined": PIPELINED,
    "Binding": BINDING,
    "Bound": BOUND,
    "Running": RUNNING,
    "Releasing": RELEASING,
    "Succeeded": SUCCEEDED,
    "Failed": FAILED,
    "Unknown": UNKNOWN,
}
_ALLOCATED_STATUSES = frozenset({ALLOCATED, BINDING, BOUND, RUNNING})  # api.AllocatedStatus
# api.NodePhase
NODE_READY, NODE_NOT_READY = 1, 2
# predicate response codes (api.Success … api.Skip)
SUCCESS, ERROR, UNSCHEDULABLE, UNSCHEDULABLE_AND_UNRESOLVABLE, WAIT, SKIP = 0, 1, 2, 3, 4, 5
# vote values of util.Permit / util.Abstain / util.Reject
PERMIT, ABSTAIN, REJECT = 1, 0, -1

GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
TASK_SPEC_KEY = "volcano.sh/task-spec"
TASK_PRIORITY_ANNOTATION = "volcano.sh/task-priority"
PREEMPTABLE_KEY = "volcano.sh/preemptable"
REVOCABLE_ZONE_KEY = "volcano.sh/revocable-zone"
NUMA_POLICY_KEY = "volcano.sh/numa-topology-policy"
HIERARCHY_ANNOTATION = "volcano.sh/hierarchy"
HIERARCHY_WEIGHTS_ANNOTATION = "volcano.sh/hierarchy-weights"
JDB_MIN_AVAILABLE = "volcano.sh/jdb-min-available"
JDB_MAX_UNAVAILABLE = "volcano.sh/jdb-max-unavailable"
OVERSUBSCRIPTION_LABEL = "volcano.sh/oversubscription"

T_NODE = "2026-03-02T08:15:31Z"  # node registration
T0 = "2026-08-01T09:00:00Z"  # creation of pods, pod groups
T_RUN = "2026-08-01T09:00:07Z"  # pods start
DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:25.06-py3"


def _rank(version: str) -> int:
    try:
        return _RANK[version]
    except KeyError:
        raise ValueError(f"unknown Volcano version {version!r}; one of {sorted(_RANK)}") from None


def _gomap(items: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> Json:
    """A Go map as encoding/json writes it: keys sorted."""
    pairs = items.items() if isinstance(items, Mapping) else items
    return dict(sorted(pairs, key=lambda kv: kv[0]))


def _num(value: float) -> int | float:
    """A float64 as Go prints it: an integral value has no fraction."""
    if math.isfinite(value) and value == int(value) and abs(value) < 1e21:
        return int(value)
    return value


def stable_uid(*parts: str) -> str:
    """A deterministic UUID for test objects (``stable_uid("pod", "ns", "name")``)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "kilter-test:" + "/".join(parts)))


def _hex(*parts: str, n: int = 32) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:n]


def _rv(*parts: str) -> str:
    return str(1_000_000 + int(_hex(*parts, n=6), 16))


# --------------------------------------------------------------------------------------------- quantities


def parse_quantity(text: str) -> Decimal:
    """The exact value of a Kubernetes quantity string (``"500m"``, ``"64Gi"``, ``"1e3"``)."""
    return quantity.parse_quantity(text.strip())


def _value(text: str) -> int:  # resource.Quantity.Value(): rounded up
    return math.ceil(parse_quantity(text))


def _milli(text: str) -> int:  # resource.Quantity.MilliValue(): rounded up
    return math.ceil(parse_quantity(text) * 1000)


def _is_scalar_name(name: str) -> bool:  # v1helper.IsScalarResourceName, close enough for tests
    return (
        ("/" in name and not name.startswith("requests."))
        or name.startswith("hugepages-")
        or name.startswith("attachable-volumes-")
    )


# ---------------------------------------------------------------------------------------------- Resource


@dataclass
class _Res:
    """api.Resource while it is being computed."""

    milli_cpu: float = 0.0
    memory: float = 0.0
    scalars: dict[str, float] | None = None
    max_task_num: int = 0

    def add(self, other: _Res) -> _Res:  # Resource.Add: MaxTaskNum untouched
        self.milli_cpu += other.milli_cpu
        self.memory += other.memory
        for name, qty in (other.scalars or {}).items():
            if self.scalars is None:
                self.scalars = {}
            self.scalars[name] = self.scalars.get(name, 0.0) + qty
        return self

    def sub(self, other: _Res) -> _Res:  # Resource.sub: a nil map stays nil
        self.milli_cpu -= other.milli_cpu
        self.memory -= other.memory
        if self.scalars is not None:
            for name, qty in (other.scalars or {}).items():
                self.scalars[name] = self.scalars.get(name, 0.0) - qty
        return self

    def set_max(self, other: _Res) -> _Res:  # Resource.SetMaxResource
        self.milli_cpu = max(self.milli_cpu, other.milli_cpu)
        self.memory = max(self.memory, other.memory)
        for name, qty in (other.scalars or {}).items():
            if self.scalars is None:
                self.scalars = {}
            if name not in self.scalars or qty > self.scalars[name]:
                self.scalars[name] = qty
        return self

    def add_scalar(self, name: str, qty: float) -> _Res:
        if self.scalars is None:
            self.scalars = {}
        self.scalars[name] = self.scalars.get(name, 0.0) + qty
        return self

    def is_empty(self) -> bool:  # Resource.IsEmpty (minResource 0.1, "pods" ignored)
        if not (self.milli_cpu < 0.1 and self.memory < 0.1):
            return False
        return all(qty < 0.1 for name, qty in (self.scalars or {}).items() if name != "pods")

    def json(self) -> Json:
        return resource(self.milli_cpu, self.memory, self.scalars, max_task_num=self.max_task_num)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> _Res:
        scalars = data["ScalarResources"]
        return cls(
            float(data["MilliCPU"]),
            float(data["Memory"]),
            None if scalars is None else {k: float(v) for k, v in scalars.items()},
            int(data["MaxTaskNum"]),
        )


def resource(
    milli_cpu: float, memory: float, scalars: Mapping[str, float] | None = None, *, max_task_num: int = 0
) -> Json:
    """``api.Resource``: ``MilliCPU`` (millicores), ``Memory`` (bytes), ``ScalarResources`` and ``MaxTaskNum``.

    ``scalars`` holds extended resources in milli-units (1 GPU = 1000), ``ephemeral-storage`` in milli-bytes,
    ``pods`` as a plain count; ``None`` is a nil map (``null``).  Integral floats come out as ints (Go prints
    ``4000``).
    """
    return {
        "MilliCPU": _num(milli_cpu),
        "Memory": _num(memory),
        "ScalarResources": None if scalars is None else _gomap({k: _num(v) for k, v in scalars.items()}),
        "MaxTaskNum": max_task_num,
    }


def _res_from_list(rl: Mapping[str, str] | None) -> _Res:
    r = _Res()
    for name, qty in (rl or {}).items():
        if name == "cpu":
            r.milli_cpu += _milli(qty)
        elif name == "memory":
            r.memory += _value(qty)
        elif name == "pods":
            r.max_task_num += _value(qty)
            r.add_scalar(name, _value(qty))
        elif name == "ephemeral-storage":
            r.add_scalar(name, _milli(qty))
        elif name.startswith("count/"):
            continue
        elif _is_scalar_name(name):
            r.add_scalar(name, _milli(qty))
    return r


def resource_from_list(rl: Mapping[str, str] | None) -> Json:
    """``api.NewResource(v1.ResourceList)``: what Volcano makes of a node's allocatable or a request list."""
    return _res_from_list(rl).json()


def _pod_request(pod_obj: Mapping[str, Any]) -> _Res:
    """api.GetPodResourceRequest: containers summed, init containers as a maximum, overhead, plus pods=1."""
    spec = pod_obj.get("spec", {})
    result = _Res()
    for c in spec.get("containers") or []:
        result.add(_res_from_list(c.get("resources", {}).get("requests")))
    if spec.get("overhead"):
        result.add(_res_from_list(spec["overhead"]))
    sidecars, init_max = _Res(), _Res()
    for c in spec.get("initContainers") or []:
        req = _res_from_list(c.get("resources", {}).get("requests"))
        if c.get("restartPolicy") == "Always":
            result.add(req)
            sidecars.add(req)
            req = sidecars
        else:
            req = _Res().add(req).add(sidecars)
        init_max.set_max(req)
    result.set_max(init_max)
    return result.add_scalar("pods", 1)


# --------------------------------------------------------------------------------- Kubernetes objects


def _managed_fields(obj: Any) -> Json:
    """A FieldsV1 set covering every key of ``obj`` (lists of named objects use ``k:{"name":…}``)."""
    if not isinstance(obj, Mapping):
        return {}
    out: Json = {".": {}} if obj else {}
    for key, val in obj.items():
        if isinstance(val, list) and val and all(isinstance(v, Mapping) and "name" in v for v in val):
            out[f"f:{key}"] = {
                ".": {},
                **{'k:{"name":"' + str(v["name"]) + '"}': _managed_fields(v) for v in val},
            }
        else:
            out[f"f:{key}"] = _managed_fields(val)
    return out


def _mf(manager: str, time: str, fields: Json, *, subresource: str = "", api_version: str = "v1") -> Json:
    entry: Json = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": api_version,
        "time": time,
        "fieldsType": "FieldsV1",
        "fieldsV1": {k: v for k, v in fields.items() if k != "."},
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _ip(*parts: str) -> str:
    h = bytes.fromhex(_hex(*parts, n=6))
    return f"10.{h[0]}.{h[1]}.{max(h[2], 2)}"


def pod(
    namespace: str,
    name: str,
    uid: str,
    *,
    gpus: int,
    resource_name: str = "nvidia.com/gpu",
    node_name: str = "",
    group: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    priority: int | None = None,
    cpu: str = "16",
    memory: str = "128Gi",
    phase: str | None = None,
    deleting: bool = False,
    scheduler_name: str = "volcano",
    image: str = DEFAULT_IMAGE,
    created: str = T0,
) -> Json:
    """A v1.Pod as the scheduler's informer holds it (camelCase, no kind/apiVersion, with managedFields).

    ``phase`` defaults to Running when ``node_name`` is set, else Pending.  ``group`` adds the
    ``scheduling.k8s.io/group-name`` annotation.  Requests equal limits (QoS Guaranteed); GPUs go in both.
    ``deleting`` sets a deletionTimestamp (Volcano then sees the task as Releasing).
    """
    phase = phase or ("Running" if node_name else "Pending")
    ann = dict(annotations or {})
    if group is not None:
        ann[GROUP_NAME_ANNOTATION] = group
    res: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpus:
        res[resource_name] = str(gpus)
    token_vol = f"kube-api-access-{_hex(namespace, name, n=5)}"
    container: Json = {
        "name": "main",
        "image": image,
        "command": ["torchrun"],
        "args": ["--nnodes=$(WORLD_SIZE)", "--nproc-per-node=" + str(max(gpus, 1)), "/workspace/train.py"],
        "env": [
            {"name": "NCCL_DEBUG", "value": "WARN"},
            {"name": "WORLD_SIZE", "value": "1"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
        ],
        "resources": {"limits": _gomap(res), "requests": _gomap(res)},
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": token_vol, "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    tolerations: list[Json] = [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
    ]
    if gpus:
        tolerations.insert(0, {"key": resource_name, "operator": "Exists", "effect": "NoSchedule"})
    spec: Json = {
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            {
                "name": token_vol,
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                    }
                                ]
                            }
                        },
                    ],
                    "defaultMode": 420,
                },
            },
        ],
        "containers": [container],
        "restartPolicy": "OnFailure",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
    }
    if node_name:
        spec["nodeName"] = node_name
    spec |= {
        "securityContext": {},
        "schedulerName": scheduler_name,
        "tolerations": tolerations,
        "priority": 0 if priority is None else priority,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    metadata: Json = {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": _rv(namespace, name)}
    metadata["creationTimestamp"] = created
    if deleting:
        metadata["deletionTimestamp"] = T_RUN
        metadata["deletionGracePeriodSeconds"] = 30
    if labels:
        metadata["labels"] = _gomap(labels)
    if ann:
        metadata["annotations"] = _gomap(ann)
    status = _pod_status(namespace, name, phase, node_name, image)
    managed = [
        _mf(
            "vc-controller-manager",
            created,
            _managed_fields({"metadata": {k: metadata[k] for k in ("labels", "annotations") if k in metadata}})
            | {"f:spec": _managed_fields({k: v for k, v in spec.items() if k not in ("nodeName", "priority")})},
        )
    ]
    if node_name:
        managed.append(_mf("kubelet", T_RUN, {"f:status": _managed_fields(status)}, subresource="status"))
    metadata["managedFields"] = managed
    return {"metadata": metadata, "spec": spec, "status": status}


def _pod_status(namespace: str, name: str, phase: str, node_name: str, image: str) -> Json:
    status: Json = {"phase": phase}
    if not node_name:
        status["qosClass"] = "Guaranteed"
        return status
    running = phase == "Running"
    done = phase in ("Succeeded", "Failed")

    def cond(kind: str, ok: bool, reason: str = "") -> Json:
        c: Json = {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None}
        c["lastTransitionTime"] = T_RUN if ok else T0
        if reason:
            c["reason"] = reason
        return c

    status["conditions"] = [
        cond("PodReadyToStartContainers", running or done),
        cond("Initialized", True),
        cond("Ready", running, "" if running else ("PodCompleted" if done else "ContainersNotReady")),
        cond("ContainersReady", running, "" if running else ("PodCompleted" if done else "ContainersNotReady")),
        cond("PodScheduled", True),
    ]
    host_ip, pod_ip = _ip("node", node_name), _ip("pod", namespace, name)
    status |= {"hostIP": host_ip, "hostIPs": [{"ip": host_ip}]}
    if running or done:
        status |= {"podIP": pod_ip, "podIPs": [{"ip": pod_ip}]}
    status["startTime"] = T0
    if running:
        state: Json = {"running": {"startedAt": T_RUN}}
    elif done:
        code = 0 if phase == "Succeeded" else 1
        reason = "Completed" if code == 0 else "Error"
        state = {"terminated": {"exitCode": code, "reason": reason, "startedAt": T_RUN, "finishedAt": T_RUN}}
    else:
        state = {"waiting": {"reason": "ContainerCreating"}}
    cs: Json = {"name": "main", "state": state, "lastState": {}, "ready": running, "restartCount": 0}
    cs |= {"image": image, "imageID": ""}
    if running or done:
        cs["imageID"] = image.split(":")[0] + "@sha256:" + _hex("image", image, n=64)
        cs["containerID"] = "containerd://" + _hex("container", namespace, name, n=64)
    cs["started"] = running
    status["containerStatuses"] = [cs]
    status["qosClass"] = "Guaranteed"
    return status


_IMAGES: list[tuple[str, int]] = [
    ("nvcr.io/nvidia/pytorch:25.06-py3", 11_823_545_671),
    ("nvcr.io/nvidia/k8s-device-plugin:v0.17.2", 187_245_381),
    ("nvcr.io/nvidia/gpu-feature-discovery:v0.8.2", 92_113_807),
    ("nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04", 368_210_946),
    ("registry.k8s.io/nfd/node-feature-discovery:v0.17.3", 81_433_120),
    ("docker.io/calico/node:v3.30.1", 157_044_118),
    ("registry.k8s.io/kube-proxy:v1.33.2", 31_018_771),
    ("registry.k8s.io/pause:3.10", 320_368),
]


def node(
    name: str,
    *,
    gpus: int,
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    resource_name: str = "nvidia.com/gpu",
    cpu: str = "192",
    memory: str = "2113019696Ki",
    max_pods: int = 110,
    annotations: Mapping[str, str] | None = None,
    taints: list[Json] | None = None,
    gpu_product: str = "NVIDIA-H100-80GB-HBM3",
) -> Json:
    """A v1.Node as the informer holds it (about 6 KB of JSON): labels, capacity/allocatable with the GPU
    resource, the four kubelet conditions, nodeInfo, images, managedFields.  ``ready=False`` makes the Ready
    condition False and adds the not-ready taints, as the node lifecycle controller does."""
    std: dict[str, str] = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "gpu-8x-h100",
        "topology.kubernetes.io/region": "eu-west-1",
        "topology.kubernetes.io/zone": "eu-west-1a",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
        "feature.node.kubernetes.io/kernel-version.major": "6",
    }
    if resource_name == "nvidia.com/gpu":
        std |= {
            "feature.node.kubernetes.io/pci-10de.present": "true",
            "nvidia.com/cuda.driver-version.full": "570.148.08",
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.memory": "81559",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": gpu_product,
            "nvidia.com/gpu.replicas": "1",
            "nvidia.com/mig.capable": "true",
        }
    all_labels = _gomap({**std, **(labels or {})})
    all_annotations = _gomap(
        {
            "csi.volume.kubernetes.io/nodeid": json.dumps({"csi.tigera.io": name}, separators=(",", ":")),
            "nfd.node.kubernetes.io/feature-labels": "cpu-model.vendor_id,kernel-version.major,pci-10de.present",
            "node.alpha.kubernetes.io/ttl": "0",
            "projectcalico.org/IPv4Address": _ip("node", name) + "/16",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            **(annotations or {}),
        }
    )
    alloc: dict[str, str] = {
        "cpu": cpu,
        "ephemeral-storage": "3456563650283",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": memory,
        "pods": str(max_pods),
    }
    cap = dict(alloc, **{"ephemeral-storage": "3750614048Ki"})
    cap["memory"] = f"{_value(memory) // 1024 + 512 * 1024}Ki"
    if gpus:
        alloc[resource_name] = cap[resource_name] = str(gpus)
    all_taints = list(taints or [])
    if not ready:
        all_taints += [
            {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": T0},
        ]
    spec: Json = {"podCIDR": f"192.168.{int(_hex(name, n=2), 16)}.0/24"}
    spec["podCIDRs"] = [spec["podCIDR"]]
    if all_taints:
        spec["taints"] = all_taints

    def cond(kind: str, ok: bool, reason: str, message: str) -> Json:
        return {
            "type": kind,
            "status": "True" if ok else "False",
            "lastHeartbeatTime": "2026-08-01T08:59:40Z",
            "lastTransitionTime": T_NODE if ok or kind != "Ready" else T0,
            "reason": reason,
            "message": message,
        }

    ip = _ip("node", name)
    status: Json = {
        "capacity": _gomap(cap),
        "allocatable": _gomap(alloc),
        "conditions": [
            cond("MemoryPressure", False, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            cond("DiskPressure", False, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", False, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            cond("Ready", True, "KubeletReady", "kubelet is posting ready status")
            if ready
            else cond("Ready", False, "KubeletNotReady", "container runtime network not ready: NetworkReady=false"),
        ],
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": _hex("machine", name),
            "systemUUID": stable_uid("system", name),
            "bootID": stable_uid("boot", name),
            "kernelVersion": "6.8.0-60-generic",
            "osImage": "Ubuntu 24.04.2 LTS",
            "containerRuntimeVersion": "containerd://2.0.5",
            "kubeletVersion": "v1.33.2",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "images": [
            {"names": [img.split(":")[0] + "@sha256:" + _hex("image", img, n=64), img], "sizeBytes": size}
            for img, size in _IMAGES
        ],
        "runtimeHandlers": [
            {"name": h, "features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}}
            for h in ("", "nvidia", "runc")
        ],
        "features": {"supplementalGroupsPolicy": True},
    }
    metadata: Json = {
        "name": name,
        "uid": stable_uid("node", name),
        "resourceVersion": _rv("node", name),
        "creationTimestamp": T_NODE,
        "labels": all_labels,
        "annotations": all_annotations,
        "managedFields": [
            _mf("kubelet", T_NODE, _managed_fields({"metadata": {"labels": {k: 1 for k in std if "/" in k}}})),
            _mf("kube-controller-manager", T_NODE, _managed_fields({"spec": spec})),
            _mf("nfd-master", T_NODE, _managed_fields({"metadata": {"labels": {k: 1 for k in all_labels}}})),
            _mf("kubelet", "2026-08-01T08:59:40Z", {"f:status": _managed_fields(status)}, subresource="status"),
        ],
    }
    return {"metadata": metadata, "spec": spec, "status": status}


# ------------------------------------------------------------------------------------------- TaskInfo


def _task_status_of(pod_obj: Mapping[str, Any]) -> int:  # getTaskStatus (pkg/scheduler/api/helpers.go)
    phase = pod_obj.get("status", {}).get("phase")
    deleting = pod_obj["metadata"].get("deletionTimestamp") is not None
    if phase == "Running":
        return RELEASING if deleting else RUNNING
    if phase == "Pending":
        if deleting:
            return RELEASING
        return BOUND if pod_obj.get("spec", {}).get("nodeName") else PENDING
    return {"Succeeded": SUCCEEDED, "Failed": FAILED}.get(str(phase), UNKNOWN)


def _parse_bool(value: str) -> bool | None:  # strconv.ParseBool
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return None


def task_info(
    pod_dict: Json,
    *,
    job: str | None = None,
    status: int | None = None,
    node_name: str | None = None,
    priority: int | None = None,
    allocated_hypernode: str = "",
    eviction_occurred: bool = False,
    last_transaction: Json | None = None,
    version: VolcanoVersion = DEFAULT_VERSION,
) -> Json:
    """``api.TaskInfo`` with every marshalled field, in declaration order.

    Derived from the pod as ``api.NewTaskInfo`` does unless given: ``job`` (``"ns/<group annotation>"``,
    ``""`` without one), ``status`` (bitmask from the pod phase/nodeName/deletionTimestamp),
    ``node_name`` (``spec.nodeName``), ``priority`` (``volcano.sh/task-priority`` annotation, else
    ``spec.priority``, else 1).  ``Resreq``/``InitResreq`` come from the container requests plus
    ``pods: 1``.  The embedded TransactionContext is flattened (``NodeName`` … ``Status``).
    ``LastTransaction`` is ``null`` in snapshots; pass a dict from :func:`transaction` to fill it.
    """
    rank = _rank(version)
    meta = pod_dict["metadata"]
    ann: Mapping[str, str] = meta.get("annotations") or {}
    lab: Mapping[str, str] = meta.get("labels") or {}
    if job is None:
        group = ann.get(GROUP_NAME_ANNOTATION, "")
        job = f"{meta['namespace']}/{group}" if group else ""
    if status is None:
        status = _task_status_of(pod_dict)
    if node_name is None:
        node_name = pod_dict.get("spec", {}).get("nodeName", "")
    if priority is None:
        spec_priority = pod_dict.get("spec", {}).get("priority")
        priority = 1 if spec_priority is None else int(spec_priority)
        raw = ann.get(TASK_PRIORITY_ANNOTATION, "")
        if re.fullmatch(r"[+-]?[0-9]+", raw) and -(2**31) <= int(raw) < 2**31:  # strconv.ParseInt(_, 10, 32)
            priority = int(raw)
    req = _pod_request(pod_dict)
    preemptable = True  # GetPodPreemptable: annotation, then label, default true
    for source in (ann, lab):
        if PREEMPTABLE_KEY in source:
            preemptable = _parse_bool(source[PREEMPTABLE_KEY]) or False
            break
    revocable = ""
    if REVOCABLE_ZONE_KEY in ann:
        revocable = "*" if ann[REVOCABLE_ZONE_KEY] == "*" else ""
    elif _parse_bool(ann.get(PREEMPTABLE_KEY, "")):
        revocable = "*"
    spec = pod_dict.get("spec", {})
    task: Json = {
        "UID": meta["uid"],
        "Job": job,
        "Name": meta["name"],
        "Namespace": meta["namespace"],
        "TaskRole": ann.get(TASK_SPEC_KEY) or lab.get(TASK_SPEC_KEY) or "",
        "Resreq": req.json(),
        "InitResreq": req.json(),
    }
    if rank >= 15:
        task |= {"DRAResreq": None, "ResourceClaimKeys": None, "ResourceClaimDRAResreq": None}
    task |= {
        "NodeName": node_name,
        "EvictionOccurred": eviction_occurred,
        "JobAllocatedHyperNode": allocated_hypernode,
        "Status": status,
        "LastTransaction": last_transaction,
        "Priority": priority,
        "VolumeReady": False,
        "Preemptable": preemptable,
        "BestEffort": req.is_empty(),
        "HasRestartableInitContainer": any(
            c.get("restartPolicy") == "Always" for c in spec.get("initContainers") or []
        ),
        "SchGated": bool(spec.get("schedulingGates")),
        "RevocableZone": revocable,
        "NumaInfo": {"Policy": ann.get(NUMA_POLICY_KEY, ""), "ResMap": {}},
        "Pod": pod_dict,
    }
    if rank >= 16:
        task["PodAnnotations"] = _gomap(ann) if meta.get("annotations") is not None else None
    task["CustomBindErrHandlerSucceeded"] = False
    return task


def transaction(node_name: str, status: int, *, eviction_occurred: bool = False, hypernode: str = "") -> Json:
    """``api.TransactionContext`` (the value of ``TaskInfo.LastTransaction``)."""
    return {
        "NodeName": node_name,
        "EvictionOccurred": eviction_occurred,
        "JobAllocatedHyperNode": hypernode,
        "Status": status,
    }


def _check_task(task: Mapping[str, Any], version: str) -> None:
    rank = _rank(version)
    if ("DRAResreq" in task) != (rank >= 15) or ("PodAnnotations" in task) != (rank >= 16):
        raise ValueError(f"task {task.get('Name')!r} was not built with version={version!r}")


def _pod_key(task: Mapping[str, Any]) -> str:  # api.PodKey
    meta = task["Pod"]["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


# ------------------------------------------------------------------------------------------- NodeInfo


def node_info(
    name: str,
    *,
    gpus: int,
    used_gpus: int = 0,
    labels: Mapping[str, str] | None = None,
    tasks: Iterable[Json] = (),
    ready: bool = True,
    resource_name: str = "nvidia.com/gpu",
    node_obj: Json | None = None,
    bind_generation: int = 0,
    version: VolcanoVersion = DEFAULT_VERSION,
) -> Json:
    """``api.NodeInfo`` as the session snapshot holds it (``NewNodeInfo`` + ``AddTask`` per task).

    ``Tasks`` is keyed by ``"namespace/podName"``; each entry is a copy of the task with ``NodeName`` set
    to this node.  ``Idle``/``Used``/``Releasing``/``Pipelined`` follow ``AddTask``: Releasing tasks count
    as used and releasing, Pipelined only as pipelined, everything else as used; Succeeded/Failed tasks
    are left out (the cache never puts them on a node).  ``used_gpus`` adds one Running pod outside any
    pod group (``Job`` ``""``) holding that many GPUs, so that ``Used`` always equals the sum of ``Tasks``.
    ``State`` is ``{"Phase":1,"Reason":""}`` even for ``ready=False``: Volcano ignores node conditions
    here (``setNodeState``), only ``Node.status.conditions``/``spec.taints`` show it.
    """
    rank = _rank(version)
    v1node = node_obj or node(name, gpus=gpus, labels=labels, ready=ready, resource_name=resource_name)
    task_list = list(tasks)
    for t in task_list:
        _check_task(t, version)
    if used_gpus:
        holder = pod("default", f"{name}-gpu-holder", stable_uid("holder", name), gpus=used_gpus, node_name=name)
        holder["spec"]["schedulerName"] = "default-scheduler"
        task_list.append(task_info(holder, version=version))

    allocatable = _res_from_list(v1node["status"]["allocatable"])
    capacity = _res_from_list(v1node["status"]["capacity"])
    idle = _res_from_list(v1node["status"]["allocatable"])
    used, releasing, pipelined = _Res(), _Res(), _Res()
    node_tasks: dict[str, Json] = {}
    for t in task_list:
        if t["Status"] in (SUCCEEDED, FAILED):
            continue
        key = _pod_key(t)
        if key in node_tasks:
            raise ValueError(f"task {key} twice on node {name}")
        req = _Res.of(t["Resreq"])
        if t["Status"] == PIPELINED:
            pipelined.add(req)
        else:
            idle.sub(req)
            used.add(req)
            if t["Status"] == RELEASING:
                releasing.add(req)
        node_tasks[key] = dict(t, NodeName=name)

    node_labels: Mapping[str, str] = v1node["metadata"].get("labels") or {}
    ni: Json = {
        "Name": name,
        "Node": v1node,
        "State": {"Phase": NODE_READY, "Reason": ""},
        "Releasing": releasing.json(),
        "Pipelined": pipelined.json(),
        "Idle": idle.json(),
        "Used": used.json(),
        "Allocatable": allocatable.json(),
        "Capacity": capacity.json(),
        "ResourceUsage": {"MetricsTime": "0001-01-01T00:00:00Z", "CPUUsageAvg": {}, "MEMUsageAvg": {}},
        "Tasks": _gomap(node_tasks),
        "NumaInfo": None,
    }
    if rank >= 16:
        ni["UnassignedNumaPods"] = None
    else:
        ni["NumaChgFlag"] = 0
    ni |= {
        "NumaSchedulerInfo": None,
        "RevocableZone": node_labels.get(REVOCABLE_ZONE_KEY, ""),
        "Others": {"GpuShare": None, "hamivgpu": None} if rank == 13 else {},
        "OversubscriptionNode": bool(_parse_bool(node_labels.get(OVERSUBSCRIPTION_LABEL, ""))),
        "OfflineJobEvicting": False,
        "OversubscriptionResource": resource(0, 0),
        "ImageStates": _gomap(
            (image_name, {"Size": img["sizeBytes"], "NumNodes": 1, "Nodes": None})
            for img in v1node["status"].get("images") or []
            for image_name in img["names"]
        ),
    }
    if rank >= 14:
        ni |= {"Generation": 0, "BindGeneration": bind_generation}
    return ni


# -------------------------------------------------------------------------------------- PodGroup, JobInfo


def _object_meta(
    name: str,
    uid: str,
    *,
    namespace: str = "",
    created: str = T0,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    managed: list[Json] | None = None,
) -> Json:
    meta: Json = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta |= {"uid": uid, "resourceVersion": _rv(namespace, name, uid), "generation": 1, "creationTimestamp": created}
    if labels:
        meta["labels"] = _gomap(labels)
    if annotations:
        meta["annotations"] = _gomap(annotations)
    if managed:
        meta["managedFields"] = managed
    return meta


def _network_topology(nt: Mapping[str, Any] | None, rank: int) -> Json | None:
    """scheduling.NetworkTopologySpec, with the CRD defaults (mode hard; v1.13 also highestTierAllowed 1)."""
    if nt is None:
        return None
    extra = set(nt) - {"mode", "highestTierAllowed", "highestTierName"}
    if extra:
        raise ValueError(f"unknown networkTopology keys {sorted(extra)}")
    mode = nt.get("mode") or "hard"
    if rank == 13:
        if "highestTierName" in nt:
            raise ValueError("highestTierName does not exist in Volcano v1.13")
        return {"Mode": mode, "HighestTierAllowed": nt.get("highestTierAllowed", 1)}
    out: Json = {"mode": mode}
    if nt.get("highestTierAllowed") is not None:
        out["highestTierAllowed"] = nt["highestTierAllowed"]
    if nt.get("highestTierName"):
        out["highestTierName"] = nt["highestTierName"]
    return out


def podgroup(
    namespace: str,
    name: str,
    *,
    queue: str,
    min_member: int,
    phase: str = "Inqueue",
    min_resources: Mapping[str, str] | None = None,
    min_task_member: Mapping[str, int] | None = None,
    network_topology: Mapping[str, Any] | None = None,
    priority_class_name: str = "",
    running: int = 0,
    succeeded: int = 0,
    failed: int = 0,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    uid: str | None = None,
    created: str = T0,
    version: VolcanoVersion = DEFAULT_VERSION,
) -> Json:
    """``api.PodGroup`` (the internal scheduling.PodGroup plus ``Version``) as marshalled in ``JobInfo``.

    v1.13: ObjectMeta flattened, PascalCase ``Spec``/``Status``, nothing omitted.  v1.14+:
    ``metadata``/``spec``/``status`` with the v1beta1 camelCase tags and their ``omitempty``.
    ``network_topology`` is given camelCase (``{"mode":…,"highestTierAllowed":…}``) for every version.
    """
    rank = _rank(version)
    uid = uid or stable_uid("podgroup", namespace, name)
    status_fields = {"running": running, "succeeded": succeeded, "failed": failed}
    nt = _network_topology(network_topology, rank)
    conds: list[Json] = []
    if phase == "Running":
        conds.append(
            {
                "type": "Scheduled",
                "status": "True",
                "transitionID": stable_uid("transition", namespace, name),
                "lastTransitionTime": T_RUN,
                "reason": "tasks in gang are ready to be scheduled",
                "message": "",
            }
        )
    spec_v1beta1: Json = {"minMember": min_member, "queue": queue}
    if min_task_member:
        spec_v1beta1["minTaskMember"] = _gomap(min_task_member)
    if min_resources:
        spec_v1beta1["minResources"] = _gomap(min_resources)
    managed = [
        _mf(
            "vc-controller-manager",
            created,
            {"f:spec": _managed_fields(spec_v1beta1)},
            api_version="scheduling.volcano.sh/v1beta1",
        ),
        _mf(
            "vc-scheduler",
            created,
            {"f:status": {".": {}, "f:phase": {}, **({"f:conditions": {}} if conds else {})}},
            subresource="status",
            api_version="scheduling.volcano.sh/v1beta1",
        ),
    ]
    meta = _object_meta(
        name, uid, namespace=namespace, created=created, labels=labels, annotations=annotations, managed=managed
    )
    if rank == 13:
        spec13: Json = {
            "MinMember": min_member,
            "MinTaskMember": _gomap(min_task_member) if min_task_member is not None else None,
            "Queue": queue,
            "PriorityClassName": priority_class_name,
            "MinResources": _gomap(min_resources) if min_resources is not None else None,
            "NetworkTopology": nt,
        }
        conds13 = [
            {
                "Type": c["type"],
                "Status": c["status"],
                "TransitionID": c["transitionID"],
                "LastTransitionTime": c["lastTransitionTime"],
                "Reason": c["reason"],
                "Message": c["message"],
            }
            for c in conds
        ]
        status13: Json = {"Phase": phase, "Conditions": conds13 or None}
        status13 |= {k.capitalize(): v for k, v in status_fields.items()}
        return {**meta, "Spec": spec13, "Status": status13, "Version": "v1beta1"}
    spec: Json = {}
    if min_member:
        spec["minMember"] = min_member
    if min_task_member:
        spec["minTaskMember"] = _gomap(min_task_member)
    if queue:
        spec["queue"] = queue
    if priority_class_name:
        spec["priorityClassName"] = priority_class_name
    if min_resources is not None:
        spec["minResources"] = _gomap(min_resources)
    if nt is not None:
        spec["networkTopology"] = nt
    status: Json = {}
    if phase:
        status["phase"] = phase
    if conds:
        status["conditions"] = [{k: v for k, v in c.items() if v != ""} for c in conds]
    status |= {k: v for k, v in status_fields.items() if v}
    return {"metadata": meta, "spec": spec, "status": status, "Version": "v1beta1"}


def _status_index(tasks: Iterable[Json]) -> Json:
    index: dict[str, dict[str, Json]] = {}
    for t in tasks:
        index.setdefault(str(t["Status"]), {})[t["UID"]] = t
    return _gomap((k, _gomap(v)) for k, v in index.items())


def job_info(
    namespace: str,
    podgroup_name: str,
    *,
    queue: str,
    min_available: int,
    tasks: Iterable[Json] = (),
    priority: int = 0,
    network_topology: Mapping[str, Any] | None = None,
    min_resources: Mapping[str, str] | None = None,
    phase: str = "Inqueue",
    min_task_member: Mapping[str, int] | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    pg_uid: str | None = None,
    allocated_hypernode: str = "",
    schedule_start: str | None = None,
    created: str = T0,
    version: VolcanoVersion = DEFAULT_VERSION,
) -> Json:
    """``api.JobInfo`` as ``JobInfo.Clone`` leaves it in the session.

    ``UID`` is ``"namespace/podgroupName"``, ``PgUID`` the PodGroup's metadata.uid, ``Queue`` the queue name.
    ``Tasks`` and ``TaskStatusIndex`` (``{"<status int>": {uid: task}}``) hold the given tasks (each task's
    ``Job`` must be this UID); v1.14+ repeats them a third time in the default sub-job ``SubJobs[UID]``.
    ``Allocated`` sums tasks in Allocated/Binding/Bound/Running; ``TotalRequest`` sums all.
    ``WaitingTime`` is ``null`` (no ``sla-waiting-time`` annotation); ``ScheduleStartTimestamp`` is ``null``
    at session open and set by the enqueue action (pass ``schedule_start`` for bodies sent after it).
    """
    rank = _rank(version)
    uid = f"{namespace}/{podgroup_name}"
    task_list = list(tasks)
    for t in task_list:
        _check_task(t, version)
        if t["Job"] != uid:
            raise ValueError(f"task {t['Name']!r} has Job {t['Job']!r}, not {uid!r}")
    ann = dict(annotations or {})
    lab = dict(labels or {})
    counts = {s: sum(1 for t in task_list if t["Status"] == s) for s in (RUNNING, SUCCEEDED, FAILED)}
    pg = podgroup(
        namespace,
        podgroup_name,
        queue=queue,
        min_member=min_available,
        phase=phase,
        min_resources=min_resources,
        min_task_member=min_task_member,
        network_topology=network_topology,
        running=counts[RUNNING],
        succeeded=counts[SUCCEEDED],
        failed=counts[FAILED],
        labels=labels,
        annotations=annotations,
        uid=pg_uid,
        created=created,
        version=version,
    )
    pg_meta = pg if rank == 13 else pg["metadata"]
    allocated, total = _Res(), _Res()
    for t in task_list:
        req = _Res.of(t["Resreq"])
        total.add(req)
        if t["Status"] in _ALLOCATED_STATUSES:
            allocated.add(req)
    preemptable = False  # extractPreemptable: annotation, then label, default false
    for source in (ann, lab):
        if PREEMPTABLE_KEY in source:
            preemptable = bool(_parse_bool(source[PREEMPTABLE_KEY]))
            break
    revocable = ""
    if REVOCABLE_ZONE_KEY in ann:
        revocable = "*" if ann[REVOCABLE_ZONE_KEY] == "*" else ""
    elif _parse_bool(ann.get(PREEMPTABLE_KEY, "")):
        revocable = "*"
    if JDB_MIN_AVAILABLE in ann:
        budget = {"MinAvailable": ann[JDB_MIN_AVAILABLE], "MaxUnavailable": ""}
    else:
        budget = {"MinAvailable": "", "MaxUnavailable": ann.get(JDB_MAX_UNAVAILABLE, "")}
    tasks_by_uid = _gomap((t["UID"], t) for t in task_list)

    job: Json = {
        "UID": uid,
        "PgUID": pg_meta["uid"],
        "Name": podgroup_name,
        "Namespace": namespace,
        "Queue": queue,
        "Priority": priority,
        "MinAvailable": min_available,
        "WaitingTime": None,
        "JobFitErrors": "",
        "NodesFitErrors": {},
    }
    if rank >= 14:
        job["AllocatedHyperNode"] = allocated_hypernode
        if rank >= 15:
            job["NetworkTopology"] = _network_topology(network_topology, rank)
        sub_jobs: Json = {}
        if task_list:
            sub: Json = {
                "GID": uid,
                "UID": uid,
                "Job": uid,
                "MinAvailable": min_available,
                "Priority": max([0, *(t["Priority"] for t in task_list)]),
                "MatchIndex": 0,
                "Tasks": tasks_by_uid,
                "TaskStatusIndex": _status_index(task_list),
                "AllocatedHyperNode": allocated_hypernode,
            }
            if rank >= 15:
                sub["NominatedHyperNode"] = ""
                sub["NetworkTopology"] = _network_topology(network_topology, rank)
            sub_jobs[uid] = sub
        job |= {"SubJobs": sub_jobs, "TaskToSubJob": _gomap((t["UID"], uid) for t in task_list), "MinSubJobs": {}}
    job |= {
        "TaskStatusIndex": _status_index(task_list),
        "Tasks": tasks_by_uid,
        "TaskMinAvailable": _gomap(min_task_member or {}),
        "TaskMinAvailableTotal": sum((min_task_member or {}).values()),
        "Allocated": allocated.json(),
        "TotalRequest": total.json(),
        "CreationTimestamp": created,
        "PodGroup": pg,
        "ScheduleStartTimestamp": schedule_start,
        "Preemptable": preemptable,
        "RevocableZone": revocable,
        "Budget": budget,
    }
    return job


# ---------------------------------------------------------------------------------- QueueInfo, namespaces


def queue_info(
    name: str,
    *,
    weight: int = 1,
    annotations: Mapping[str, str] | None = None,
    capability: Mapping[str, str] | None = None,
    reclaimable: bool = True,
    parent: str = "",
    guarantee: Mapping[str, str] | None = None,
    deserved: Mapping[str, str] | None = None,
    state: str = "Open",
    allocated: Mapping[str, str] | None = None,
    version: VolcanoVersion = DEFAULT_VERSION,
) -> Json:
    """``api.QueueInfo``: ``UID`` and ``Name`` are both the queue name, ``Weights``/``Hierarchy`` come from the
    ``volcano.sh/hierarchy-weights``/``volcano.sh/hierarchy`` annotations, ``Queue`` is the internal
    scheduling.Queue (flattened PascalCase on v1.13, ``metadata``/``spec``/``status`` later)."""
    rank = _rank(version)
    ann = dict(annotations or {})
    alloc = _gomap(allocated if allocated is not None else {"cpu": "0", "memory": "0", "pods": "0"})
    guarantee_json: Json = {"resource": _gomap(guarantee)} if guarantee else {}
    meta = _object_meta(
        name,
        stable_uid("queue", name),
        created="2026-01-15T10:00:00Z",
        annotations=ann,
        managed=[
            _mf(
                "kubectl-client-side-apply",
                "2026-01-15T10:00:00Z",
                {"f:spec": {".": {}, "f:weight": {}, "f:reclaimable": {}}},
                api_version="scheduling.volcano.sh/v1beta1",
            ),
            _mf(
                "vc-controller-manager",
                T0,
                {"f:status": {".": {}, "f:allocated": {}, "f:reservation": {}, "f:state": {}}},
                subresource="status",
                api_version="scheduling.volcano.sh/v1beta1",
            ),
        ],
    )
    if rank == 13:
        spec13: Json = {
            "Weight": weight,
            "Capability": _gomap(capability) if capability is not None else None,
            "Reclaimable": reclaimable,
            "ExtendClusters": None,
            "guarantee": guarantee_json,
        }
        if parent:
            spec13["parent"] = parent
        if deserved:
            spec13["deserved"] = _gomap(deserved)
        status13: Json = {"State": state, "Unknown": 0, "Pending": 0, "Running": 0, "Inqueue": 0, "Completed": 0}
        status13 |= {"Reservation": {}, "Allocated": alloc}
        queue_obj: Json = {**meta, "Spec": spec13, "Status": status13}
    else:
        spec: Json = {"weight": weight}
        if capability:
            spec["capability"] = _gomap(capability)
        spec |= {"reclaimable": reclaimable, "guarantee": guarantee_json}
        if parent:
            spec["parent"] = parent
        if deserved:
            spec["deserved"] = _gomap(deserved)
        spec["dequeueStrategy"] = "traverse"
        queue_obj = {"metadata": meta, "spec": spec, "status": {"state": state, "reservation": {}, "allocated": alloc}}
    return {
        "UID": name,
        "Name": name,
        "Weight": weight,
        "Weights": ann.get(HIERARCHY_WEIGHTS_ANNOTATION, ""),
        "Hierarchy": ann.get(HIERARCHY_ANNOTATION, ""),
        "Queue": queue_obj,
    }


def namespace_info(name: str, quotas: Mapping[str, Mapping[str, Mapping[str, str]]] | None = None) -> Json:
    """``api.NamespaceInfo``: ``QuotaStatus`` maps ResourceQuota name → v1.ResourceQuotaStatus
    (``{"hard":{…},"used":{…}}``).  Only namespaces with a ResourceQuota appear in a session."""
    return {
        "Name": name,
        "QuotaStatus": _gomap(
            (q, {k: _gomap(v) for k, v in st.items() if k in ("hard", "used") and v})
            for q, st in (quotas or {}).items()
        ),
    }


# ------------------------------------------------------------------------------------------ request bodies


def predicate_args(task: Json, node: Json) -> Json:
    """POST <predicateVerb>: one call per (task, node)."""
    return {"task": task, "node": node}


def prioritize_args(task: Json, nodes: list[Json]) -> Json:
    """POST <prioritizeVerb>: the nodes that passed every predicate (only called with two or more)."""
    return {"task": task, "nodes": list(nodes)}


def evict_args(evictor: Json, evictees: list[Json]) -> Json:
    """POST <preemptableVerb> or <reclaimableVerb> (ReclaimableRequest is the same type)."""
    return {"evictor": evictor, "evictees": list(evictees)}


def job_args(job: Json) -> Json:
    """POST <jobEnqueueableVerb>, <jobReadyVerb> and (HEAD only) <jobEnqueuedVerb>."""
    return {"job": job}


def queue_args(queue: Json) -> Json:
    """POST <queueOverusedVerb>."""
    return {"queue": queue}


def task_args(task: Json) -> Json:
    """POST <allocateFuncVerb> / <deallocateFuncVerb> (EventHandlerRequest)."""
    return {"task": task}


def session_open_args(
    jobs: Iterable[Json],
    nodes: Iterable[Json],
    queues: Iterable[Json],
    namespaces: Iterable[Json] = (),
) -> Json:
    """POST <onSessionOpenVerb>: OnSessionOpenRequest has no json tags, so the wrapper keys are PascalCase.

    ``Jobs`` keyed by job UID (``"ns/podgroup"``), ``Nodes`` by node name, ``Queues`` by queue UID (= name),
    ``NamespaceInfo`` by namespace (``{}`` without ResourceQuotas), ``RevocableNodes`` = the nodes whose
    ``RevocableZone`` is set (the same objects again), ``NodeList`` always ``null`` (never filled).
    Volcano sends only Ready nodes, and only jobs that have a PodGroup and whose queue exists.
    """
    node_list = list(nodes)
    return {
        "Jobs": _gomap((j["UID"], j) for j in jobs),
        "Nodes": _gomap((n["Name"], n) for n in node_list),
        "Queues": _gomap((q["UID"], q) for q in queues),
        "NamespaceInfo": _gomap((ns["Name"], ns) for ns in namespaces),
        "RevocableNodes": _gomap((n["Name"], n) for n in node_list if n["RevocableZone"]),
        "NodeList": None,
    }


def session_close_args() -> Json:
    """POST <onSessionCloseVerb>: an empty struct."""
    return {}


def to_go_json(body: Any) -> bytes:
    """The exact bytes ``json.Marshal`` writes: compact, UTF-8, ``<``, ``>``, ``&``, U+2028 and U+2029
    escaped.  Dict order is kept (the builders already order keys the way Go does)."""
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text.encode()


def deepcopy(body: Json) -> Json:
    """A private copy (the builders share the Pod dict between a task's job and node copies)."""
    return copy.deepcopy(body)


# ----------------------------------------------------------------------------------------------- facts

FACTS: dict[str, str] = {
    "1_predicate_response": (
        'v1.10.0+ (v1.13, HEAD): argument.go PredicateResponse{ErrorMessage string `json:"status"`; '
        'Code int `json:"code"`} -> {"status":"<reason>","code":<int>}. extender.go: transport error, '
        "non-200 or undecodable body -> pass if extender.ignorable, else FitError with code 1 (Error); empty "
        "status -> the node fits whatever code says; non-empty status with code 0 -> code raised to 1; the result "
        'is api.Status{Code, Reason, Plugin:"extender"}. Codes (pkg/scheduler/api/types.go): 0 Success, 1 '
        "Error, 2 Unschedulable, 3 UnschedulableAndUnresolvable, 4 Wait, 5 Skip. framework/session.go: "
        "PredicateForAllocateAction (allocate, backfill) drops the node for codes 1-5; PredicateForPreemptAction "
        "(preempt, reclaim) drops it for 1, 3, 4, 5 but KEEPS it for 2, so Unschedulable means 'could fit after "
        "evictions'; nodes that got 3 during allocate are also removed from preempt/reclaim "
        "(FilterOutUnschedulableAndUnresolvableNodesForTask). Any other code (6, -1, ...) with a message is "
        "rejected by neither, i.e. the node passes. <=v1.9.x: PredicateResponse{Status []*api.Status "
        '`json:"status"`} -> {"status":[{"Code":int,"Reason":str,"Plugin":str}]} (api.Status has no '
        "tags); changed in v1.10.0."
    ),
    "2_prioritize_response": (
        'argument.go PrioritizeResponse{NodeScore map[string]float64 `json:"nodeScore"`; ErrorMessage string '
        '`json:"errorMessage"`} -> {"nodeScore":{"n1":12.5},"errorMessage":""}. Used only when '
        "errorMessage is empty AND nodeScore is non-null ({} is fine); otherwise an error (possibly with an "
        "empty message). Transport error: no scores if ignorable, else error. session_plugins.go "
        "BatchNodeOrderFn adds the floats unweighted to the other batch plugins; util/scheduler_helper.go "
        "PrioritizeNodes adds map/reduce scores. On an error PrioritizeNodes returns no scores at all, so "
        "allocate picks no node from that candidate list (the task is not placed from idle nodes). allocate.go "
        "calls prioritize only when two or more nodes passed the predicates."
    ),
    "3_preemptable_reclaimable_response": (
        'argument.go PreemptableResponse{Status int `json:"status"`; Victims []*api.TaskInfo '
        '`json:"victims"`}; ReclaimableResponse is the same type -> {"status":1,"victims":[TaskInfo...]}. '
        "session_plugins.go Preemptable/Reclaimable: status 0 = abstain (skipped); ANY other status (1 or -1) "
        "with an empty victims list ends the tier with no victims; any non-zero status with a non-empty list "
        "(even -1) is a vote for those victims. Several voters in a tier are intersected by TaskInfo.UID, keeping "
        "the FIRST voter's objects; the decoded objects are then evicted directly (Statement.Evict: "
        "ssn.Jobs[victim.Job], job.UpdateTaskStatus re-inserts the decoded object, node.UpdateTask uses "
        "PodKey(victim.Pod) and victim.Resreq), so echo the received evictee objects unchanged. Not interested "
        "(managedResources) -> [] + Abstain without a call; transport error -> nil + Permit (ignorable) or "
        "nil + Reject: both mean no victims from this tier."
    ),
    "4_other_response_tags": (
        'argument.go: JobEnqueueableResponse{Status int `json:"status"`} (-1/0/1); QueueOverusedResponse'
        '{Overused bool `json:"overused"`}; JobReadyResponse{Status bool `json:"status"`}; '
        'EventHandlerResponse{ErrorMessage string `json:"errorMessage"`} for allocateFunc AND deallocateFunc; '
        "JobEnqueuedResponse struct{} (HEAD/v1.16 only, decoded but unused, so the body must still be valid JSON, "
        'e.g. {}; errors only logged). Request wrappers: {"job":…}, {"queue":…}, {"task":…}. Semantics: '
        "jobEnqueueable is only called by the enqueue action for Pending jobs whose PodGroup has "
        "spec.minResources (actions/enqueue: `MinResources == nil || ssn.JobEnqueueable(job)`); it is gated by "
        "the tier flag enableJobEnqueued. allocateFunc body: task with Status 2 (Allocated) or 4 (Pipelined), "
        "NodeName = chosen node (for Allocate, Pod.spec.nodeName is already set to it too: Statement.Allocate); "
        "a non-empty errorMessage rolls the allocation back, which sends deallocateFunc for the same task with "
        "Status 1 (Pending) and NodeName still set (Statement.unallocate). deallocateFunc is also sent for "
        "evictions (Status 64 Releasing) and when a statement is discarded (gang not ready; Statement.Discard "
        "first fills LastTransaction with the discarded placement); allocateFunc is re-sent when an eviction is "
        "undone (Status 32). So the server must treat deallocateFunc as 'undo whatever this task holds'."
    ),
    "5_pending_jobs_skipped": (
        "Yes. actions/allocate/allocate.go and actions/reclaim/reclaim.go (also preempt.go) skip jobs with "
        'job.IsPending() (PodGroup nil, phase "" or Pending). allocate has one exception: when the enqueue '
        "action is not configured it switches Pending to Inqueue in the session and allocates. The enqueue "
        "action sets phase Inqueue in the session when it admits a job, so the allocate action of the same "
        "session sees it (v1.13.0 and HEAD)."
    ),
    "6_ids": (
        "QueueInfo.UID = QueueID(queue.Name) (queue_info.go NewQueueInfo), so UID == Name == the queue name, "
        'and JobInfo.Queue is the name. JobInfo.UID = "<namespace>/<podgroupName>" (cache/event_handlers.go '
        "getJobID); TaskInfo.Job is the same string, taken from the pod annotation scheduling.k8s.io/group-name "
        '("" without it); JobInfo.PgUID = PodGroup metadata.uid. TaskInfo.UID = pod metadata.uid; '
        'JobInfo.Tasks/TaskStatusIndex are keyed by task UID but NodeInfo.Tasks by "<namespace>/<podName>" '
        "(api.PodKey). onSessionOpen: Jobs by job UID, Nodes by node name, Queues by queue name."
    ),
    "7_transport": (
        'extender.go send(): POST strings.TrimRight(urlPrefix,"/")+"/"+verb, body json.Marshal(args), only '
        "header set is Content-Type: application/json; Go adds Host, User-Agent: Go-http-client/1.1 (h2 over "
        "TLS), Content-Length and Accept-Encoding: gzip. No auth, no custom TLS config (http.Client{Timeout: "
        "httpTimeout, default 1s} on the default transport, which honours HTTP(S)_PROXY). Only status 200 "
        "counts; response body capped at 10 MiB, decoded with encoding/json (case-insensitive keys, unknown "
        "keys ignored). onSessionOpen/onSessionClose responses are never read."
    ),
    "session_open_contents": (
        "cache.go Snapshot: only Ready nodes (NodeInfo.Ready(), i.e. the node object exists), only jobs with a "
        "PodGroup whose queue exists; NamespaceInfo only for namespaces with a ResourceQuota; RevocableNodes are "
        "the nodes with label volcano.sh/revocable-zone; NodeList is never set (null). If onSessionOpen fails "
        "and ignorable is false the plugin registers none of its other hooks for that session."
    ),
    "defaults_worth_knowing": (
        "TaskInfo.Preemptable defaults to TRUE (pod_info.go GetPodPreemptable) while JobInfo.Preemptable "
        "defaults to false; TaskInfo.Priority is 1 when pod.spec.priority is nil; every Resreq carries "
        "ScalarResources.pods = 1; NodeInfo.State.Phase is 1 (Ready) regardless of the Ready condition "
        "(setNodeState, v1.13 and HEAD); JobInfo.ScheduleStartTimestamp is null at session open (Clone drops "
        "it) and set by the enqueue action."
    ),
}
