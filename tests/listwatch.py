"""A list/watch stand-in for kube-apiserver on 127.0.0.1, driven by the test through Python calls.

A reflector is only as good as its handling of the server's corner cases: pages
that must stay consistent while objects change, continue tokens and watches
that outlive the history (410 Gone), bookmarks, selectors that objects move in
and out of, streams cut mid-way, a CRD that appears after start-up. A canned
fake cannot produce those in the right order, so this server keeps the real
model: one global resourceVersion counter (etcd's revision), the history of
every change since the last compaction, and the open watches. Answers have
kube-apiserver's shapes, status codes and messages (read from
``k8s.io/apiserver`` storage/etcd3, storage/cacher and endpoints; see
``Choices`` below for what is simplified), so a client that is right here is
right against a cluster for these calls.

Usage::

    with ListWatchServer([PODS, NODES], token="t") as server:
        server.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}})
        ...  # point the client at 127.0.0.1:server.port

Reads are GET (discovery, list, watch, get). Writes over HTTP are PATCH of
an object with a JSON merge patch (RFC 7386), what kilter's plan records
use; POST to a collection (create: 409 AlreadyExists when the name is
taken) and PUT of an object (update: a ``metadata.resourceVersion`` in the
body is a precondition, 409 Conflict when stale), what the plan-key Secret
uses. The test itself writes through ``add``, ``update`` and ``delete``.

Choices where the contract is loose or version-dependent:

* ``resourceVersion=0`` lists are served from the current state and ignore
  ``limit``, as the classic watch cache does (no continue token).
* ``delay_s`` takes the list's snapshot first and then sleeps, so changes made
  during the delay come after the list's resourceVersion and must reach the
  client through its watch, as with a slow apiserver.
* Items in lists lack ``kind``/``apiVersion`` for every resource (built-in
  lists do; real custom-resource lists carry them), the stricter case.
* A list or exact read at a resourceVersion ahead of the server waits up to
  ``too_large_wait_s`` (the watch cache's 3 s) and then answers 504
  "Too large resource version"; a watch from a future resourceVersion just
  waits for events after it, as the cacher does.
* BOOKMARK objects carry only kind, apiVersion and metadata.resourceVersion.
* POST and PUT take JSON. The server owns uid, creationTimestamp and
  resourceVersion: a create sets them (one that carries a resourceVersion is
  refused with the apiserver's 500, "resourceVersion should not be set on
  objects to be created"), an update keeps the stored ones. A PUT without a
  resourceVersion is unconditional, as for Secrets, Leases and most built-in
  kinds (``AllowUnconditionalUpdate``); a PUT of an absent object is 404
  (no ``AllowCreateOnUpdate``). A name or namespace in the body that is not
  the URL's is 400. A Secret's ``data`` values must be base64, as the
  apiserver decodes them into bytes (400 otherwise). An update that changes
  nothing writes nothing, as for PATCH.
* PATCH takes ``application/merge-patch+json`` only (kube-apiserver also takes
  JSON patch, strategic merge patch and apply); any other content type is 415
  with the apiserver's message naming what this server accepts. A patch that is
  not JSON is 400. A ``metadata.resourceVersion`` in the patch is a
  precondition (409 Conflict when stale), a changed ``metadata.name`` is 400,
  and what the server owns (uid, creationTimestamp, kind, apiVersion) is kept.
  A patch that changes nothing writes nothing: same resourceVersion, no event,
  as etcd3's GuaranteedUpdate skips an unchanged object.
* A LIST of a core-group resource (pods, nodes) whose ``Accept`` prefers
  ``application/vnd.kubernetes.protobuf`` is answered in Kubernetes protobuf
  (``tests/kube_protobuf.py``); other resources answer JSON to that header, as
  custom resources do, and 406 when it allows only protobuf. Every Status error
  is protobuf when the ``Accept`` prefers it, as the apiserver encodes errors
  with no regard to the resource. Watches, gets and discovery are always JSON;
  YAML is never served (a list asked for in YAML only is 406).
"""

from __future__ import annotations

import base64
import binascii
import copy
import http.client
import json
import posixpath
import queue
import re
import select
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

from tests.kube_protobuf import MEDIA_TYPE as PROTOBUF
from tests.kube_protobuf import encode, envelope

__all__ = [
    "MERGE_PATCH",
    "NODES",
    "PODS",
    "SECRETS",
    "ApiError",
    "ListWatchServer",
    "Request",
    "Resource",
    "merge_patch",
]

Obj = dict[str, Any]

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)
LIST_EXPIRED = "The resourceVersion for the provided list is too old."
MERGE_PATCH = "application/merge-patch+json"
JSON = "application/json"
SERVED_MEDIA_TYPES = f"{JSON}, application/yaml, {PROTOBUF}"  # what a 406 names, built-in or custom (CBOR off)
NOT_FOUND = "the server could not find the requested resource"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(frozen=True)
class Resource:
    """One served resource: where it lives (``/api/v1`` for the core group) and how discovery describes it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    installed: bool = True

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def qualified(self) -> str:
        """``pods`` or ``workloads.kueue.x-k8s.io``, as NotFound messages name a resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
SECRETS = Resource("", "v1", "secrets", "Secret", namespaced=True)
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True)
COMPUTE_DOMAINS = Resource("resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain", namespaced=True)
"""NVIDIA's DRA driver's CRD (``computedomains.resource.nvidia.com``), served as the apiserver serves a CRD."""


class Request(NamedTuple):
    """One request as the server saw it; ``query`` keeps the last value of each parameter."""

    method: str
    path: str
    query: dict[str, str]
    accept: str = ""


