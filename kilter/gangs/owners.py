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

* **the gang's object is in the state and has owners**: the Workload of a
  ``workload`` gang, the group Workload Kueue makes for a ``pod-group`` gang
  (named after the group, ``kueue.x-k8s.io/is-group-workload``), the PodGroup
  of a ``podgroup`` gang. The pod must be one of the object's owners itself
  (Kueue's plain pods and pod groups, Volcano's PodGroup of a lone pod), or be
  controlled by one of them (a Job, a vcjob, a PyTorchJob, the ReplicaSet of
  pods Volcano grouped), or by a batch Job named after one that is no Job
  itself (``OWNER`` or ``OWNER-…``: a JobSet's Jobs, an MPIJob's launcher;
  the state holds no Jobs to follow the chain further, so here a tenant who
  may create Jobs in the namespace could name one so);
* **a ``kilter.dev/gang`` gang** is one controller's pods: the controller of
  its oldest pod in the state that has one (creation time, then name). Under
  another controller, or under none while that one exists, a pod is a
  stranger. A gang of bare pods (none has a controller) is not checked;
* otherwise nothing is checked: LeaderWorkerSet groups, JobSet and Kubeflow
  labels, and objects the state does not hold or that have no owners. Their
  pods span controllers (a leader's StatefulSet and its group's, a JobSet's
  Jobs, a launcher Job and its workers) through objects kilter does not watch.

Cost per ask: a dict lookup and the object's few owners; a ``kilter.dev/gang``
gang reads its members through the store's pod index (the gang's pods, not all).
"""

from __future__ import annotations

from collections.abc import Mapping

from kilter.gangs.identity import GangKey, in_gang
from kilter.model.core_v1 import OwnerReference, Pod
from kilter.model.errors import InputError
from kilter.state.store import ClusterStore

__all__ = ["GROUP_WORKLOAD", "object_owners", "stranger"]

KUEUE = "kueue.x-k8s.io"
VOLCANO = "scheduling.volcano.sh"
GROUP_WORKLOAD = "kueue.x-k8s.io/is-group-workload"
_JOB = ("batch/v1", "Job")
_LAST = "\uffff"  # sorts a pod without a creation time after every timestamp


def stranger(store: ClusterStore, gang_key: str, pod: Pod) -> str:
    """Why the state's ``pod`` is not under the owner of gang ``gang_key`` ("" if it is, or nothing is checked)."""
    try:
        key = GangKey.parse(gang_key)
    except InputError:
        return ""  # no object or label of the state names such a key
    owners = object_owners(store, key)
    if owners:
        return _under_owners(pod, owners, key)
    if key.kind == "gang":
        return _under_gang_controller(store, key, pod)
    return ""


def object_owners(store: ClusterStore, key: GangKey) -> tuple[OwnerReference, ...]:
    """The owners of the object the state holds for the gang (none: no such object, or one without owners)."""
    if key.kind == "workload":
        obj = store.get(KUEUE, "Workload", key.namespace, key.name)
    elif key.kind == "pod-group":
        obj = store.get(KUEUE, "Workload", key.namespace, key.name)
        notes = _meta(obj).get("annotations")
        if not isinstance(notes, Mapping) or notes.get(GROUP_WORKLOAD) != "true":
            return ()
    elif key.kind == "podgroup":
        obj = store.get(VOLCANO, "PodGroup", key.namespace, key.name)
    else:
        return ()
    refs = _meta(obj).get("ownerReferences")
    if not isinstance(refs, list):
        return ()
    return tuple(_owner(r) for r in refs if isinstance(r, Mapping) and isinstance(r.get("uid"), str) and r["uid"])


def _under_owners(pod: Pod, owners: tuple[OwnerReference, ...], key: GangKey) -> str:
    meta = pod.metadata
    uids = {o.uid for o in owners}
    ctrl = meta.controller
    if meta.uid in uids or (ctrl is not None and (ctrl.uid in uids or _job_of(ctrl, owners))):
        return ""
    what = "Workload" if key.kind in ("workload", "pod-group") else "PodGroup"
    named = ", ".join(f"{o.kind} {o.name}" for o in owners[:3]) + (", ..." if len(owners) > 3 else "")
    return f"is {_controlled(ctrl)}, not by an owner of {what} {key.namespace}/{key.name} ({named})"


def _job_of(ctrl: OwnerReference, owners: tuple[OwnerReference, ...]) -> bool:
    """``ctrl`` is a batch Job named as one of ``owners`` that is no Job itself names its Jobs (``OWNER`` or
    ``OWNER-…``); a Job owner controls its pods itself, so only its uid will do."""
    if (ctrl.api_version, ctrl.kind) != _JOB:
        return False
    makers = [o.name for o in owners if o.name and (o.api_version, o.kind) != _JOB]
    return any(ctrl.name == name or ctrl.name.startswith(name + "-") for name in makers)


def _under_gang_controller(store: ClusterStore, key: GangKey, pod: Pod) -> str:
    controlled = [
        (p.metadata.creation_timestamp or _LAST, p.metadata.name, ctrl)
        for p in in_gang(key).members(store)
        if (ctrl := p.metadata.controller) is not None
    ]
    if not controlled:
        return ""
    theirs = min(controlled, key=lambda t: t[:2])[2]
    ctrl = pod.metadata.controller
    if ctrl is not None and ctrl.uid == theirs.uid:
        return ""
    return f"is {_controlled(ctrl)}, not by {theirs.kind} {theirs.name}, the controller of gang {key}'s pods"


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
