"""kube-scheduler extender v1 wire types (``k8s.io/kube-scheduler/extender/v1``).

The Go types carry no json tags, so every key is the PascalCase field name
and nothing is omitted: the scheduler sends ``null`` for what is unset, and
reads what we send case-insensitively. Pods and Nodes inside keep their own
camelCase tags. ``NodeNames`` and the ``Nodes`` items stay raw JSON on the
way in: names are resolved straight from the bytes, and Node objects are
passed back verbatim instead of being re-encoded.
"""

from __future__ import annotations

import msgspec

from kilter.model.core_v1 import ObjectMeta, Pod

__all__ = [
    "BindingArgs",
    "BindingResult",
    "ExtenderArgs",
    "FilterResult",
    "HostPriority",
    "MetaPod",
    "MetaVictims",
    "NodeName",
    "PreemptionArgs",
    "PreemptionResult",
    "RawNodeList",
    "Victims",
]


class RawNodeList(msgspec.Struct):
    """A ``v1.NodeList`` whose items are kept as raw JSON objects."""

    items: list[msgspec.Raw] | None = None


class NodeName(msgspec.Struct):
    """Just enough of a Node to know which one it is."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class ExtenderArgs(msgspec.Struct, rename={"pod": "Pod", "nodes": "Nodes", "node_names": "NodeNames"}):
    pod: Pod | None = None
    nodes: RawNodeList | None = None
    node_names: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))


class FilterResult(
    msgspec.Struct,
    rename={
        "nodes": "Nodes",
        "node_names": "NodeNames",
        "failed_nodes": "FailedNodes",
        "failed_and_unresolvable_nodes": "FailedAndUnresolvableNodes",
        "error": "Error",
    },
):
    nodes: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    node_names: list[str] | None = None
    failed_nodes: dict[str, str] | None = None
    failed_and_unresolvable_nodes: dict[str, str] | None = None
    error: str = ""


class HostPriority(msgspec.Struct, rename={"host": "Host", "score": "Score"}):
    host: str
    score: int


class BindingArgs(
    msgspec.Struct,
    rename={"pod_name": "PodName", "pod_namespace": "PodNamespace", "pod_uid": "PodUID", "node": "Node"},
):
    pod_name: str = ""
    pod_namespace: str = ""
    pod_uid: str = ""
    node: str = ""


class BindingResult(msgspec.Struct, rename={"error": "Error"}):
    error: str = ""


class MetaPod(msgspec.Struct, rename={"uid": "UID"}):
    uid: str = ""


class MetaVictims(msgspec.Struct, rename={"pods": "Pods", "num_pdb_violations": "NumPDBViolations"}):
    pods: list[MetaPod] | None = None
    num_pdb_violations: int = 0


class Victims(msgspec.Struct, rename={"pods": "Pods", "num_pdb_violations": "NumPDBViolations"}):
    pods: list[Pod] | None = None
    num_pdb_violations: int = 0


class PreemptionArgs(
    msgspec.Struct,
    rename={
        "pod": "Pod",
        "node_name_to_victims": "NodeNameToVictims",
        "node_name_to_meta_victims": "NodeNameToMetaVictims",
    },
):
    pod: Pod | None = None
    node_name_to_victims: dict[str, Victims] | None = None
    node_name_to_meta_victims: dict[str, MetaVictims] | None = None


class PreemptionResult(msgspec.Struct, rename={"node_name_to_meta_victims": "NodeNameToMetaVictims"}):
    node_name_to_meta_victims: dict[str, MetaVictims] | None = None