class ApiError(Exception):
    """An answer that is a ``metav1.Status``: raised inside the handler, written as JSON with its code."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: Obj | None = None,
        list_continue: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.list_continue = list_continue

    def status(self) -> Obj:
        """The Status object, keys in the order kube-apiserver writes them."""
        meta: Obj = {"continue": self.list_continue} if self.list_continue else {}
        out: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": meta,
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            out["details"] = self.details
        out["code"] = self.code
        return out


def _bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def _invalid_list_options(path: str, kind: str, detail: str) -> ApiError:
    """422 as ``errors.NewInvalid(ListOptions.meta.k8s.io)`` for ListOptions that fail validation."""
    cause_type = {"Forbidden": "FieldValueForbidden", "Unsupported value": "FieldValueNotSupported"}[kind]
    text = f"{kind}: {detail}"
    return ApiError(
        422,
        "Invalid",
        f'ListOptions.meta.k8s.io "" is invalid: {path}: {text}',
        details={
            "group": "meta.k8s.io",
            "kind": "ListOptions",
            "causes": [{"reason": cause_type, "message": text, "field": path}],
        },
    )


# --- selectors ----------------------------------------------------------------------------------------------------

_LABEL_KEY = re.compile(
    r"^(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_LABEL_TOKEN = re.compile(r"\s*(==|!=|=|!|\(|\)|,|>|<|[^\s=!(),<>]+)")


@dataclass(frozen=True)
class LabelSelector:
    """A parsed ``labelSelector``; requirements are ANDed, as ``labels.Parse`` does."""

    requirements: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    @staticmethod
    def parse(raw: str) -> LabelSelector:
        """Equality (``=``, ``==``, ``!=``), sets (``in``, ``notin``), existence (``k``, ``!k``) and ``>``/``<``."""
        tokens: list[str] = []
        pos = 0
        while raw[pos:].strip():
            m = _LABEL_TOKEN.match(raw, pos)
            if m is None:
                raise _bad_request(f"unable to parse requirement: found '{raw[pos:]}'")
            tokens.append(m.group(1))
            pos = m.end()
        reqs: list[tuple[str, str, tuple[str, ...]]] = []
        i = 0

        def peek() -> str | None:
            return tokens[i] if i < len(tokens) else None

        def ident(what: str) -> str:
            nonlocal i
            tok = peek()
            if tok is None or tok in ("=", "==", "!=", "!", "(", ")", ",", ">", "<"):
                raise _bad_request(f"unable to parse requirement: found '{tok or ''}', expected: {what}")
            i += 1
            return tok

        def key() -> str:
            k = ident("identifier")
            if not _LABEL_KEY.match(k) or len(k.rpartition("/")[2]) > 63:
                raise _bad_request(f"unable to parse requirement: key: Invalid value: {k!r}")
            return k

        def value(v: str) -> str:
            if not _LABEL_VALUE.match(v) or len(v) > 63:
                raise _bad_request(f"unable to parse requirement: values[0][{v}]: Invalid value: {v!r}")
            return v

        while tokens:
            if peek() == "!":
                i += 1
                reqs.append(("!", key(), ()))
            else:
                k = key()
                op = peek()
                if op is None or op == ",":
                    reqs.append(("exists", k, ()))
                elif op in ("=", "==", "!="):
                    i += 1
                    v = "" if peek() in (None, ",") else ident("identifier")
                    reqs.append(("=" if op == "==" else op, k, (value(v),)))
                elif op in ("in", "notin"):
                    i += 1
                    if peek() != "(":
                        raise _bad_request(f"unable to parse requirement: found '{peek() or ''}', expected: '('")
                    i += 1
                    values: list[str] = []
                    while True:
                        values.append(value("" if peek() in (",", ")") else ident("identifier")))
                        tok = peek()
                        i += 1
                        if tok == ")":
                            break
                        if tok != ",":
                            raise _bad_request(
                                f"unable to parse requirement: found '{tok or ''}', expected: ',' or ')'"
                            )
                    if values == [""]:
                        raise _bad_request(
                            "unable to parse requirement: for 'in', 'notin' operators, values set can't be empty"
                        )
                    reqs.append((op, k, tuple(values)))
                elif op in (">", "<"):
                    i += 1
                    v = ident("integer")
                    if not re.fullmatch(r"-?\d+", v):
                        raise _bad_request(
                            f"unable to parse requirement: for 'Gt', 'Lt' operators, {v!r} is not an integer"
                        )
                    reqs.append((op, k, (v,)))
                else:
                    raise _bad_request(
                        f"unable to parse requirement: found '{op}', expected: '=', '!=', '==', 'in', notin'"
                    )
            tok = peek()
            if tok is None:
                break
            if tok != ",":
                raise _bad_request(f"unable to parse requirement: found '{tok}', expected: ','")
            i += 1
        return LabelSelector(tuple(reqs))

    def matches(self, labels: dict[str, str]) -> bool:
        """``labels.Requirement.Matches``: ``!=`` and ``notin`` also match objects without the label."""
        for op, k, values in self.requirements:
            has = k in labels
            v = labels.get(k, "")
            if op in ("=", "in"):
                ok = has and v in values
            elif op in ("!=", "notin"):
                ok = not has or v not in values
            elif op == "exists":
                ok = has
            elif op == "!":
                ok = not has
            else:
                try:
                    n = int(v)
                except ValueError:
                    return False
                ok = has and (n > int(values[0]) if op == ">" else n < int(values[0]))
            if not ok:
                return False
        return True


def _split_unescaped(raw: str, sep: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    escaped = False
    for ch in raw:
        if escaped:
            cur.append(ch)
            escaped = False
        elif ch == "\\":
            cur.append(ch)
            escaped = True
        elif ch == sep:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def _unescape_field_value(raw: str) -> str:
    out: list[str] = []
    it = iter(raw)
    for ch in it:
        if ch == "\\":
            nxt = next(it, "")
            if nxt not in ("\\", ",", "="):
                raise _bad_request(f"invalid field selector: invalid escape sequence: \\{nxt}")
            out.append(nxt)
        elif ch in (",", "="):
            raise _bad_request(f"invalid field selector: unescaped {ch!r} in value {raw!r}")
        else:
            out.append(ch)
    return "".join(out)


@dataclass(frozen=True)
class FieldSelector:
    """A parsed ``fieldSelector`` (``k=v``, ``k==v``, ``k!=v``, comma-ANDed, values backslash-escaped)."""

    requirements: tuple[tuple[str, bool, str], ...] = ()  # (field, equal, value)

    @staticmethod
    def parse(raw: str) -> FieldSelector:
        reqs: list[tuple[str, bool, str]] = []
        for term in _split_unescaped(raw, ","):
            if not term:
                continue
            for i in range(len(term)):
                op = next((o for o in ("!=", "==", "=") if term.startswith(o, i)), None)
                if op is not None:
                    reqs.append((term[:i], op != "!=", _unescape_field_value(term[i + len(op) :])))
                    break
            else:
                raise _bad_request(f"invalid selector: '{raw}'; can't understand '{term}'")
        return FieldSelector(tuple(reqs))

    def matches(self, fields: dict[str, str]) -> bool:
        return all((fields.get(f, "") == v) == equal for f, equal, v in self.requirements)


def _pod_fields(obj: Obj) -> dict[str, str]:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return {
        "spec.nodeName": str(spec.get("nodeName") or ""),
        "spec.restartPolicy": str(spec.get("restartPolicy") or ""),
        "spec.schedulerName": str(spec.get("schedulerName") or ""),
        "spec.serviceAccountName": str(spec.get("serviceAccountName") or ""),
        "spec.hostNetwork": "true" if spec.get("hostNetwork") else "false",
        "status.phase": str(status.get("phase") or ""),
        "status.podIP": str(status.get("podIP") or ""),
        "status.nominatedNodeName": str(status.get("nominatedNodeName") or ""),
    }


def _node_fields(obj: Obj) -> dict[str, str]:
    return {"spec.unschedulable": "true" if (obj.get("spec") or {}).get("unschedulable") else "false"}


def _selectable_fields(resource: Resource, obj: Obj) -> dict[str, str]:
    """The fields kube-apiserver lets a fieldSelector use for this resource, with their values for ``obj``."""
    meta = obj.get("metadata") or {}
    out = {"metadata.name": str(meta.get("name") or "")}
    if resource.namespaced or (resource.group == "" and resource.kind not in ("Node",)):
        out["metadata.namespace"] = str(meta.get("namespace") or "")
    if resource.group == "" and resource.kind == "Pod":
        out.update(_pod_fields(obj))
    elif resource.group == "" and resource.kind == "Node":
        out.update(_node_fields(obj))
    return out


def _field_selector_for(resource: Resource, raw: str) -> FieldSelector:
    """Parse and check every label against what the resource supports (400 "field label not supported")."""
    parsed = FieldSelector.parse(raw)
    supported = set(_selectable_fields(resource, {}))
    reqs: list[tuple[str, bool, str]] = []
    for name, equal, value in parsed.requirements:
        if name == "spec.host" and resource.group == "" and resource.kind == "Pod":
            name = "spec.nodeName"  # the pod conversion's backward-compatible alias
        if name not in supported:
            raise _bad_request(f"field label not supported: {name}")
        reqs.append((name, equal, value))
    return FieldSelector(tuple(reqs))


# --- the store ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Change:
    """One etcd revision: the object after it (for DELETED, the last state at the deletion's revision) and before."""

    rv: int
    resource: Resource
    key: str
    type: str
    obj: Obj
    prev: Obj | None


COALESCE = 256  # most queued watch events written in one send
_END = "end"  # close the stream cleanly (terminating chunk)
_DROP = "drop"  # cut the connection without the terminating chunk


@dataclass(eq=False)
class _Watch:
    resource: Resource
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    bookmarks: bool
    out: queue.Queue[bytes | str] = field(default_factory=queue.Queue)

    def matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace", "") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels") or {}) and self.fields.matches(
            _selectable_fields(self.resource, obj)
        )

    def event_for(self, change: _Change) -> tuple[str, Obj] | None:
        """What this watch sees of a change: the cacher turns leaving the selector into DELETED, entering into ADDED."""
        now = self.matches(change.obj) if change.type != "DELETED" else False
        before = self.matches(change.prev)
        if now and before:
            return "MODIFIED", change.obj
        if now:
            return "ADDED", change.obj
        if before:
            # the previous content, stamped with the revision of the change that removed it from view
            assert change.prev is not None
            gone = copy.deepcopy(change.prev)
            gone["metadata"]["resourceVersion"] = str(change.rv)
            return "DELETED", gone
        return None


