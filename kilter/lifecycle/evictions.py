"""Moving the pods off a node: which pods a drain moves, whose job each is, and evicting them within the rules.

What ``kubectl drain`` moves, a drain moves: every pod bound to the node
that has not finished, but for DaemonSet and mirror pods. Each goes through
the Eviction API (``kube.evict``), so PodDisruptionBudgets hold: a 429 (or
a server failing for a moment) is tried again every round, for at most the
eviction timeout; any other refusal is final. A pod already terminating is
given its grace period (its ``deletionTimestamp`` is when that ends) and
the timeout after it, then reported: its node may be down.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from kilter.gangs.identity import key_of
from kilter.kube.api import ApiServer
from kilter.kube.evict import evict_status
from kilter.lifecycle.works import MIRROR
from kilter.model.codec import convert
from kilter.model.core_v1 import Pod
from kilter.quota.policy import parse_time
from kilter.topology import pod_gpus

__all__ = ["Evictions", "Refused", "job_of", "pods_to_move", "transient"]


def transient(code: int) -> bool:
    """An answer worth trying again: the server not reached, asking to retry (a budget's 429), a conflict, or
    failing itself (5xx, as while it restarts)."""
    return code in (0, 409, 429) or code >= 500


class Refused(Exception):
    """A pod the drain cannot move: why, and the node it is on."""

    def __init__(self, reason: str, node: str | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.node = node


def pods_to_move(api: ApiServer, node: str) -> list[dict[str, Any]]:
    """The pods a drain moves off ``node``: not finished, not a DaemonSet's, not mirror pods."""
    listing = api.call("GET", f"/api/v1/pods?fieldSelector={quote('spec.nodeName=' + node)}")
    out = []
    for pod in (listing or {}).get("items") or []:
        meta = pod.get("metadata") or {}
        owners = meta.get("ownerReferences") or []
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if any(o.get("kind") == "DaemonSet" and o.get("controller") for o in owners):
            continue
        if MIRROR in (meta.get("annotations") or {}):
            continue
        out.append(pod)
    return out


def job_of(raw: dict[str, Any], devices: Collection[str]) -> str | None:
    """The job a GPU pod belongs to, named as a plan names it; None for a pod that holds no GPU."""
    pod = convert(raw, Pod, path="pod")
    if not pod_gpus.holds_gpus(pod.spec, devices):  # a count that does not read is a job: the drain stops for it
        return None
    gang = key_of(pod)
    return gang.format() if gang is not None else f"{pod.metadata.namespace}/pod/{pod.metadata.name}"


@dataclass
class Evictions:
    """Evictions over ``api``, each refused one remembered since its first refusal."""

    api: ApiServer
    timeout_s: float
    refused_since: dict[str, float] = field(default_factory=dict)  # pod uid -> first refused eviction

    def terminating(self, pod: dict[str, Any], now: float) -> bool:
        """Whether ``pod`` is on its way out (waited for); ``Refused`` once it overstays its grace and the
        timeout."""
        meta = pod.get("metadata") or {}
        deadline = meta.get("deletionTimestamp")
        if not deadline:
            return False
        ns, name = meta.get("namespace") or "", meta.get("name") or ""
        if now >= parse_time(deadline, path=f"pod {ns}/{name}.deletionTimestamp") + self.timeout_s:
            raise Refused(
                f"pod {ns}/{name} is still terminating {self.timeout_s:g}s past the end of its grace period "
                f"({deadline}): its node may be down",
                (pod.get("spec") or {}).get("nodeName"),
            )
        return True

    def evict(self, pod: dict[str, Any], now: float) -> str:
        """Evict ``pod``: "" when taken (or gone), else the answer to try again; ``Refused`` when final."""
        meta = pod.get("metadata") or {}
        ns, name, uid = meta.get("namespace") or "", meta.get("name") or "", meta.get("uid") or ""
        node = (pod.get("spec") or {}).get("nodeName")
        code, answer = evict_status(self.api, ns, name, uid)
        if code in (201, 404):
            self.refused_since.pop(uid, None)
            return ""
        if not transient(code):
            raise Refused(f"pod {ns}/{name} cannot be evicted: {answer}", node)
        since = self.refused_since.setdefault(uid, now)
        if now - since >= self.timeout_s:
            raise Refused(
                f"pod {ns}/{name} could not be evicted within the eviction timeout ({self.timeout_s:g}s): {answer}",
                node,
            )
        return answer
