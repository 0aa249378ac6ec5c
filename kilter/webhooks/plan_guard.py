"""``kilter.dev/plan`` is written by kilter only: the validating webhook's rule for Pods, PodGroups and Workloads.

A plan record reserves GPUs and pins a gang's pods to nodes (``kilter.gangs.
records``); the extender adopts the newest one it finds on a gang's Workload,
PodGroup or pods. A record anyone could write would let a tenant steer
placement or hold nodes. So on CREATE, and on UPDATE when the value changes
(removal included), the annotation is refused unless:

* the request comes from one of kilter's users (``--kilter-user``: the
  plan recorder and the AdmissionCheck controller write as kilter), or
* it puts on a Pod exactly the record kilter put in the podSetUpdates of
  its gang's Workload (``NS/workload/NAME``, same namespace): Kueue copies
  those annotations into a job's pod template, so the job's own controller
  creates the pods carrying it, and writes them onto the pods of a plain
  pod group when it ungates them (an UPDATE by Kueue), or
* kilter's state is too old to tell: a Pod created with, or first given, a
  signed record (``sig``) of a Workload of its own namespace that the state
  does not show, or shows without that record. With ``--snapshot`` the
  state is minutes old; refusing would hold Kueue's job pods back (the
  webhook fails closed) until the next snapshot shows the Workload's new
  podSetUpdates. Such a record steers nothing even if forged: the gang book
  adopts a pod's record only if a plan key verifies it for that Workload's
  UID (``records.newest``), and a tenant has no key.

Still refused: a record naming another namespace or another kind of gang;
an unsigned record, or one replacing another on a Pod, that the state does
not show issued; any record on a PodGroup or Workload by anyone but kilter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kilter.gangs import records
from kilter.gangs.identity import GangKey
from kilter.model.annotations import PLAN
from kilter.model.errors import InputError
from kilter.state.store import ClusterStore
from kilter.webhooks.admission import AdmissionRequest

__all__ = ["GUARDED_KINDS", "forged_plan"]

GUARDED_KINDS = frozenset({("", "Pod"), (records.KUEUE, "Workload"), (records.VOLCANO, "PodGroup")})
"""(API group, kind) of the objects a plan record is read from."""


def _plan(obj: Any) -> str | None:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    value = notes.get(PLAN) if isinstance(notes, Mapping) else None
    return None if value is None else str(value)


def forged_plan(request: AdmissionRequest, store: ClusterStore, *, kilter_users: tuple[str, ...]) -> str:
    """Why the request may not carry its ``kilter.dev/plan`` ("" when it may, or does not touch it)."""
    if (request.kind.group, request.kind.kind) not in GUARDED_KINDS:
        return ""
    value = _plan(request.object)
    if value == _plan(request.old_object) or request.user_info.username in kilter_users:
        return ""
    if value is not None and request.kind.kind == "Pod":
        namespace = request.namespace or _namespace(request.object)
        if _workload_record(store, namespace, value, added=_plan(request.old_object) is None):
            return ""
    return (
        f"annotation {PLAN} is written by kilter only; remove it from your change "
        f"(user {request.user_info.username or '?'} is not kilter)"
    )


def _namespace(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    value = meta.get("namespace") if isinstance(meta, Mapping) else None
    return value if isinstance(value, str) else ""


def _workload_record(store: ClusterStore, namespace: str, value: str, *, added: bool) -> bool:
    """``value`` is a record of a Workload in ``namespace``, and either the state shows it in that Workload's
    podSetUpdates, or it is signed and ``added`` (the Pod carried none before) while the state does not show it
    there: a stale state, whose Workload may have been admitted since (the module docstring says why that is
    safe)."""
    record = records.decode(value, where=f"a pod created in namespace {namespace or '?'}")
    if record is None:
        return False
    try:
        key = GangKey.parse(record.gang)
    except InputError:
        return False
    if key.kind != "workload" or key.namespace != namespace:
        return False
    return _issued_for_workload(store, namespace, key.name, value) or (added and bool(record.sig))


def _issued_for_workload(store: ClusterStore, namespace: str, name: str, value: str) -> bool:
    """``value`` is, byte for byte, a record in the podSetUpdates of Workload ``namespace``/``name``."""
    workload = store.get(records.KUEUE, "Workload", namespace, name)
    status = workload.get("status") if workload is not None else None
    checks = status.get("admissionChecks") if isinstance(status, Mapping) else None
    for check in checks if isinstance(checks, list) else []:
        updates = check.get("podSetUpdates") if isinstance(check, Mapping) else None
        for update in updates if isinstance(updates, list) else []:
            notes = update.get("annotations") if isinstance(update, Mapping) else None
            if isinstance(notes, Mapping) and notes.get(PLAN) == value:
                return True
    return False