def _line(event_type: str, obj: Obj) -> bytes:
    return json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


def _key(obj: Obj, resource: Resource) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}" if resource.namespaced else str(meta["name"])


def _encode_continue(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, str]:
    """``storage.DecodeContinue``: the snapshot revision and the (prefix-relative) key to start at."""
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, binascii.Error) as exc:
        raise _bad_request(f"invalid continue token: continue key is not valid: {exc}") from None
    if not isinstance(data, dict) or data.get("v") != "meta.k8s.io/v1":
        version = data.get("v") if isinstance(data, dict) else None
        raise _bad_request(
            f"invalid continue token: continue key is not valid: server does not recognize this encoded version "
            f'"{version}"'
        )
    rv, start = data.get("rv"), data.get("start")
    if not isinstance(rv, int) or rv == 0:
        raise _bad_request("invalid continue token: continue key is not valid: incorrect encoded start resourceVersion")
    if not isinstance(start, str) or not start:
        raise _bad_request("invalid continue token: continue key is not valid: encoded start key empty")
    if posixpath.normpath("/" + start.rstrip("\x00")) != "/" + start.rstrip("\x00"):
        raise _bad_request(f"invalid continue token: continue key is not valid: {start}")
    return rv, start


def _negotiate(accept: str, protobuf: bool) -> str | None:
    """The answer's media type as ``negotiation.NegotiateMediaTypeOptions`` picks it, or None (406).

    Media ranges go by descending q, then specific before wildcard, else in the client's order
    (goautoneg); the first one the endpoint serves wins. No header means JSON.
    """
    if not accept.strip():
        return JSON
    ranges: list[tuple[float, bool, bool, int, str]] = []
    for i, clause in enumerate(accept.split(",")):
        media, *params = clause.split(";")
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        kind, _, sub = media.strip().partition("/")
        ranges.append((-q, kind == "*", sub in ("", "*"), i, media.strip()))
    for *_, media in sorted(ranges):
        if media in (JSON, "application/*", "*/*", "*"):
            return JSON
        if media == PROTOBUF and protobuf:
            return PROTOBUF
    return None


def _flag(query: dict[str, str], name: str) -> bool:
    """Go's query-to-bool conversion: present and not "0"/"false" means true."""
    if name not in query:
        return False
    return query[name] != "0" and query[name].lower() != "false"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_EXPRESSION_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def _selector(selector: Obj) -> LabelSelector | None:
    """A ``metav1.LabelSelector`` object as ``LabelSelector`` requirements (``LabelSelectorAsSelector``); None
    when it selects nothing: empty, or an unknown operator (an invalid selector, which EvictionREST skips)."""
    reqs: list[tuple[str, str, tuple[str, ...]]] = [
        ("=", k, (v,)) for k, v in sorted((selector.get("matchLabels") or {}).items())
    ]
    for e in selector.get("matchExpressions") or []:
        op = _EXPRESSION_OPERATORS.get(e.get("operator", ""))
        if op is None:
            return None
        reqs.append((op, e.get("key", ""), tuple(e.get("values") or ())))
    return LabelSelector(tuple(reqs)) if reqs else None


def _details(resource: Resource, name: str) -> Obj:
    """A Status's ``details`` for one object: name, group (if any), kind as the plural."""
    details: Obj = {"name": name}
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.plural
    return details


def _not_found(resource: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource.qualified} "{name}" not found', details=_details(resource, name))


