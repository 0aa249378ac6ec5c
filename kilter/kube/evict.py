"""The Eviction API: kilter asks the API server to evict a pod, as ``kubectl drain`` does.

An eviction (``POST pods/NAME/eviction``, a ``policy/v1`` Eviction) is a
deletion the API server allows only within the pod's PodDisruptionBudget: it
answers 429 while the budget allows no disruption, and deletes the pod
otherwise. The pod's UID is a precondition, so a pod deleted and made again
under the same name is not evicted in its predecessor's place.
"""

from __future__ import annotations

from kilter.kube.api import ApiError, ApiServer, object_path

__all__ = ["GONE", "evict", "evict_status"]

GONE = "gone"
"""``evict``'s answer for a pod that no longer exists (404): nothing was evicted."""


def evict(api: ApiServer, namespace: str, name: str, uid: str) -> str:
    """Evict the pod; "" when the API server took the eviction, ``GONE`` when the pod is gone already, else why
    not: its answer, one line (a disruption budget's 429, a UID that changed, no permission ...)."""
    code, answer = evict_status(api, namespace, name, uid)
    return "" if code == 201 else GONE if code == 404 else answer


def evict_status(api: ApiServer, namespace: str, name: str, uid: str) -> tuple[int, str]:
    """``evict`` with the API server's status code: 201 taken, 404 gone, 429 a budget (or the server) asks to
    retry later, 0 the server not reached, any other a refusal that retrying will not change."""
    body: dict[str, object] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    if uid:
        body["deleteOptions"] = {"preconditions": {"uid": uid}}
    path = object_path("/api/v1", "pods", name, namespace=namespace)
    try:
        api.call("POST", f"{path}/eviction", body)
    except ApiError as exc:
        return exc.code, str(exc)
    return 201, ""
