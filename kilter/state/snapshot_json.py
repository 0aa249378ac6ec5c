"""Read a JSON snapshot (``kubectl get ... -o json``) straight into typed Nodes and Pods.

A 5,000-node, 150,000-pod cluster prints as ~1.4 GB of JSON. Parsing that
into Python dicts and converting the dicts (the YAML path) takes minutes;
msgspec decoding the bytes straight into the view Structs, skipping every
field kilter does not read, takes seconds. Semantics are the YAML path's
(``snapshot.group_objects``): ``*List`` objects are flattened, objects are
kept by (API group, kind), unknown kinds are counted, and the same inputs
fail with the same ``InputError``.

Two passes, the second only for unusual files:

* **One pass** (every file kubectl writes for the kinds kilter reads): the
  List is decoded as a tagged union on ``kind`` — Nodes and Pods into their
  views, the other known kinds into their top-level fields (``metadata``,
  ``spec``, ``status``, a PriorityClass's ``value`` ...; the fields their
  upstream Go types have) as plain JSON values.
* **Item by item**, when the first pass meets anything else (an unknown kind,
  a nested List, a field of the wrong type, an item that is no object): the
  items are cut out as ``msgspec.Raw`` and each is looked at on its own, so
  that an error names its place exactly as the YAML path does, and a Node or
  Pod that does not type can be handed on as a dict (``strict=False``: the
  live store then leaves it out with a warning, as it does for a YAML file).

Malformed JSON raises ``msgspec.DecodeError`` to the caller, which decides
whether the text was YAML after all.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any, NamedTuple

import msgspec

from kilter.model import codec
from kilter.model.core_v1 import Node, NodeSpec, NodeStatus, ObjectMeta, Pod, PodSpec, PodStatus
from kilter.model.errors import InputError
from kilter.state.snapshot import RawObjects, unknown_name

__all__ = ["Decoded", "decode", "looks_like_json"]

_UNSET: Any = msgspec.UNSET
# Top-level fields of the other kinds kilter keeps, by kind, beyond apiVersion/metadata/spec/status (upstream Go types)
_EXTRA = {
    "WorkloadPriorityClass": ("value", "description"),
    "PriorityClass": ("value", "globalDefault", "description", "preemptionPolicy"),
}
_TOP = ("metadata", "spec", "status")


class Decoded(NamedTuple):
    """A snapshot's objects: Nodes and Pods typed, the other known kinds as received, unknown kinds counted."""

    typed: list[Node | Pod]
    raw: RawObjects


class _Fallback(Exception):
    """The one-pass decode met something it does not handle: read the file item by item."""


class _NodeItem(msgspec.Struct, tag_field="kind", tag="Node", rename="camel", gc=False):
    api_version: str | None = None
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class _PodItem(msgspec.Struct, tag_field="kind", tag="Pod", rename="camel", gc=False):
    api_version: str | None = None
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


_NO_ITEMS = msgspec.Raw(b"")


class _Head(msgspec.Struct, rename="camel"):
    """What decides how an item is read: its kind and apiVersion, and ``items`` if it is a List."""

    api_version: Any = _UNSET
    kind: Any = _UNSET
    items: msgspec.Raw = _NO_ITEMS


def looks_like_json(data: Any) -> bool:
    """``data`` (bytes or a buffer) starts, after blanks, with ``{`` or ``[``: JSON, or YAML in flow style (which
    only parsing tells apart)."""
    return _first(data) in (b"{", b"[")


def _first(data: Any) -> bytes:
    return bytes(memoryview(data)[:4096]).lstrip()[:1]


def decode(
    data: Any,
    known: frozenset[tuple[str, str]],
    *,
    strict: bool = True,
    skip: frozenset[tuple[str, str]] = frozenset(),
) -> Decoded:
    """The objects of a JSON snapshot in ``data`` (bytes or a buffer such as an mmap).

    ``strict``: a Node or Pod that does not type is an ``InputError``, as when
    a ``ClusterState`` is built; otherwise it is kept as a dict among the raw
    objects (the live store's way: leave it out, say why, go on).
    ``skip``: known kinds the caller does not read, passed over unread and
    unchecked (a view of the quota objects alone need not build 150,000 Pod
    views), neither kept nor counted as unknown.
    Raises ``msgspec.DecodeError`` for text that is not JSON.
    """
    try:
        return _one_pass(data, known, skip)
    except _Fallback:
        pass
    raw = RawObjects()
    typed: list[Node | Pod] = []
    try:
        for item, path in _items(msgspec.Raw(data) if not isinstance(data, msgspec.Raw) else data, "$[0]"):
            _keep(item, path, known - skip, skip=skip, strict=strict, typed=typed, raw=raw)
    except RecursionError:
        raise InputError(codec.TOO_DEEP) from None
    return Decoded(typed, raw)


# ---------------------------------------------------------------------------------------------- one pass


@functools.cache
def _decoders(
    known: frozenset[tuple[str, str]], skip: frozenset[tuple[str, str]]
) -> tuple[msgspec.json.Decoder[Any], msgspec.json.Decoder[Any]]:
    """Decoders of a List and of a bare array of the known kinds (a tagged union on ``kind``), built once per set.

    A skipped kind's member reads only ``apiVersion``: msgspec passes over the rest without building anything.
    """
    skipped = {kind for _, kind in skip}
    union: list[Any] = [_NodeItem, _PodItem]
    union = [m for m in union if m.__struct_config__.tag not in skipped]
    for kind in sorted({kind for _, kind in known} - {"Node", "Pod"} | skipped):
        names = () if kind in skipped else (*_TOP, *_EXTRA.get(kind, ()))
        fields = [("api_version", Any, _UNSET)] + [(name, Any, _UNSET) for name in names]
        name = f"_{kind}{'Skipped' if kind in skipped else 'Item'}"
        union.append(
            msgspec.defstruct(name, fields, tag_field="kind", tag=kind, rename={"api_version": "apiVersion"}, gc=False)
        )
    item = functools.reduce(lambda a, b: a | b, union)
    listed = msgspec.defstruct("_List", [("kind", str, ""), ("items", list[item] | None, None)])  # type: ignore[valid-type]
    return msgspec.json.Decoder(listed), msgspec.json.Decoder(list[item])  # type: ignore[valid-type]


def _one_pass(data: Any, known: frozenset[tuple[str, str]], skip: frozenset[tuple[str, str]]) -> Decoded:
    as_list, as_array = _decoders(known, skip)
    try:
        if _first(data) == b"[":
            items = as_array.decode(data)
        else:
            top = as_list.decode(data)
            if not top.kind.endswith("List") or top.items is None:
                raise _Fallback
            items = top.items
    except (msgspec.ValidationError, RecursionError):
        raise _Fallback from None
    except msgspec.DecodeError:
        raise
    raw = RawObjects()
    typed: list[Node | Pod] = []
    for obj in items:
        api_version = obj.api_version
        if not isinstance(api_version, str):
            raise _Fallback
        group = api_version.rpartition("/")[0]
        if isinstance(obj, _PodItem | _NodeItem):
            view = _view(obj, api_version)
            if group or ("", view.kind) not in known:
                raw.unknown[unknown_name(api_version, view.kind)] += 1
            else:
                typed.append(view)
            continue
        kind = type(obj).__struct_config__.tag
        if (group, kind) in skip:
            continue
        if len(obj.__struct_fields__) == 1 and (group, kind) in known:  # a kind of the same name as a skipped one
            raise _Fallback
        if (group, kind) not in known:
            raw.unknown[unknown_name(api_version, kind)] += 1
            continue
        fields = {"apiVersion": api_version, "kind": kind}
        for name in obj.__struct_fields__[1:]:  # the JSON names, but apiVersion's
            value = getattr(obj, name)
            if value is not _UNSET:
                fields[name] = value
        raw.by_kind.setdefault((group, kind), []).append(fields)
    return Decoded(typed, raw)


def _view(obj: _NodeItem | _PodItem, api_version: str) -> Node | Pod:
    if isinstance(obj, _PodItem):
        return Pod(api_version=api_version, metadata=obj.metadata, spec=obj.spec, status=obj.status)
    return Node(api_version=api_version, metadata=obj.metadata, spec=obj.spec, status=obj.status)


# ---------------------------------------------------------------------------------------------- item by item

_TYPED: dict[tuple[str, str], msgspec.json.Decoder[Any]] = {
    ("", "Node"): msgspec.json.Decoder(Node),
    ("", "Pod"): msgspec.json.Decoder(Pod),
}
_HEAD = msgspec.json.Decoder(_Head)
_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])


def _items(raw: msgspec.Raw, path: str) -> Iterator[tuple[tuple[msgspec.Raw, _Head], str]]:
    """Each object of ``raw`` with its path, Lists and arrays flattened and nulls skipped (as ``snapshot._flatten``)."""
    first = _first(raw)
    if first == b"[":
        for i, item in enumerate(_ARRAY.decode(raw)):
            yield from _items(item, f"{path}[{i}]")
        return
    if first == b"n" and msgspec.json.decode(raw) is None:
        return
    if first != b"{":
        value = msgspec.json.decode(raw)
        raise InputError(f"expected a Kubernetes object, got {type(value).__name__}", path=path)
    head = _HEAD.decode(raw)
    if isinstance(head.kind, str) and head.kind.endswith("List") and head.items is not _NO_ITEMS:
        if _first(head.items) != b"[":
            raise InputError("items must be a list", path=f"{path}.items")
        for i, item in enumerate(_ARRAY.decode(head.items)):
            yield from _items(item, f"{path}.items[{i}]")
        return
    yield (raw, head), path


def _keep(
    item: tuple[msgspec.Raw, _Head],
    path: str,
    known: frozenset[tuple[str, str]],
    *,
    skip: frozenset[tuple[str, str]],
    strict: bool,
    typed: list[Node | Pod],
    raw: RawObjects,
) -> None:
    data, head = item
    if not isinstance(head.api_version, str) or not isinstance(head.kind, str):
        raise InputError("object without apiVersion and kind", path=path)
    key = (head.api_version.rpartition("/")[0], head.kind)
    if key in skip:
        return
    if key not in known:
        raw.unknown[unknown_name(head.api_version, head.kind)] += 1
        return
    decoder = _TYPED.get(key)
    if decoder is not None:
        try:
            typed.append(decoder.decode(data))
            return
        except msgspec.ValidationError:
            obj = msgspec.json.decode(data)
            if strict:  # the YAML path's error, word for word
                codec.convert(obj, Node if key[1] == "Node" else Pod, path=f"{head.kind} {_name(obj)}")
    else:
        obj = msgspec.json.decode(data)
    raw.by_kind.setdefault(key, []).append(obj)


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else "?"