def _written_object(resource: Resource, namespace: str | None, body: bytes) -> Obj:
    """The object a POST or PUT body carries, checked as the apiserver's decoder and ``rest.BeforeCreate`` /
    ``BeforeUpdate`` check it: JSON of this kind, in the URL's namespace (filled in when absent)."""
    cannot = f'{resource.kind} in version "{resource.version}" cannot be handled as a {resource.kind}'
    try:
        obj = json.loads(body)
    except ValueError as exc:
        raise _bad_request(f"{cannot}: {exc}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
        raise _bad_request(f"{cannot}: the body is not an object with metadata")
    if obj.get("kind", resource.kind) != resource.kind or obj.get("apiVersion", resource.group_version) != (
        resource.group_version
    ):
        raise _bad_request(f"{cannot}: kind {obj.get('kind')!r} of {obj.get('apiVersion')!r}")
    obj["kind"], obj["apiVersion"] = resource.kind, resource.group_version
    meta = obj.setdefault("metadata", {})
    if resource.namespaced:
        if meta.get("namespace") not in (None, "", namespace):
            raise _bad_request("the namespace of the provided object does not match the namespace sent on the request")
        meta["namespace"] = namespace
    if resource.kind == "Secret":
        data = obj.get("data") or {}
        for value in data.values() if isinstance(data, dict) else [None]:
            try:
                base64.b64decode(value if isinstance(value, str) else "?", validate=True)
            except binascii.Error as exc:
                raise _bad_request(f"{cannot}: illegal base64 data: {exc}") from None
    return obj


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 MergePatch: objects merge key by key, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class ListWatchServer:
    """The cluster a test drives: objects, the revision counter, history, and the HTTP server that exposes them."""

    host = "127.0.0.1"

    def __init__(self, resources: list[Resource], *, token: str | None = None) -> None:
        self.resources = list(resources)
        self.token = token
        self.delay_s = 0.0
        self.too_large_wait_s = 3.0
        self.watch_list = True  # the WatchList feature (sendInitialEvents); off answers 422 as older servers do
        # the service proxy: (namespace, service, port as written in the path) -> (host, port) it forwards to
        self.services: dict[tuple[str, str, str], tuple[str, int]] = {}
        self.forbid_proxy = False  # answer the proxy as RBAC does for a caller without its verb on services/proxy
        self.requests: list[Request] = []
        self.connections = 0  # accepted: keep-alive shows as fewer connections than requests
        self._installed = {(r.group, r.version, r.plural) for r in resources if r.installed}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._rv = 1
        self._compacted = 1
        self._objects: dict[Resource, dict[str, Obj]] = {r: {} for r in resources}
        self._history: list[_Change] = []
        self._watches: list[_Watch] = []
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), name="listwatch", daemon=True)

    # --- lifecycle

    def __enter__(self) -> ListWatchServer:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """End every watch cleanly (handler threads return), then stop serving."""
        self._end_watches(_END)
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def resource_version(self) -> int:
        """The current global revision (what a consistent list would answer)."""
        with self._lock:
            return self._rv

    # --- driving the cluster

    def add(self, obj: Obj) -> Obj:
        """Create an object (uid, resourceVersion and creationTimestamp filled in); watches see ADDED."""
        with self._lock:
            resource, stored = self._prepare(obj)
            key = _key(stored, resource)
            if key in self._objects[resource]:
                raise KeyError(f"{resource.qualified} {key!r} already exists")
            meta = stored["metadata"]
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            self._commit(resource, key, "ADDED", stored, None)
            return copy.deepcopy(stored)

    def update(self, obj: Obj) -> Obj:
        """Replace an existing object (uid and creationTimestamp kept if absent); watches see MODIFIED."""
        with self._lock:
            resource, stored = self._prepare(obj)
            key = _key(stored, resource)
            prev = self._objects[resource].get(key)
            if prev is None:
                raise KeyError(f"{resource.qualified} {key!r} not found")
            meta = stored["metadata"]
            meta.setdefault("uid", prev["metadata"].get("uid"))
            meta.setdefault("creationTimestamp", prev["metadata"].get("creationTimestamp"))
            self._commit(resource, key, "MODIFIED", stored, prev)
            return copy.deepcopy(stored)

    def delete(self, group: str, plural: str, namespace: str | None, name: str) -> Obj:
        """Delete an object; watches see DELETED with its last state at the deletion's new resourceVersion."""
        with self._lock:
            resource = self._resource(group, plural)
            key = f"{namespace or ''}/{name}" if resource.namespaced else name
            prev = self._objects[resource].get(key)
            if prev is None:
                raise KeyError(f"{resource.qualified} {key!r} not found")
            gone = copy.deepcopy(prev)
            gone["metadata"]["resourceVersion"] = str(self._rv + 1)
            self._commit(resource, key, "DELETED", gone, prev)
            return copy.deepcopy(gone)

    def bind(self, namespace: str, name: str, body: bytes) -> Obj:
        """``POST pods/NAME/binding`` as the apiserver's BindingREST: sets ``spec.nodeName`` once, 409 if set or if
        the Binding's ``metadata.uid`` (a precondition) is not the pod's."""
        try:
            binding = json.loads(body)
        except ValueError:
            raise _bad_request("the body is not a Binding: invalid JSON") from None
        target = binding.get("target") if isinstance(binding, dict) else None
        if not isinstance(target, dict):
            target = {}
        node = target.get("name")
        if not isinstance(node, str) or not node or target.get("kind", "Node") not in ("Node", ""):
            raise ApiError(422, "Invalid", f'Binding.core "{name}" is invalid: target: must name a Node')
        with self._lock:
            resource, key, prev = self._pod(namespace, name)
            want_uid = (binding.get("metadata") or {}).get("uid") if isinstance(binding, dict) else None
            have_uid = prev["metadata"].get("uid")
            if want_uid and want_uid != have_uid:  # BindingREST.assignPod: the uid is a precondition
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods/binding "{name}": Precondition failed: '
                    f"UID in precondition: {want_uid}, UID in object meta: {have_uid}",
                )
            bound = (prev.get("spec") or {}).get("nodeName")
            if bound:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods/binding "{name}": '
                    f'pod {name} is already assigned to node "{bound}"',
                )
            new = copy.deepcopy(prev)
            new.setdefault("spec", {})["nodeName"] = node
            self._commit(resource, key, "MODIFIED", new, prev)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def evict(self, namespace: str, name: str, body: bytes, query: dict[str, str]) -> tuple[int, Obj]:
        """``POST pods/NAME/eviction`` as the apiserver's EvictionREST (pkg/registry/core/pod/storage/eviction.go),
        the pod deleted at once (no graceful termination) and a budget with an invalid selector applied as written:
        a pod that is Pending, ended or being deleted is deleted at once; else its one PodDisruptionBudget
        (policy/v1, served by this server, selected by labels; an empty selector selects nothing) must allow a
        disruption: 429 when it allows none (or has not observed its generation), 403 when its count is negative,
        500 when several select the pod. An unready pod is deleted without spending the budget while the budget
        has its healthy pods. Allowed: ``disruptionsAllowed`` decremented, the pod named in ``disruptedPods``,
        the pod deleted. ``dryRun`` (query or ``deleteOptions``) changes nothing. A UID precondition is the
        delete's, judged after the budget: 409 (the budget spent already). Returns (code, Status)."""
        try:
            eviction = json.loads(body)
        except ValueError:
            raise _bad_request("the body is not an Eviction: invalid JSON") from None
        if not isinstance(eviction, dict) or eviction.get("kind", "Eviction") != "Eviction":
            raise _bad_request("not a Eviction object")
        if eviction.get("apiVersion", "policy/v1") not in ("policy/v1", "policy/v1beta1"):
            raise _bad_request(f"unsupported Eviction version {eviction.get('apiVersion')!r}")
        if (eviction.get("metadata") or {}).get("name") != name:
            raise _bad_request("name in URL does not match name in Eviction object")
        options = eviction.get("deleteOptions") or {}
        dry_run = query.get("dryRun") == "All" or options.get("dryRun") == ["All"]
        want_uid = (options.get("preconditions") or {}).get("uid")
        success: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        with self._lock:
            pods, key, pod = self._pod(namespace, name)
            have_uid = pod["metadata"].get("uid")
            conflict = ApiError(  # what the delete's UID precondition answers, after the budget was judged
                409,
                "Conflict",
                f'Operation cannot be fulfilled on Pod "{name}": Precondition failed: '
                f"UID in precondition: {want_uid}, UID in object meta: {have_uid}",
                details={"name": name, "kind": "Pod"},
            )
            phase = (pod.get("status") or {}).get("phase", "")
            if phase in ("Succeeded", "Failed", "Pending") or pod["metadata"].get("deletionTimestamp"):
                if want_uid and want_uid != have_uid:
                    raise conflict
                if not dry_run:
                    self._commit(pods, key, "DELETED", copy.deepcopy(pod), pod)
                return 201, success
            budgets = self._budgets_of(pod)
            if len(budgets) > 1:
                message = (
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
                )
                return 500, {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": message,
                    "code": 500,
                }
            if budgets:
                budget_key, budget = budgets[0]
                status = budget.get("status") or {}
                ready = any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (pod.get("status") or {}).get("conditions") or []
                )
                healthy, desired = status.get("currentHealthy", 0), status.get("desiredHealthy", 0)
                if not (not ready and healthy >= desired and desired > 0):
                    self._spend(budget_key, budget, name, dry_run)
            if want_uid and want_uid != have_uid:
                raise conflict  # the budget was spent already (EvictionREST decrements, then deletes)
            if not dry_run:
                self._commit(pods, key, "DELETED", copy.deepcopy(pod), pod)
        return 201, success

    def _pod(self, namespace: str, name: str) -> tuple[Resource, str, Obj]:
        """The pods resource, the pod's key and the pod itself (held under the lock); 404 NotFound without it."""
        resource = self._resource("", "pods")
        key = f"{namespace}/{name}"
        pod = self._objects[resource].get(key)
        if pod is None:
            raise _not_found(resource, name)
        return resource, key, pod

    def evict_raw(
        self, namespace: str, name: str, eviction: Obj, query: dict[str, str] | None = None
    ) -> tuple[int, Obj]:
        """``evict`` with its refusal as (code, Status) too, as the client would read the answer."""
        try:
            return self.evict(namespace, name, json.dumps(eviction).encode(), query or {})
        except ApiError as err:
            return err.code, err.status()

    def objects(self, resource: Resource) -> list[Obj]:
        """What the server holds of ``resource`` now, by key."""
        with self._lock:
            return [copy.deepcopy(o) for _, o in sorted(self._objects[resource].items())]

    def _budgets_of(self, pod: Obj) -> list[tuple[str, Obj]]:
        """The PodDisruptionBudgets of the pod's namespace whose selector selects it (none if the server serves
        none)."""
        budgets = next((r for r in self.resources if (r.group, r.plural) == ("policy", "poddisruptionbudgets")), None)
        if budgets is None:
            return []
        namespace, labels = pod["metadata"].get("namespace"), pod["metadata"].get("labels") or {}
        out = []
        for key, pdb in sorted(self._objects[budgets].items()):
            selector = _selector((pdb.get("spec") or {}).get("selector") or {})
            if pdb["metadata"].get("namespace") == namespace and selector is not None and selector.matches(labels):
                out.append((key, pdb))
        return out

    def _spend(self, key: str, budget: Obj, pod: str, dry_run: bool) -> None:
        """EvictionREST.checkAndDecrement: the budget allows this disruption, or the ApiError that refuses it."""
        name, status = budget["metadata"]["name"], budget.get("status") or {}
        refusal = "Cannot evict pod as it would violate the pod's disruption budget."
        if status.get("observedGeneration", 0) < budget["metadata"].get("generation", 0):
            cause = {
                "reason": "DisruptionBudget",
                "message": f"The disruption budget {name} is still being processed by the server.",
            }
            raise ApiError(429, "TooManyRequests", refusal, details={"causes": [cause], "retryAfterSeconds": 10})
        allowed = status.get("disruptionsAllowed", 0)
        if allowed < 0:
            raise ApiError(
                403,
                "Forbidden",
                f'poddisruptionbudget.policy "{name}" is forbidden: pdb disruptions allowed is negative',
                details={"name": name, "group": "policy", "kind": "poddisruptionbudget"},
            )
        if allowed == 0:
            desired, healthy = status.get("desiredHealthy", 0), status.get("currentHealthy", 0)
            needs = f"needs {desired} healthy pods and has {healthy} currently"
            cause = {"reason": "DisruptionBudget", "message": f"The disruption budget {name} {needs}"}
            raise ApiError(429, "TooManyRequests", refusal, details={"causes": [cause]})
        if dry_run:
            return
        new = copy.deepcopy(budget)
        new.setdefault("status", {})["disruptionsAllowed"] = allowed - 1
        new["status"].setdefault("disruptedPods", {})[pod] = _now()
        budgets = self._resource("policy", "poddisruptionbudgets")
        self._commit(budgets, key, "MODIFIED", new, budget)

    def install(self, group: str, version: str, plural: str) -> None:
        """A CRD becomes established: its paths answer and discovery lists it from now on."""
        with self._lock:
            if not any((r.group, r.version, r.plural) == (group, version, plural) for r in self.resources):
                raise KeyError(f"{plural}.{group}/{version} was not declared to the server")
            self._installed.add((group, version, plural))

    def compact(self, rv: int | None = None) -> None:
        """etcd compaction at ``rv`` (default: now): older snapshots, continue tokens and watch starts get 410."""
        with self._lock:
            at = self._rv if rv is None else min(rv, self._rv)
            self._compacted = max(self._compacted, at)
            self._history = [c for c in self._history if c.rv > self._compacted]

    def drop_watches(self, *, graceful: bool = False) -> int:
        """Close every open watch mid-stream; abrupt (no terminating chunk) unless graceful. Returns how many.

        An abrupt cut is what a load balancer or a crashed apiserver does. Note that http.client's
        ``readline()`` on a chunked body reports a cut at a chunk boundary as a clean end (``b""``);
        ``read()`` raises ``IncompleteRead``. A reflector must re-watch either way.
        """
        return self._end_watches(_END if graceful else _DROP)

    def bookmark(self) -> int:
        """Send a BOOKMARK at the current revision to every watch that asked for them. Returns how many got one."""
        with self._lock:
            sent = 0
            for w in self._watches:
                if w.bookmarks:
                    w.out.put(_line("BOOKMARK", self._bookmark_object(w.resource)))
                    sent += 1
            return sent

    def open_watches(self) -> int:
        with self._lock:
            return len(self._watches)

    # --- internals (callers hold the lock unless said otherwise)

    def _resource(self, group: str, plural: str) -> Resource:
        for r in self.resources:
            if (r.group, r.plural) == (group, plural):
                if (r.group, r.version, r.plural) not in self._installed:
                    raise KeyError(f"{r.qualified} is not installed yet")
                return r
        raise KeyError(f"{plural}.{group} is not served")

    def _prepare(self, obj: Obj) -> tuple[Resource, Obj]:
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        for r in self.resources:
            if (r.group_version, r.kind) == (api_version, kind):
                resource = self._resource(r.group, r.plural)
                break
        else:
            raise KeyError(f"no served resource for apiVersion={api_version!r} kind={kind!r}")
        stored = copy.deepcopy(obj)
        meta = stored.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError("an object needs metadata.name")
        if resource.namespaced and not meta.get("namespace"):
            raise ValueError(f"{kind} is namespaced: metadata.namespace is required")
        if not resource.namespaced:
            meta.pop("namespace", None)
        return resource, stored

    def _commit(self, resource: Resource, key: str, event_type: str, obj: Obj, prev: Obj | None) -> None:
        self._rv += 1
        if event_type != "DELETED":
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self._objects[resource][key] = obj
        else:
            del self._objects[resource][key]
        change = _Change(self._rv, resource, key, event_type, obj, prev)
        self._history.append(change)
        for w in self._watches:
            if w.resource == resource:
                seen = w.event_for(change)
                if seen is not None:
                    w.out.put(_line(*seen))
        self._changed.notify_all()

    def _end_watches(self, how: str) -> int:
        with self._lock:
            watches, self._watches = self._watches, []
        for w in watches:
            w.out.put(how)
        return len(watches)

    def _bookmark_object(self, resource: Resource) -> Obj:
        return {
            "kind": resource.kind,
            "apiVersion": resource.group_version,
            "metadata": {"resourceVersion": str(self._rv)},
        }

    def _snapshot(self, resource: Resource, rv: int) -> dict[str, Obj]:
        """The resource's objects as of revision ``rv`` (>= the compaction point): undo the newer changes."""
        state = dict(self._objects[resource])
        for change in reversed(self._history):
            if change.rv <= rv:
                break
            if change.resource == resource:
                if change.prev is None:
                    state.pop(change.key, None)
                else:
                    state[change.key] = change.prev
        return state

    def _wait_for(self, rv: int) -> None:
        """Block (releasing the lock) until the revision reaches ``rv``, else 504 as the watch cache answers."""
        if not self._changed.wait_for(lambda: self._rv >= rv, timeout=self.too_large_wait_s):
            raise ApiError(
                504,
                "Timeout",
                f"Too large resource version: {rv}, current: {self._rv}",
                details={
                    "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                    "retryAfterSeconds": 1,
                },
            )

    def is_installed(self, resource: Resource) -> bool:
        return (resource.group, resource.version, resource.plural) in self._installed

    # --- HTTP semantics (called by the handler)

    def discovery(self, parts: list[str]) -> Obj:
        with self._lock:
            served = [r for r in self.resources if self.is_installed(r)]
        if parts == ["api"]:
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}
                ],
            }
        if parts == ["api", "v1"]:
            return {"kind": "APIResourceList", "groupVersion": "v1", "resources": _api_resources(served, "", "v1")}
        groups: dict[str, list[str]] = {}
        for r in served:
            if r.group and r.version not in groups.setdefault(r.group, []):
                groups[r.group].append(r.version)
        if parts == ["apis"]:
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_api_group(g, v) for g, v in groups.items()]}
        if len(parts) == 2 and parts[1] in groups:
            return {"kind": "APIGroup", "apiVersion": "v1", **_api_group(parts[1], groups[parts[1]])}
        if len(parts) == 3 and parts[2] in groups.get(parts[1], []):
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{parts[1]}/{parts[2]}",
                "resources": _api_resources(served, parts[1], parts[2]),
            }
        raise ApiError(404, "NotFound", NOT_FOUND)

    def route(self, parts: list[str]) -> tuple[Resource, str | None, str | None]:
        """(resource, namespace, name) for a resource path; 404 for anything not served (yet)."""
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", NOT_FOUND)
        namespace: str | None = None
        if len(rest) in (3, 4) and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if len(rest) not in (1, 2):
            raise ApiError(404, "NotFound", NOT_FOUND)
        with self._lock:
            for r in self.resources:
                if (r.group, r.version, r.plural) == (group, version, rest[0]) and self.is_installed(r):
                    if (namespace is not None and not r.namespaced) or (
                        namespace is None and r.namespaced and len(rest) == 2
                    ):
                        break
                    return r, namespace, rest[1] if len(rest) == 2 else None
        raise ApiError(404, "NotFound", NOT_FOUND)

    def get_object(self, resource: Resource, namespace: str | None, name: str) -> Obj:
        with self._lock:
            key = f"{namespace or ''}/{name}" if resource.namespaced else name
            obj = self._objects[resource].get(key)
        if obj is None:
            raise _not_found(resource, name)
        return copy.deepcopy(obj)

    def create_object(self, resource: Resource, namespace: str | None, body: bytes) -> Obj:
        """POST to a collection, as the apiserver's create: the stored object (uid, resourceVersion and
        creationTimestamp the server's), ADDED to watchers; 409 AlreadyExists when the name is taken."""
        obj = _written_object(resource, namespace, body)
        meta = obj["metadata"]
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(
                422,
                "Invalid",
                f'{resource.kind} "" is invalid: metadata.name: Required value: name or generateName is required',
                details={"kind": resource.kind, "causes": [{"reason": "FieldValueRequired", "field": "metadata.name"}]},
            )
        if meta.get("resourceVersion"):
            raise ApiError(
                500,
                "InternalError",
                "Internal error occurred: resourceVersion should not be set on objects to be created",
                details={"causes": [{"message": "resourceVersion should not be set on objects to be created"}]},
            )
        with self._lock:
            key = _key(obj, resource)
            if key in self._objects[resource]:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{resource.qualified} "{name}" already exists',
                    details=_details(resource, name),
                )
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
            self._commit(resource, key, "ADDED", obj, None)
            return copy.deepcopy(obj)

    def update_object(self, resource: Resource, namespace: str | None, name: str, body: bytes) -> Obj:
        """PUT of an object, as the apiserver's update: a resourceVersion in the body must be the stored one (409
        Conflict otherwise, one writer of several wins); the stored object, MODIFIED to watchers."""
        obj = _written_object(resource, namespace, body)
        meta = obj["metadata"]
        if meta.get("name") != name:
            raise _bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        with self._lock:
            key = _key(obj, resource)
            prev = self._objects[resource].get(key)
            if prev is None:
                raise _not_found(resource, name)
            wanted_rv = meta.get("resourceVersion")
            have_uid = prev["metadata"].get("uid")
            if meta.get("uid") and meta["uid"] != have_uid:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource.qualified} "{name}": Precondition failed: '
                    f"UID in precondition: {meta['uid']}, UID in object meta: {have_uid}",
                    details=_details(resource, name),
                )
            if wanted_rv and wanted_rv != prev["metadata"].get("resourceVersion"):
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource.qualified} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                    details=_details(resource, name),
                )
            for owned in ("uid", "creationTimestamp", "resourceVersion"):
                if owned in prev["metadata"]:
                    meta[owned] = prev["metadata"][owned]
                else:
                    meta.pop(owned, None)
            if obj == prev:
                return copy.deepcopy(prev)
            self._commit(resource, key, "MODIFIED", obj, prev)
            return copy.deepcopy(obj)

    def patch_object(self, resource: Resource, namespace: str | None, name: str, content_type: str, body: bytes) -> Obj:
        """PATCH with a JSON merge patch: the stored object merged, a new resourceVersion, MODIFIED to watchers."""
        media = content_type.split(";", 1)[0].strip().lower()  # parameters (charset) are ignored, as patch.go does
        if media != MERGE_PATCH:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: {MERGE_PATCH}",
            )
        with self._lock:
            key = f"{namespace or ''}/{name}" if resource.namespaced else name
            prev = self._objects[resource].get(key)
            if prev is None:
                raise _not_found(resource, name)
            try:
                patch = json.loads(body)
            except ValueError as exc:
                raise _bad_request(f"error decoding patch: {exc}") from None
            patched = merge_patch(copy.deepcopy(prev), patch)
            meta = patched.get("metadata") if isinstance(patched, dict) else None
            if not isinstance(patched, dict) or not isinstance(meta, dict):
                raise _bad_request("the patched object is not an object with metadata")
            asked = patch.get("metadata") if isinstance(patch, dict) else None
            wanted_rv = asked.get("resourceVersion") if isinstance(asked, dict) else None
            if wanted_rv is not None and wanted_rv != prev["metadata"].get("resourceVersion"):
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource.qualified} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                    details=_details(resource, name),
                )
            if meta.get("name") != name:
                raise _bad_request(
                    f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
                )
            for owned in ("kind", "apiVersion"):
                if owned in prev:
                    patched[owned] = prev[owned]
            for owned in ("uid", "creationTimestamp", "namespace", "resourceVersion"):
                if owned in prev["metadata"]:
                    meta[owned] = prev["metadata"][owned]
            if patched == prev:
                return copy.deepcopy(prev)
            self._commit(resource, key, "MODIFIED", patched, prev)
            return copy.deepcopy(patched)

    def list_page(self, resource: Resource, namespace: str | None, query: dict[str, str]) -> Obj:
        """One LIST page, following etcd3's GetList and the cacher's choice of where a read is served from."""
        rv_param = query.get("resourceVersion", "")
        match = query.get("resourceVersionMatch", "")
        token = query.get("continue", "")
        if "sendInitialEvents" in query:
            raise _invalid_list_options("sendInitialEvents", "Forbidden", "sendInitialEvents is forbidden for list")
        if match:
            if not rv_param:
                raise _invalid_list_options(
                    "resourceVersionMatch",
                    "Forbidden",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                )
            if token:
                raise _invalid_list_options(
                    "resourceVersionMatch", "Forbidden", "resourceVersionMatch is forbidden when continue is provided"
                )
            if match not in ("Exact", "NotOlderThan"):
                raise _invalid_list_options(
                    "resourceVersionMatch",
                    "Unsupported value",
                    f'"{match}": supported values: "Exact", "NotOlderThan", ""',
                )
            if match == "Exact" and rv_param == "0":
                raise _invalid_list_options(
                    "resourceVersionMatch",
                    "Forbidden",
                    'resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                )
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise _bad_request(f"limit: invalid value {query['limit']!r}") from None
        labels = LabelSelector.parse(query.get("labelSelector", ""))
        fields = _field_selector_for(resource, query.get("fieldSelector", ""))
        start = ""
        with self._lock:
            if token:
                if rv_param not in ("", "0"):
                    raise _bad_request("specifying resource version is not allowed when using continue")
                snap, start = _decode_continue(token)
                if snap < 0:
                    snap = self._rv  # an inconsistent continuation: the remainder at the latest revision
                elif snap < self._compacted:
                    raise ApiError(410, "Expired", CONTINUE_EXPIRED, list_continue=_encode_continue(-1, start))
            elif rv_param == "":
                snap = self._rv
            elif rv_param == "0":
                snap, limit = self._rv, 0  # served from the watch cache, which ignores limit
            else:
                try:
                    wanted = int(rv_param)
                    if wanted < 0:
                        raise ValueError(rv_param)
                except ValueError:
                    raise _bad_request(
                        f'resourceVersion: Invalid value: "{rv_param}": invalid resource version'
                    ) from None
                self._wait_for(wanted)
                exact = match == "Exact" or (match == "" and limit > 0)
                if exact and wanted < self._compacted:
                    raise ApiError(410, "Expired", LIST_EXPIRED)
                snap = wanted if exact else self._rv
            state = self._snapshot(resource, snap)
        scoped = sorted(
            (key[len(namespace) + 1 :] if namespace is not None else key, obj)
            for key, obj in state.items()
            if namespace is None or key.startswith(namespace + "/")
        )
        items: list[Obj] = []
        last = ""
        meta: Obj = {"resourceVersion": str(snap)}
        filtered = bool(labels.requirements or fields.requirements)
        for i, (key, obj) in enumerate(scoped):
            if key < start:
                continue
            if limit and len(items) == limit:
                meta["continue"] = _encode_continue(snap, last + "\x00")
                if not filtered:
                    meta["remainingItemCount"] = len(scoped) - i
                break
            last = key
            if labels.matches((obj.get("metadata") or {}).get("labels") or {}) and fields.matches(
                _selectable_fields(resource, obj)
            ):
                items.append({k: v for k, v in obj.items() if k not in ("kind", "apiVersion")})
        return {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.group_version,
            "metadata": meta,
            "items": copy.deepcopy(items),
        }

    def open_watch(self, resource: Resource, namespace: str | None, query: dict[str, str]) -> _Watch:
        """Register a watch and queue what it replays first; a too-old start queues the 410 ERROR event and the end."""
        rv_param = query.get("resourceVersion", "")
        match = query.get("resourceVersionMatch", "")
        initial_param = query.get("sendInitialEvents")
        if initial_param is not None:
            if match != "NotOlderThan":
                raise _invalid_list_options(
                    "resourceVersionMatch",
                    "Forbidden",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                )
            if not self.watch_list:
                raise _invalid_list_options(
                    "sendInitialEvents",
                    "Forbidden",
                    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                )
        if match:
            if initial_param is None:
                raise _invalid_list_options(
                    "resourceVersionMatch",
                    "Forbidden",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                )
            if match != "NotOlderThan":
                raise _invalid_list_options(
                    "resourceVersionMatch", "Unsupported value", f'"{match}": supported values: "NotOlderThan"'
                )
        start: int | None = None
        if rv_param not in ("", "0"):
            try:
                start = int(rv_param)
                if start < 0:
                    raise ValueError(rv_param)
            except ValueError:
                raise _bad_request(f'resourceVersion: Invalid value: "{rv_param}": invalid resource version') from None
        w = _Watch(
            resource,
            namespace,
            LabelSelector.parse(query.get("labelSelector", "")),
            _field_selector_for(resource, query.get("fieldSelector", "")),
            _flag(query, "allowWatchBookmarks"),
        )
        send_initial = _flag(query, "sendInitialEvents") if initial_param is not None else start is None
        with self._lock:
            if initial_param is not None and start is not None:
                self._wait_for(start)
            if send_initial:
                # synthetic ADDED for the current state, as the watch cache does for RV "" / "0" and watch-lists
                for key in sorted(self._objects[resource]):
                    obj = self._objects[resource][key]
                    if w.matches(obj):
                        w.out.put(_line("ADDED", obj))
                if initial_param is not None and w.bookmarks:
                    mark = self._bookmark_object(resource)
                    mark["metadata"]["annotations"] = {INITIAL_EVENTS_END: "true"}
                    w.out.put(_line("BOOKMARK", mark))
            elif start is not None and initial_param is None:
                if start < self._compacted:
                    expired = ApiError(410, "Expired", f"too old resource version: {start} ({self._compacted})")
                    w.out.put(_line("ERROR", expired.status()))
                    w.out.put(_END)
                    return w
                for change in self._history:
                    if change.rv > start and change.resource == resource:
                        seen = w.event_for(change)
                        if seen is not None:
                            w.out.put(_line(*seen))
            self._watches.append(w)
        return w

    def record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def forget(self, w: _Watch) -> None:
        with self._lock:
            if w in self._watches:
                self._watches.remove(w)

    def authorized(self, header: str) -> bool:
        if self.token is None:
            return True
        scheme, _, value = header.partition(" ")
        return scheme.lower() == "bearer" and value.strip() == self.token


def _api_resources(served: list[Resource], group: str, version: str) -> list[Obj]:
    return [
        {
            "name": r.plural,
            "singularName": r.kind.lower(),
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(VERBS),
        }
        for r in served
        if (r.group, r.version) == (group, version)
    ]


def _api_group(group: str, versions: list[str]) -> Obj:
    """The first declared version is the preferred one."""
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": gvs, "preferredVersion": dict(gvs[0])}


# --- HTTP ---------------------------------------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 drops the SYNs of a feed's dozen reflectors (1 s retransmit)

    def __init__(self, cluster: ListWatchServer) -> None:
        super().__init__((ListWatchServer.host, 0), _Handler)
        self.cluster = cluster


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"  # keep-alive and chunked watch streams, like Go's net/http

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def setup(self) -> None:
        super().setup()
        with self.server.cluster._lock:
            self.server.cluster.connections += 1

    def _start(self, code: int, headers: dict[str, str]) -> None:
        """Status line and headers (JSON unless ``headers`` name a Content-Type), none of Python's ``Server``."""
        self.send_response_only(code)
        self.send_header("Date", formatdate(usegmt=True))
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("Cache-Control", "no-cache, private")
        for name, value in {"Content-Type": JSON, **headers}.items():
            self.send_header(name, value)
        self.end_headers()

    def _json(self, code: int, body: Obj) -> None:
        data = json.dumps(body, separators=(",", ":")).encode() + b"\n"
        self._start(code, {"Content-Length": str(len(data))})
        self.wfile.write(data)

    def _protobuf(self, code: int, body: Obj) -> None:
        """A list or Status in the envelope kube-apiserver writes; the message is named by the body's kind."""
        data = envelope(encode(body, body["kind"]), body["apiVersion"], body["kind"])
        self._start(code, {"Content-Type": PROTOBUF, "Content-Length": str(len(data))})
        self.wfile.write(data)

    def _handle(self) -> None:
        cluster = self.server.cluster
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        accept = self.headers.get("Accept", "")
        cluster.record(Request(self.command, url.path, query, accept))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            if not cluster.authorized(self.headers.get("Authorization", "")):
                raise ApiError(401, "Unauthorized", "Unauthorized")
            parts = [p for p in url.path.split("/") if p]
            if parts in (["api"], ["api", "v1"], ["apis"]) or (parts[:1] == ["apis"] and len(parts) in (2, 3)):
                self._only_get()
                self._json(200, cluster.discovery(parts))
                return
            binding = (
                len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"] and parts[4::2] == ["pods", "binding"]
            )
            if self.command == "POST" and binding:
                self._json(201, cluster.bind(parts[3], parts[5], body))
                return
            eviction = (
                len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"] and parts[4::2] == ["pods", "eviction"]
            )
            if self.command == "POST" and eviction:
                self._json(*cluster.evict(parts[3], parts[5], body, query))
                return
            if (
                len(parts) >= 7
                and parts[:3] == ["api", "v1", "namespaces"]
                and parts[4::2][:2] == ["services", "proxy"]
            ):
                self._proxy(parts[3], parts[5], "/" + "/".join(parts[7:]), url.query, body)
                return
            resource, namespace, name = cluster.route(parts)
            if self.command == "POST" and name is None and (namespace is not None or not resource.namespaced):
                self._json(201, cluster.create_object(resource, namespace, body))
                return
            if self.command == "PUT" and name is not None:
                self._json(200, cluster.update_object(resource, namespace, name, body))
                return
            if self.command == "PATCH" and name is not None:
                content_type = self.headers.get("Content-Type", "")
                self._json(200, cluster.patch_object(resource, namespace, name, content_type, body))
                return
            self._only_get()
            if name is not None:
                self._json(200, cluster.get_object(resource, namespace, name))
            elif _flag(query, "watch"):
                self._stream(cluster.open_watch(resource, namespace, query), query)
            else:
                media = _negotiate(accept, protobuf=resource.group == "")
                if media is None:
                    raise ApiError(
                        406, "NotAcceptable", f"only the following media types are accepted: {SERVED_MEDIA_TYPES}"
                    )
                page = cluster.list_page(resource, namespace, query)
                if cluster.delay_s:
                    time.sleep(cluster.delay_s)
                if media == PROTOBUF:
                    try:
                        self._protobuf(200, page)
                    except ValueError as exc:  # an object no apiserver could hold (its JSON is served as stored)
                        raise ApiError(
                            500,
                            "InternalError",
                            f"Internal error occurred: {exc}",
                            details={"causes": [{"message": str(exc)}]},
                        ) from None
                else:
                    self._json(200, page)
        except ApiError as err:
            if _negotiate(accept, protobuf=True) == PROTOBUF:
                self._protobuf(err.code, err.status())
            else:
                self._json(err.code, err.status())

    def _proxy(self, namespace: str, target: str, path: str, query: str, body: bytes) -> None:
        """The Service proxy subresource: ``services/[scheme:]NAME[:PORT]/proxy/PATH`` (kube-apiserver's
        ``SplitSchemeNamePort`` forms), forwarded as is (method, body and Content-Type) and answered with the
        service's own status and body. RBAC's verb is the request's, as the apiserver's ``RequestInfoFactory``
        names it for a subresource: GET get, POST create, PUT update, PATCH patch, DELETE delete."""
        cluster = self.server.cluster
        pieces = target.split(":")
        if len(pieces) > 3 or not pieces[-2 if len(pieces) == 3 else 0]:
            raise ApiError(400, "BadRequest", f"invalid service request {target!r}")
        name, port = pieces[-2:] if len(pieces) == 3 else (pieces[0], pieces[1] if len(pieces) == 2 else "")
        verb = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
            self.command, self.command.lower()
        )
        if cluster.forbid_proxy:
            raise ApiError(
                403,
                "Forbidden",
                f'services "{name}" is forbidden: User "test" cannot {verb} resource "services/proxy" in API group "" '
                f'in the namespace "{namespace}"',
                details={"name": name, "kind": "services"},
            )
        backend = cluster.services.get((namespace, name, port))
        if backend is None:
            raise ApiError(404, "NotFound", f'services "{name}" not found', details={"name": name, "kind": "services"})
        conn = http.client.HTTPConnection(*backend, timeout=30)
        try:
            headers = {"Content-Type": self.headers.get("Content-Type") or "application/octet-stream"} if body else {}
            conn.request(self.command, path + (f"?{query}" if query else ""), body or None, headers)
            answer = conn.getresponse()
            body = answer.read()
        finally:
            conn.close()
        kind = answer.getheader("Content-Type") or "application/octet-stream"
        self._start(answer.status, {"Content-Type": kind, "Content-Length": str(len(body))})
        self.wfile.write(body)

    def _only_get(self) -> None:
        if self.command != "GET":
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource", details={}
            )

    def _stream(self, w: _Watch, query: dict[str, str]) -> None:
        """Write queued events as chunks until the watch ends, times out, is dropped, or the client goes away."""
        cluster = self.server.cluster
        try:
            timeout = int(query.get("timeoutSeconds") or 0)
        except ValueError:
            timeout = 0
        deadline = time.monotonic() + timeout if timeout > 0 else None
        held: bytes | str | None = None
        try:
            self._start(200, {"Transfer-Encoding": "chunked"})
            while True:
                wait = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
                if wait <= 0:
                    break
                if held is not None:
                    item, held = held, None
                else:
                    try:
                        item = w.out.get(timeout=wait)
                    except queue.Empty:
                        if self._client_gone():
                            self.close_connection = True
                            return
                        continue
                if item == _END:
                    break
                if item == _DROP:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                assert isinstance(item, bytes)
                # Events already queued go out in one send, each still its own chunk: kube-apiserver's watch
                # loop flushes only when nothing more is waiting, so a backlog reaches clients in large writes.
                chunks = [b"%x\r\n%s\r\n" % (len(item), item)]
                while len(chunks) < COALESCE:
                    try:
                        more = w.out.get_nowait()
                    except queue.Empty:
                        break
                    if not isinstance(more, bytes):
                        held = more
                        break
                    chunks.append(b"%x\r\n%s\r\n" % (len(more), more))
                self.wfile.write(b"".join(chunks))
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
        finally:
            cluster.forget(w)

    def _client_gone(self) -> bool:
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            peeked: bytes = self.connection.recv(1, socket.MSG_PEEK)
        except OSError:
            return True
        return peeked == b""

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle
