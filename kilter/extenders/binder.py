"""How a pod kilter chose a node for is bound: through the API server's ``pods/binding``, or, with no API server
(a snapshot), not at all."""

from __future__ import annotations

from kilter.kube.api import ApiError, ApiServer, check_name, object_path

__all__ = ["ApiBinder", "Binder"]


class Binder:
    """Snapshot mode's binder: there is no API to call; ``SchedulerExtender.bound`` records the binding."""

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        return None


class ApiBinder(Binder):
    """Creates the ``pods/binding`` subresource, as kube-scheduler's DefaultBinder does.

    The path is built by ``object_path`` (names checked and escaped), and the
    Binding carries the pod's uid, which the API server takes as a
    precondition: a pod deleted and made again under the same name is not
    bound in its predecessor's place.
    """

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
            "target": {"apiVersion": "v1", "kind": "Node", "name": check_name(node, what="Node")},
        }
        path = object_path("/api/v1", "pods", name, namespace=namespace)
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
