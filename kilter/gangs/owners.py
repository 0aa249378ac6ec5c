"""Whose pods a gang's pods are: the owner a member must be controlled by (issue #17).

A gang's labels and annotations are written by whoever creates the pod, so a
tenant's own pod in the namespace can carry another gang's. Who controls a pod
(``metadata.ownerReferences``, ``controller: true``) is written by its creator
too, but a pod that names a job as its controller *is* that job's pod for
Kubernetes: the job's controller counts it, adopts it and deletes it when
surplus, and the garbage collector deletes a pod whose owner uid no object has.
So a member must be under the gang's owner, checked on the state's copy of the
pod (a request body cannot change it), per gang kind, the first rule that
applies:

* **the gang's object is in the state and has owners** (the Workload of a
  ``workload`` gang, the group Workload Kueue makes for a ``pod-group`` gang —
  named after the group, ``kueue.x-k8s.io/is-group-workload`` — the PodGroup
  of a ``podgroup`` gang): the pod must be one of the object's owners itself
  (Kueue's plain pods and pod groups, Volcano's PodGroup of a lone pod), or be
  controlled by one of them (a Job, a vcjob, a PyTorchJob), or by an object of
  another kind named after one (``OWNER`` or ``OWNER-…``: a JobSet's Jobs, an
  MPIJob's launcher, a RayJob's RayCluster). The state holds no Jobs or
  RayClusters to follow the chain further, so a tenant who may create Jobs in
  the namespace could name one so; a gang whose pods sit under objects named
  otherwise (an AppWrapper's components) finds no member, and its pods are
  placed one by one, without a gang plan, rather than wrongly;
* otherwise nothing is checked: ``kilter.dev/gang`` gangs, LeaderWorkerSet
  groups, JobSet and Kubeflow labels, and objects the state does not hold or
  that have no owners. Their pods may span controllers (an MPI launcher Job and
  its workers under one gang label, a leader's StatefulSet and its group's)
  through objects kilter does not watch, and turning a real member away would
  leave its slot held for the gang timeout.

Cost per ask: a dict lookup and one pass over the object's owners, without
building a value per owner (a Kueue pod group's Workload has one owner per pod).
"""

from __future__ import annotations

from collections.abc import Mapping

from kilter.gangs.identity import GangKey
from kilter.model.core_v1 import OwnerReference, Pod
from kilter.model.errors import InputError
from kilter.state.store import ClusterStore

__all__ = ["GROUP_WORKLOAD", "object_owners", "stranger"]

KUEUE = "kueue.x-k8s.io"
VOLCANO = "scheduling.volcano.sh"
GROUP_WORKLOAD = "kueue.x-k8s.io/is-group-workload"


def stranger(store: ClusterStore, gang_key: str, pod: Pod) -> str:
    """Why the state's ``pod`` is not under the owner of gang ``gang_key`` ("" if it is, or nothing is checked)."""
    try:
        key = GangKey.parse(gang_key)
    except InputError:
        return ""  # no object or label of the state names such a key
    refs = _owner_refs(store, key)
    if not refs:
        return ""
    meta, ctrl = pod.metadata, pod.metadata.controller
    mine = {meta.uid, ctrl.uid} if ctrl is not None else {meta.uid}
    if any(r.get("uid") in mine for r in refs) or (ctrl is not None and _named_after(ctrl, refs)):
        return ""
    owners = object_owners(store, key)
    what = "Workload" if key.kind in ("workload", "pod-group") else "PodGroup"
    named = ", ".join(f"{o.kind} {o.name}" for o in owners[:3]) + (", ..." if len(owners) > 3 else "")
    return f"is {_controlled(ctrl)}, not by an owner of {what} {key.namespace}/{key.name} ({named})"


def object_owners(store: ClusterStore, key: GangKey) -> tuple[OwnerReference, ...]:
    """The owners of the object the state holds for the gang (none: no such object, or one without owners)."""
    return tuple(_owner(r) for r in _owner_refs(store, key))


def _owner_refs(store: ClusterStore, key: GangKey) -> list[Mapping[str, object]]:
    """The object's ``ownerReferences`` as the state holds them, those with a uid; [] when it has none."""
    if key.kind == "workload":
        obj = store.get(KUEUE, "Workload", key.namespace, key.name)
    elif key.kind == "pod-group":
        obj = store.get(KUEUE, "Workload", key.namespace, key.name)
        notes = _meta(obj).get("annotations")
        if not isinstance(notes, Mapping) or notes.get(GROUP_WORKLOAD) != "true":
            return []
    elif key.kind == "podgroup":
        obj = store.get(VOLCANO, "PodGroup", key.namespace, key.name)
    else:
        return []
    refs = _meta(obj).get("ownerReferences")
    if not isinstance(refs, list):
        return []
    return [r for r in refs if isinstance(r, Mapping) and isinstance(r.get("uid"), str) and r["uid"]]


def _named_after(ctrl: OwnerReference, refs: list[Mapping[str, object]]) -> bool:
    """``ctrl`` is named after an owner of another kind (``OWNER`` or ``OWNER-…``): the children a JobSet, an
    MPIJob or a RayJob makes. An owner of the controller's own kind controls its pods itself: only its uid will do."""
    kind = (ctrl.api_version, ctrl.kind)
    for ref in refs:
        name = ref.get("name")
        if (ref.get("apiVersion"), ref.get("kind")) == kind or not isinstance(name, str) or not name:
            continue
        if ctrl.name == name or ctrl.name.startswith(name + "-"):
            return True
    return False


def _controlled(ctrl: OwnerReference | None) -> str:
    return "controlled by no owner" if ctrl is None else f"controlled by {ctrl.kind} {ctrl.name} (uid {ctrl.uid})"


def _meta(obj: Mapping[str, object] | None) -> Mapping[str, object]:
    meta = obj.get("metadata") if obj is not None else None
    return meta if isinstance(meta, Mapping) else {}


def _owner(ref: Mapping[str, object]) -> OwnerReference:
    def text(name: str) -> str:
        value = ref.get(name)
        return value if isinstance(value, str) else ""

    controller = ref.get("controller")
    is_controller = controller if isinstance(controller, bool) else None
    return OwnerReference(text("apiVersion"), text("kind"), text("name"), text("uid"), is_controller)
