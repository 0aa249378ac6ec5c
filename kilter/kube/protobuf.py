"""Kubernetes protobuf for the two kinds a cold start is made of: Pods and Nodes.

kube-apiserver serves core/v1 objects as protobuf too (client-go's informers
ask for it), and a pod list there is about half the bytes of its JSON, with
every field length-prefixed so that the many fields kilter never reads are
jumped over. The reflector asks for protobuf when it lists Pods and Nodes and
decodes the pages here into the same views JSON gives (``kilter.model.core_v1``);
custom resources have no protobuf and stay JSON, as do watches (a steady
trickle, where JSON keeps up with room to spare).

The tables map upstream's field numbers (``k8s.io/api/core/v1/generated.proto``
and apimachinery's ``meta/v1``) to the views' slots, in the views' field
order. A field absent from the table is skipped unread.
"""

from __future__ import annotations

from typing import Any

from kilter._native.protoview import (
    BOOL,
    INT,
    MESSAGE,
    QUANTITY_MAP,
    REPEATED,
    SHARED,
    SHARED_STRING,
    STRING,
    STRING_MAP,
    TIME,
    Decoder,
    Message,
    ProtobufError,
)
from kilter.model import core_v1 as v1

__all__ = [
    "ACCEPT",
    "MEDIA_TYPE",
    "Decoder",
    "ListPage",
    "ProtobufError",
    "decode_page",
    "is_protobuf",
    "status_message",
]

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
ACCEPT = f"{MEDIA_TYPE}, application/json"  # what client-go sends: protobuf where served, JSON elsewhere

_EMPTY: dict[str, Any] = {}  # absent maps share one empty dict: views are never mutated


def _tuple(*slots: Any) -> tuple[Any, ...]:
    return slots


_OWNER = Message(
    v1.OwnerReference,
    ("", "", "", "", None),
    {
        5: (0, SHARED_STRING, None, 0),  # apiVersion
        1: (1, SHARED_STRING, None, 0),  # kind
        3: (2, STRING, None, 0),  # name
        4: (3, STRING, None, 0),  # uid
        6: (4, BOOL, None, 0),  # controller (a *bool: absent stays None)
    },
)
_META = Message(
    v1.ObjectMeta,
    ("", "", "", "", None, _EMPTY, _EMPTY, ()),
    {
        1: (0, STRING, None, 0),  # name
        3: (1, SHARED_STRING, None, 0),  # namespace
        5: (2, STRING, None, 0),  # uid
        6: (3, STRING, None, 0),  # resourceVersion
        8: (4, TIME, None, 0),  # creationTimestamp
        11: (5, STRING_MAP, None, 0),  # labels
        12: (6, STRING_MAP, None, SHARED),  # annotations: replicas often carry the same
        13: (7, MESSAGE, _OWNER, REPEATED | SHARED),  # ownerReferences: a job's pods carry the same, one tuple
    },
)

_TAINT = Message(
    v1.Taint,
    ("", "", ""),
    {1: (0, SHARED_STRING, None, 0), 2: (1, SHARED_STRING, None, 0), 3: (2, SHARED_STRING, None, 0)},
    dedup=True,
)
_NODE_CONDITION = Message(
    v1.NodeCondition, ("", ""), {1: (0, SHARED_STRING, None, 0), 2: (1, SHARED_STRING, None, 0)}, dedup=True
)
_NODE = Message(
    v1.Node,
    ("v1", "Node", v1.ObjectMeta(), v1.NodeSpec(), v1.NodeStatus()),
    {
        1: (2, MESSAGE, _META, 0),
        2: (
            3,
            MESSAGE,
            Message(
                v1.NodeSpec,
                (False, ()),
                {4: (0, BOOL, None, 0), 5: (1, MESSAGE, _TAINT, REPEATED)},  # unschedulable, taints
            ),
            0,
        ),
        3: (
            4,
            MESSAGE,
            Message(
                v1.NodeStatus,
                (_EMPTY, _EMPTY, ()),
                {
                    1: (0, QUANTITY_MAP, None, SHARED),  # capacity
                    2: (1, QUANTITY_MAP, None, SHARED),  # allocatable
                    4: (2, MESSAGE, _NODE_CONDITION, REPEATED),  # conditions
                },
            ),
            0,
        ),
    },
)

_RESOURCES = Message(
    v1.ResourceRequirements,
    (_EMPTY, _EMPTY),
    {1: (1, QUANTITY_MAP, None, 0), 2: (0, QUANTITY_MAP, None, 0)},  # limits, requests
)
_CONTAINER = Message(
    v1.Container,
    ("", v1.ResourceRequirements()),
    {1: (0, SHARED_STRING, None, 0), 8: (1, MESSAGE, _RESOURCES, SHARED)},  # name, resources
)
_TOLERATION = Message(
    v1.Toleration,
    ("", "Equal", "", "", None),
    {
        1: (0, SHARED_STRING, None, 0),  # key
        2: (1, SHARED_STRING, None, 0),  # operator
        3: (2, SHARED_STRING, None, 0),  # value
        4: (3, SHARED_STRING, None, 0),  # effect
        5: (4, INT, None, 0),  # tolerationSeconds
    },
)
_REQUIREMENT = Message(
    v1.NodeSelectorRequirement,
    ("", "", ()),
    {1: (0, SHARED_STRING, None, 0), 2: (1, SHARED_STRING, None, 0), 3: (2, SHARED_STRING, None, REPEATED)},
)
_TERM = Message(
    v1.NodeSelectorTerm,
    ((), ()),
    {1: (0, MESSAGE, _REQUIREMENT, REPEATED), 2: (1, MESSAGE, _REQUIREMENT, REPEATED)},
)
_AFFINITY = Message(
    v1.Affinity,
    (None,),
    {
        1: (
            0,
            MESSAGE,
            Message(
                v1.NodeAffinity,
                (None,),
                {1: (0, MESSAGE, Message(v1.NodeSelector, ((),), {1: (0, MESSAGE, _TERM, REPEATED)}), 0)},
            ),
            0,
        )
    },
)
_CLAIM = Message(
    v1.PodResourceClaim,
    ("", None, None),
    {
        1: (0, SHARED_STRING, None, 0),  # name
        3: (1, SHARED_STRING, None, 0),  # resourceClaimName
        4: (2, SHARED_STRING, None, 0),  # resourceClaimTemplateName
    },
    dedup=True,
)
_POD_SPEC = Message(
    v1.PodSpec,
    ("", "", (), (), _EMPTY, None, (), _EMPTY, None, (), None, None),
    {
        10: (0, SHARED_STRING, None, 0),  # nodeName
        19: (1, SHARED_STRING, None, 0),  # schedulerName
        2: (2, MESSAGE, _CONTAINER, REPEATED),  # containers
        20: (3, MESSAGE, _CONTAINER, REPEATED),  # initContainers
        7: (4, STRING_MAP, None, SHARED),  # nodeSelector
        18: (5, MESSAGE, _AFFINITY, SHARED),  # affinity
        22: (6, MESSAGE, _TOLERATION, REPEATED | SHARED),  # tolerations
        32: (7, QUANTITY_MAP, None, SHARED),  # overhead
        5: (8, INT, None, 0),  # activeDeadlineSeconds
        39: (9, MESSAGE, _CLAIM, REPEATED | SHARED),  # resourceClaims: a job's pods name the same templates
        25: (10, INT, None, 0),  # priority (int32; negative values are ten-byte varints)
        31: (11, SHARED_STRING, None, 0),  # preemptionPolicy
    },
)
_POD_STATUS = Message(
    v1.PodStatus,
    ("", None),
    {1: (0, SHARED_STRING, None, 0), 7: (1, TIME, None, 0)},  # phase, startTime
    dedup=True,
)
_POD = Message(
    v1.Pod,
    ("v1", "Pod", v1.ObjectMeta(), v1.PodSpec(), v1.PodStatus()),
    {
        1: (2, MESSAGE, _META, 0),
        2: (3, MESSAGE, _POD_SPEC, 0),
        3: (4, MESSAGE, _POD_STATUS, 0),
    },
)

_LIST_META = Message(_tuple, ("", ""), {2: (0, STRING, None, 0), 3: (1, STRING, None, 0)})  # resourceVersion, continue
_STATUS = Message(_tuple, ("", "", ""), {2: (0, STRING, None, 0), 3: (1, STRING, None, 0), 4: (2, STRING, None, 0)})

_ITEMS: dict[type, tuple[str, Message]] = {v1.Pod: ("PodList", _POD), v1.Node: ("NodeList", _NODE)}


def is_protobuf(content_type: str) -> bool:
    """Whether an answer's Content-Type is Kubernetes protobuf (parameters aside)."""
    return content_type.split(";", 1)[0].strip().lower() == MEDIA_TYPE


class ListPage:
    """One page of a list, decoded: its items, where the list continues, and what could not be read."""

    __slots__ = ("continue_", "items", "resource_version", "skipped")

    def __init__(self, items: list[Any], resource_version: str, continue_: str, skipped: list[str]) -> None:
        self.items = items
        self.resource_version = resource_version
        self.continue_ = continue_
        self.skipped = skipped


def decode_page(decoder: Decoder, item: type, data: bytes) -> ListPage:
    """A protobuf list page of ``item`` (``v1.Pod`` or ``v1.Node``) views.

    One ``decoder`` serves every page of one list, so equal parts are shared
    across the whole list; a new list takes a new decoder and the old one's
    tables go with it. An item that cannot be read is left out and named in
    ``skipped``.
    """
    kind, message = _ITEMS[item]
    _, got, raw = decoder.unwrap(data)
    if got != kind:
        raise ProtobufError(f"expected a {kind}, the server sent a {got or 'message without a kind'}")
    skipped: list[str] = []

    def on_error(index: int, why: str) -> None:
        skipped.append(f"item {index}: {why}")

    (resource_version, continue_), items = decoder.decode_list(_LIST_META, message, raw, on_error)
    return ListPage(items, resource_version, continue_, skipped)


def status_message(data: bytes) -> str | None:
    """The message of a protobuf ``Status`` (how kube-apiserver refuses a protobuf request), or None."""
    decoder = Decoder()
    try:
        _, kind, raw = decoder.unwrap(data)
        if kind != "Status":
            return None
        status, message, reason = decoder.decode(_STATUS, raw)
    except ProtobufError:
        return None
    return str(message or reason or status) or None
