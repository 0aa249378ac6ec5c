"""A list/watch stand-in for kube-apiserver on 127.0.0.1, driven by the test through Python calls.

A reflector is only as good as its handling of the server's corner cases: pages
that must stay consistent while objects change, continue tokens and watches
that outlive the history (410 Gone), bookmarks, selectors that objects move in
and out of, streams cut mid-way, a CRD that appears after start-up. A canned
fake cannot produce those in the right order, so this server keeps the real
model: one global resourceVersion counter (etcd's revision), the history of
every change since the last compaction, and the open watches. Answers have
kube-apiserver's shapes, status codes and messages (read from
``k8s.io/apiserver`` storage/etcd3, storage/cacher and endpoints, and from
structured-merge-diff for apply; see ``Choices`` below for what is
simplified), so a client that is right here is right against a cluster for
these calls.

Usage::

    with ListWatchServer([PODS, NODES], token="t") as server:
        server.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}})
        ...  # point the client at 127.0.0.1:server.port

Reads are GET (discovery, list, watch, get). Writes over HTTP are PATCH of
an object with a JSON merge patch (RFC 7386), what kilter's plan records
use, or by server-side apply (``application/apply-patch+yaml``), what its
AdmissionCheck controller writes Workload and AdmissionCheck status with;
POST to a collection (create: 409 AlreadyExists when the name is taken) and
PUT of an object (update: a ``metadata.resourceVersion`` in the body is a
precondition, 409 Conflict when stale), what the plan-key Secret uses. The
test itself writes through ``add``, ``update`` and ``delete``.

Authentication is the bearer token's, when the server is given one: a
request without a valid token is answered 401 with kube-apiserver's
``Status`` (reason ``Unauthorized``, message "Unauthorized"), before
anything else is looked at. ``rotate_token`` issues a new token and lets
the others expire, as a projected service-account token or an exec
plugin's expires; a watch already open keeps streaming, since the apiserver
authenticates a request only when it arrives. Served over HTTPS (``tls``), a
client certificate signed by ``client_ca`` authenticates too, as with
``--client-ca-file``; ``rotate_client_ca`` replaces that CA.

A resource declared with ``status=True`` has the status subresource:
``NAME/status`` answers GET, PUT and PATCH, its writes change only
``.status``, and writes to the object keep the stored status. Apply merges
as structured-merge-diff does (maps key by key, lists that ``LIST_TYPES``
names item by item, other lists whole), records each manager's fields in
``metadata.managedFields`` (FieldsV1), removes what a manager no longer
applies unless another owns it, answers 409 for a field another manager
owns and this apply changes (``force=true`` moves it instead), and creates
an absent object (201), though never through ``/status`` (404).

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
* PATCH takes ``application/merge-patch+json`` and
  ``application/apply-patch+yaml`` (kube-apiserver also takes JSON patch,
  strategic merge patch for built-in kinds, and CBOR apply); any other content
  type is 415 with the apiserver's message, whose list here names the merge
  patch only. A merge patch that is not JSON is 400. A ``metadata.resourceVersion`` in the patch is a
  precondition (409 Conflict when stale), a changed ``metadata.name`` is 400,
  and what the server owns (uid, creationTimestamp, kind, apiVersion) is kept.
  A patch that changes nothing writes nothing: same resourceVersion, no event,
  as etcd3's GuaranteedUpdate skips an unchanged object.
* PatchOptions are checked before the object is looked up, as patch.go does:
  apply without ``fieldManager``, or ``force`` on another patch, is 422
  Invalid (``PatchOptions.meta.k8s.io``); the manager name's length and
  characters are not checked, ``dryRun`` and ``fieldValidation`` not read.
* An apply body is YAML (JSON is YAML; 400 ``error decoding YAML``). Its
  apiVersion and kind must be the resource's (400 ``invalid object type``),
  ``metadata.managedFields`` absent (400), ``metadata.name`` the URL's (400),
  a ``metadata.resourceVersion`` in it is a precondition (409). An item of a
  keyed list without its keys, or a key twice, is the apiserver's 500
  ``failed to create typed patch object`` (the detail's wording approximated).
* Field sets are made without the CRD's schema: every map counts as a
  struct, every list as atomic unless ``LIST_TYPES`` names it (Kueue's from
  its v1beta2 CRDs: ``status.admissionChecks`` by name, whose
  ``podSetUpdates`` are atomic; ObjectMeta's ownerReferences and finalizers
  for every kind), so a ``map[string]object`` field's entries lack the
  ``"."`` member the apiserver would give them. A map or list that pruning
  empties is dropped (structured-merge-diff leaves null, which the apiserver
  prunes). No conversion between versions: one version per resource.
* Apply tracks managers as the apiserver does: Apply entries by manager and
  subresource (apiVersion, time, FieldsV1), prune, conflicts, ``force``, and
  the ``before-first-apply`` Update entry that an object without managedFields
  gets at its first apply. POST, PUT and merge PATCH track nobody: they keep
  the stored managedFields (a body's own decodable list replaces them, ``[]``
  clears them; through ``/status`` the stored ones stay), and the fields they
  change keep their owners, where the apiserver would hand them to the
  writer's Update entry; the cap of ten Update entries is not modelled. An
  apply that changes nothing, its managers included, writes nothing (the
  applier's ``time`` moves only when the object changes, as
  managedFieldsUpdater does).
* The status subresource is a CRD's for every resource declared with it:
  through ``/status`` only ``.status`` changes (spec and all metadata stay,
  where a core kind's status strategy lets some metadata through); through
  the object the stored status stays, a create (POST or apply) drops the
  given one, and apply ignores ``spec`` through ``/status`` and ``status``
  through the object (the reset fields: not merged, not owned). Discovery
  lists ``PLURAL/status``. ``metadata.generation`` is not kept.
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
import random
import re
import select
import socket
import ssl
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from kilter.kube.api import CERTS_AGENT, SERVER_AGENT
from tests.kube_protobuf import MEDIA_TYPE as PROTOBUF
from tests.kube_protobuf import encode, envelope

__all__ = [
    "APPLY_PATCH",
    "LEASES",
    "LIST_TYPES",
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
    status: bool = False
    """Served with the status subresource (a CRD's ``subresources: {status: {}}``, Kueue's Workload and
    AdmissionCheck): ``NAME/status`` answers GET, PUT and PATCH, writes through it change only ``.status``, and
    writes to the object itself keep the stored status. Declare it as ``Resource(..., status=True)``; off, the
    object's writes change everything they name, as for a CRD without the subresource."""

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
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
COMPUTE_DOMAINS = Resource("resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain", namespaced=True)
"""NVIDIA's DRA driver's CRD (``computedomains.resource.nvidia.com``), served as the apiserver serves a CRD."""


class Request(NamedTuple):
    """One request as the server saw it; ``query`` keeps the last value of each parameter, ``token`` the bearer
    token it presented ("" for none)."""

    method: str
    path: str
    query: dict[str, str]
    accept: str = ""
    token: str = ""


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
        }
        if self.reason:  # an error that is no StatusError (a plain Go error) answers 500 with no reason
            out["reason"] = self.reason
        if self.details is not None:
            out["details"] = self.details
        out["code"] = self.code
        return out


def _bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def _invalid_list_options(path: str, kind: str, detail: str) -> ApiError:
    """422 as ``errors.NewInvalid(ListOptions.meta.k8s.io)`` for ListOptions that fail validation."""
    return _invalid_options("ListOptions", path, kind, detail)


def _invalid_options(options: str, path: str, kind: str, detail: str) -> ApiError:
    """422 as ``errors.NewInvalid(<options>.meta.k8s.io)`` for request options (ListOptions, PatchOptions) that
    fail validation: one field error, ``kind`` its ``field.ErrorType`` as written."""
    cause_type = {
        "Forbidden": "FieldValueForbidden",
        "Unsupported value": "FieldValueNotSupported",
        "Required value": "FieldValueRequired",
    }[kind]
    text = f"{kind}: {detail}"
    return ApiError(
        422,
        "Invalid",
        f'{options}.meta.k8s.io "" is invalid: {path}: {text}',
        details={
            "group": "meta.k8s.io",
            "kind": options,
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


# --- server-side apply --------------------------------------------------------------------------------------------

APPLY_PATCH = "application/apply-patch+yaml"
BEFORE_FIRST_APPLY = "before-first-apply"
"""The Update manager an object without managedFields gets at its first apply, owning every field it had then
(``skipNonAppliedManager``): fields nobody applied are not free for the taking."""

PathElement = tuple[str, Any]
"""One step of a field path, as structured-merge-diff names it: ``("f", name)`` a field, ``("k", ((key, json),
...))`` an item of a ``listType=map`` list by its keys (sorted, values as JSON), ``("v", json)`` an item of a
``listType=set`` list, ``("i", n)`` an index (read, never made here)."""
FieldPath = tuple[PathElement, ...]
Lists = dict[tuple[str, ...], tuple[str, ...]]
"""A kind's list types by field path (list items are transparent: ``("status", "admissionChecks")``): the
``listMapKey`` names of a ``listType=map`` list, ``()`` for a ``listType=set`` list; a list not named is atomic."""

LIST_TYPES: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {
    ("", "*"): {"metadata.ownerReferences": ("uid",), "metadata.finalizers": ()},  # ObjectMeta, every kind
    ("kueue.x-k8s.io", "Workload"): {
        "spec.podSets": ("name",),
        "spec.preemptionGates": ("name",),
        "status.conditions": ("type",),
        "status.admission.podSetAssignments": ("name",),
        "status.admissionChecks": ("name",),  # its podSetUpdates are listType=atomic
        "status.preemptionGates": ("name",),
        "status.reclaimablePods": ("name",),
        "status.resourceRequests": ("name",),
        "status.schedulingStats.evictions": ("reason", "underlyingCause"),
        "status.unhealthyNodes": ("name",),
    },
    ("kueue.x-k8s.io", "AdmissionCheck"): {"status.conditions": ("type",)},
}
"""The ``x-kubernetes-list-type`` of the lists server-side apply merges by key, per (group, kind) and dotted
field path: ``listMapKey`` names for ``map``, ``()`` for ``set``; every other list is atomic (replaced whole, owned
as one field). Kueue's from its v1beta2 CRDs (``config/components/crd/bases``); add a kind's entries here when a
test applies to it."""

_STRIPPED: frozenset[FieldPath] = frozenset(
    [(("f", "apiVersion"),), (("f", "kind"),), (("f", "metadata"),)]
    + [
        (("f", "metadata"), ("f", name))
        for name in (
            "name",
            "namespace",
            "creationTimestamp",
            "selfLink",
            "uid",
            "clusterName",
            "generation",
            "managedFields",
            "resourceVersion",
        )
    ]
)
"""What no manager owns (``stripMetaManager``): exactly these paths, not what lies under them."""


class _ApplyYaml(yaml.SafeLoader):
    """YAML as sigs.k8s.io/yaml reads an apply body: through JSON, so a timestamp stays a string."""


_ApplyYaml.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _TypedError(Exception):
    """An object that does not fit its list types: structured-merge-diff's typed conversion refuses it."""


def _go_json(value: Any, *, sort_keys: bool = True) -> str:
    """Compact JSON as Go's encoding/json writes it (map keys sorted; ``<``, ``>``, ``&``, U+2028 and U+2029
    escaped): how a key value reads in fieldsV1 and how a manager's identity is spelled."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys)
    for raw, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, escaped)
    return text


def _lists(resource: Resource) -> Lists:
    table = {**LIST_TYPES[("", "*")], **LIST_TYPES.get((resource.group, resource.kind), {})}
    return {tuple(path.split(".")): keys for path, keys in table.items()}


def _element(item: Any, keys: tuple[str, ...], where: FieldPath, index: int, *, strict: bool) -> PathElement | None:
    """The path element of a ``map`` list's item (the key fields it has, sorted) or a ``set`` list's (its value). An
    item that cannot have one is refused (``strict``: an applied object, with structured-merge-diff's words) or has
    none (None: a stored object's item, kept as it is)."""
    problem = ""
    if keys and item is None:
        problem = "associative list with keys may not have a null element"
    elif keys and not isinstance(item, dict):
        problem = "associative list with keys may not have non-map elements"
    elif keys and not any(k in item for k in keys):
        problem = (
            "associative list with keys has an element that omits all key fields "
            f"[{' '.join(json.dumps(k) for k in keys)}] (and doesn't have default values for any key fields)"
        )
    elif not keys and isinstance(item, dict):
        problem = "associative list without keys has an element that's a map type"
    elif not keys and isinstance(item, list):
        problem = "not supported: associative list with lists as elements"
    elif not keys and item is None:
        problem = "associative list without keys has an element that's an explicit null"
    if problem:
        if strict:
            raise _TypedError(f"{_path_text(where)}: element {index}: {problem}")
        return None
    if not keys:
        return ("v", _go_json(item))
    return ("k", tuple((k, _go_json(item[k])) for k in sorted(keys) if k in item))


def _path_text(path: FieldPath) -> str:
    """``Path.String()``: ``.status.admissionChecks[name="x"].state``, ``.metadata.finalizers[="f"]``."""
    out: list[str] = []
    for kind, value in path:
        if kind == "f":
            out.append(f".{value}")
        elif kind == "k":
            out.append("[" + ",".join(f"{name}={v}" for name, v in value) + "]")  # JSON spells values as %q does
        elif kind == "v":
            out.append(f"[={value}]")
        else:
            out.append(f"[{value}]")
    return "".join(out)


def _element_text(pe: PathElement) -> str:
    """A path element as a fieldsV1 key: ``f:name``, ``k:{"name":"x"}``, ``v:"x"``, ``i:0``."""
    kind, value = pe
    if kind == "k":
        return "k:{" + ",".join(f"{_go_json(name)}:{v}" for name, v in value) + "}"
    return f"{kind}:{value}"


def _parse_element(text: str) -> PathElement | None:
    """A fieldsV1 key as a path element; None for a kind of element this reader does not know (skipped, as
    structured-merge-diff skips them). ValueError for one that is malformed."""
    kind, sep, rest = text.partition(":")
    if sep != ":" or len(kind) != 1:
        raise ValueError(f"missing colon: {text}")
    if kind == "f":
        return ("f", rest)
    if kind == "k":
        fields = json.loads(rest)
        if not isinstance(fields, dict):
            raise ValueError(f"not a key: {text}")
        return ("k", tuple((name, _go_json(fields[name])) for name in sorted(fields)))
    if kind == "v":
        return ("v", _go_json(json.loads(rest)))
    if kind == "i":
        return ("i", int(rest))
    return None


def _value_order(raw: str) -> tuple[int, Any]:
    value = json.loads(raw)
    if value is None:
        return (0, 0)
    if isinstance(value, bool):
        return (1, value)
    if isinstance(value, int | float):
        return (2, value)
    if isinstance(value, str):
        return (3, value)
    return (4, raw)


def _order(pe: PathElement) -> tuple[int, Any]:
    """``PathElement.Compare``: fields (by name) before keys before values before indexes."""
    kind, value = pe
    if kind == "f":
        return (0, value)
    if kind == "k":
        return (1, tuple((name, _value_order(v)) for name, v in value))
    if kind == "v":
        return (2, _value_order(value))
    return (3, value)


def _tree(paths: set[FieldPath]) -> dict[PathElement, Any]:
    root: dict[PathElement, Any] = {}
    for path in paths:
        node = root
        for pe in path:
            node = node.setdefault(pe, {})
    return root


def _fields_v1(paths: set[FieldPath]) -> Obj:
    """A field set in the FieldsV1 trie: a key per path element, ``{}`` under a member without children, ``".": {}``
    first under a member that has them, elements in structured-merge-diff's order."""

    def emit(node: dict[PathElement, Any], prefix: FieldPath) -> Obj:
        out: Obj = {}
        if prefix in paths and node:
            out["."] = {}
        for pe in sorted(node, key=_order):
            out[_element_text(pe)] = emit(node[pe], (*prefix, pe))
        return out

    return emit(_tree(paths), ())


def _parse_fields_v1(trie: Any, prefix: FieldPath = ()) -> set[FieldPath]:
    """The field set a FieldsV1 trie holds: a node is a member when it has ``"."`` or nothing under it."""
    if not isinstance(trie, dict):
        raise ValueError(f"fieldsV1 is not an object at {_path_text(prefix) or '.'}")
    out: set[FieldPath] = set()
    for text, sub in trie.items():
        if text == ".":
            continue
        pe = _parse_element(text)
        if pe is None:
            continue
        path = (*prefix, pe)
        below = _parse_fields_v1(sub, path)
        if not below or (isinstance(sub, dict) and "." in sub):
            out.add(path)
        out |= below
    return out


def _set_order(paths: set[FieldPath]) -> list[FieldPath]:
    """``Set.Iterate``'s order: a level's members first, then what lies under each of its children."""
    out: list[FieldPath] = []

    def walk(node: dict[PathElement, Any], prefix: FieldPath) -> None:
        ordered = sorted(node, key=_order)
        out.extend(path for path in ((*prefix, pe) for pe in ordered) if path in paths)
        for pe in ordered:
            walk(node[pe], (*prefix, pe))

    walk(_tree(paths), ())
    return out


def _field_set(
    value: Any, lists: Lists, *, strict: bool, at: tuple[str, ...] = (), path: FieldPath = ()
) -> set[FieldPath]:
    """``TypedValue.ToFieldSet``: scalars, nulls, empty maps, atomic lists and the items of map and set lists.
    Every map is taken for a struct (its non-empty fields are not members themselves), which differs from the
    schema only for a ``map[string]object`` field. ``strict``: an item without its keys or a key twice is a
    ``_TypedError`` (an applied object); else such items are passed over (a stored one)."""
    out: set[FieldPath] = set()
    if isinstance(value, dict):
        for key, child in value.items():
            child_path = (*path, ("f", key))
            out |= _field_set(child, lists, strict=strict, at=(*at, key), path=child_path)
            if child is None or child == {}:
                out.add(child_path)
        return out
    if isinstance(value, list):
        keys = lists.get(at)
        if keys is None:
            out.add(path)
            return out
        seen: set[PathElement] = set()
        for i, item in enumerate(value):
            pe = _element(item, keys, path, i, strict=strict)
            if pe is None:
                continue
            if pe in seen and strict:
                raise _TypedError(f"{_path_text(path)}: duplicate entries for key {_path_text((pe,))}")
            seen.add(pe)
            if keys:
                out |= _field_set(item, lists, strict=strict, at=at, path=(*path, pe))
            out.add((*path, pe))
        return out
    out.add(path)
    return out


def _named(paths: set[FieldPath]) -> set[FieldPath]:
    """``EnsureNamedFieldsAreMembers``: the set with every field (``f:``) that has members under it a member too."""
    out = set(paths)
    for path in paths:
        out.update(path[:i] for i in range(1, len(path)) if path[i - 1][0] == "f")
    return out


def _subtree(value: Any, lists: Lists, at: tuple[str, ...], path: FieldPath, out: set[FieldPath]) -> None:
    """Every node at and under ``path``: what a comparison counts as added (or removed) with a value that is new
    (or gone)."""
    out.add(path)
    if isinstance(value, dict):
        for key, child in value.items():
            _subtree(child, lists, (*at, key), (*path, ("f", key)), out)
    elif isinstance(value, list) and (keys := lists.get(at)) is not None:
        for i, item in enumerate(value):
            pe = _element(item, keys, path, i, strict=False)
            if pe is not None:
                _subtree(item, lists, at, (*path, pe), out)


@dataclass
class _Diff:
    """``typed.Comparison``: the fields a write added, changed and removed."""

    added: set[FieldPath] = field(default_factory=set)
    modified: set[FieldPath] = field(default_factory=set)
    removed: set[FieldPath] = field(default_factory=set)


def _compare(old: Any, new: Any, lists: Lists, diff: _Diff, at: tuple[str, ...] = (), path: FieldPath = ()) -> _Diff:
    """``TypedValue.Compare``: maps and map/set lists compared member by member, anything else as one leaf."""
    if isinstance(old, dict) and isinstance(new, dict) and (old or new):
        for key in {**old, **new}:
            child_at, child_path = (*at, key), (*path, ("f", key))
            if key not in new:
                _subtree(old[key], lists, child_at, child_path, diff.removed)
            elif key not in old:
                _subtree(new[key], lists, child_at, child_path, diff.added)
            else:
                _compare(old[key], new[key], lists, diff, child_at, child_path)
        return diff
    keys = lists.get(at)
    if isinstance(old, list) and isinstance(new, list) and keys is not None and (old or new):
        before = _items(old, keys, path)
        after = _items(new, keys, path)
        for pe in {**before, **after}:
            if pe not in after:
                _subtree(before[pe], lists, at, (*path, pe), diff.removed)
            elif pe not in before:
                _subtree(after[pe], lists, at, (*path, pe), diff.added)
            else:
                _compare(before[pe], after[pe], lists, diff, at, (*path, pe))
        return diff
    if not _identical(old, new):
        diff.modified.add(path)
    return diff


def _items(items: list[Any], keys: tuple[str, ...], path: FieldPath) -> dict[PathElement, Any]:
    out: dict[PathElement, Any] = {}
    for i, item in enumerate(items):
        pe = _element(item, keys, path, i, strict=False)
        if pe is not None:
            out.setdefault(pe, item)
    return out


def _identical(a: Any, b: Any) -> bool:
    """Equal as JSON values (``True`` is not ``1``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_identical(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _merge(live: Any, applied: Any, lists: Lists, at: tuple[str, ...] = (), path: FieldPath = ()) -> Any:
    """``TypedValue.Merge``: maps merged key by key, map and set lists item by item (an item the apply names
    merged into the stored one), anything else (scalars, atomic lists) the applied value."""
    if isinstance(live, dict) and isinstance(applied, dict):
        out = dict(live)
        for key, value in applied.items():
            child = (*at, key)
            out[key] = _merge(live[key], value, lists, child, (*path, ("f", key))) if key in live else value
        return out
    keys = lists.get(at)
    if isinstance(live, list) and isinstance(applied, list) and keys is not None and (live or applied):
        return _merge_items(live, applied, keys, lists, at, path)
    return applied


def _merge_items(
    live: list[Any], applied: list[Any], keys: tuple[str, ...], lists: Lists, at: tuple[str, ...], path: FieldPath
) -> list[Any]:
    """A map or set list merged in structured-merge-diff's order: one walk over both lists, a stored item the apply
    does not name written where the walk meets it, an applied item (merged into the stored one of its key) when the
    walk reaches it in the apply; a stored item the apply names later than the next one both share waits for it."""
    live_pes = [_element(item, keys, path, i, strict=False) or ("?", i) for i, item in enumerate(live)]
    stored: dict[PathElement, Any] = {}
    for live_pe, item in zip(live_pes, live, strict=True):
        stored[live_pe] = None if live_pe in stored else item  # a key stored twice merges as if absent
    applied_pes: list[PathElement] = []
    for index, item in enumerate(applied):
        applied_pe = _element(item, keys, path, index, strict=True)
        assert applied_pe is not None  # strict: a missing key raised
        applied_pes.append(applied_pe)
    named = set(applied_pes)
    shared = [pe for pe in applied_pes if pe in stored]  # keys in both, in the apply's order
    next_shared = 0
    written: set[PathElement] = set()
    out: list[Any] = []

    def merged(pe: PathElement, item: Any) -> Any:
        return _merge(stored[pe], item, lists, at, (*path, pe)) if keys and stored.get(pe) is not None else item

    li = ri = 0
    while li < len(live) or ri < len(applied):
        if li < len(live) and ri < len(applied):
            if live_pes[li] == applied_pes[ri]:
                written.add(applied_pes[ri])
                out.append(merged(applied_pes[ri], applied[ri]))
                li, ri, next_shared = li + 1, ri + 1, next_shared + 1
                continue
            upcoming = shared[next_shared] if next_shared < len(shared) else None
            if live_pes[li] in named and upcoming is not None and upcoming != live_pes[li]:
                li += 1  # named out of the stored order: written when the apply reaches it
                continue
        if li < len(live):
            if live_pes[li] not in named:
                out.append(live[li])
                li += 1
                continue
            if live_pes[li] in written:
                li += 1
        if ri < len(applied):
            written.add(applied_pes[ri])
            out.append(merged(applied_pes[ri], applied[ri]))
            if next_shared < len(shared) and shared[next_shared] == applied_pes[ri]:
                next_shared += 1
            ri += 1
    return out


_GONE = object()


def _remove(value: Any, doomed: set[FieldPath], lists: Lists, *, final: bool) -> Any:
    """``TypedValue.RemoveItems``: ``value`` without the fields and items in ``doomed``, each with all under it. A map
    or list emptied by it is null (as structured-merge-diff leaves it), or, ``final``, gone (as the apiserver
    prunes a null it has no schema for)."""
    inner = {path[:i] for path in doomed for i in range(1, len(path))}

    def walk(node: Any, at: tuple[str, ...], path: FieldPath) -> Any:
        if isinstance(node, dict):
            kept: Obj = {}
            for key, child in node.items():
                child_path = (*path, ("f", key))
                if child_path in doomed:
                    continue
                if child_path in inner:
                    child = walk(child, (*at, key), child_path)
                    if child is _GONE:
                        continue
                kept[key] = child
            return kept if kept or not node else (_GONE if final else None)
        keys = lists.get(at)
        if isinstance(node, list) and keys is not None and node:
            items: list[Any] = []
            for i, item in enumerate(node):
                pe = _element(item, keys, path, i, strict=False)
                if pe is not None and (*path, pe) in doomed:
                    continue
                if pe is not None and (*path, pe) in inner:
                    item = walk(item, at, (*path, pe))
                    if item is _GONE:
                        continue
                items.append(item)
            return items if items else (_GONE if final else None)
        return node

    return walk(value, (), ())


def _prune(merged: Obj, managers: dict[str, _Manager], last: set[FieldPath], lists: Lists) -> Obj:
    """``Updater.prune``: what the applier owned at its last apply and no longer applies, and nobody else owns,
    leaves the object (with all under it); fields nobody owns (``addBackDanglingItems``) and those another manager
    owns (``addBackOwnedItems``) stay. ``managers`` already holds the applier's new set."""

    def fields(value: Any) -> set[FieldPath]:
        return _named(_field_set(value, lists, strict=False))

    last_named = _named(last)
    owned = _named(set().union(*(m.fields for m in managers.values())))
    merged_fields = fields(merged)
    pruned = _remove(merged, last_named, lists, final=False)
    pruned = _remove(merged, merged_fields - (fields(pruned) | owned), lists, final=False)
    result: Obj = _remove(merged, (merged_fields - fields(pruned)) & last_named, lists, final=True)
    return result


def _without(paths: set[FieldPath], ignored: FieldPath | None) -> set[FieldPath]:
    """``paths`` without what no manager owns (``_STRIPPED``) and without the endpoint's reset fields (``spec``
    through /status, ``status`` through the object of a resource with the subresource) and all under them."""
    return {p for p in paths if p not in _STRIPPED and not (ignored is not None and p[: len(ignored)] == ignored)}


@dataclass
class _Manager:
    """One managedFields entry: who wrote which fields, through which operation and endpoint."""

    manager: str
    operation: str  # "Apply" or "Update"
    api_version: str
    subresource: str
    time: str | None
    fields: set[FieldPath]

    @property
    def identity(self) -> str:
        """``BuildManagerIdentifier``: the entry as JSON without fields and time (nor apiVersion, for Apply)."""
        entry: Obj = {"manager": self.manager, "operation": self.operation}
        if self.operation != "Apply":
            entry["apiVersion"] = self.api_version
        if self.subresource:
            entry["subresource"] = self.subresource
        return _go_json(entry, sort_keys=False)

    def shown(self) -> str:
        """``printManager``: how a conflict names the manager."""
        text = json.dumps(self.manager, ensure_ascii=False)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource, ensure_ascii=False)}"
        if self.operation == "Update":
            text += f" using {self.api_version}" + (f" at {self.time}" if self.time else "")
        return text

    def entry(self) -> Obj:
        out: Obj = {"manager": self.manager, "operation": self.operation, "apiVersion": self.api_version}
        if self.time:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = _fields_v1(self.fields)
        if self.subresource:
            out["subresource"] = self.subresource
        return out


def _decode_managers(entries: Any) -> dict[str, _Manager]:
    """``DecodeManagedFields``: the stored entries by manager identity (a later entry of one identity wins)."""
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise ValueError("metadata.managedFields is not a list")
    out: dict[str, _Manager] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"managed fields entry {i} is not an object")
        if entry.get("operation") not in ("Apply", "Update"):
            raise ValueError("operation must be `Apply` or `Update`")
        if not entry.get("apiVersion"):
            raise ValueError("apiVersion must not be empty")
        kind = entry.get("fieldsType") or ""
        if kind != "FieldsV1":
            raise ValueError(
                f"missing fieldsType in managed fields entry {i}"
                if not kind
                else f'invalid fieldsType "{kind}" in managed fields entry {i}'
            )
        manager = _Manager(
            str(entry.get("manager") or ""),
            str(entry["operation"]),
            str(entry["apiVersion"]),
            str(entry.get("subresource") or ""),
            entry.get("time") if isinstance(entry.get("time"), str) else None,
            _parse_fields_v1(entry.get("fieldsV1") or {}),
        )
        out[manager.identity] = manager
    return out


def _unix(stamp: str | None) -> int:
    try:
        return int(datetime.strptime(stamp or "", "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
    except ValueError:
        return 0


def _encode_managers(managers: dict[str, _Manager]) -> list[Obj]:
    """``encodeManagedFields``: one entry per manager that owns anything, sorted by operation, time (seconds),
    manager, apiVersion and subresource."""
    entries = [m.entry() for m in managers.values() if m.fields]
    entries.sort(
        key=lambda e: (e["operation"], _unix(e.get("time")), e["manager"], e["apiVersion"], e.get("subresource", ""))
    )
    return entries


def _kept_managed_fields(new_meta: Obj, prev_meta: Obj) -> None:
    """An update's managedFields, as ``decodeLiveOrNew`` picks them: the written ones when they decode to any
    entry, none when the write resets them (``[]`` or ``[{}]``), else the stored ones, so a writer that does not
    know of them (most) keeps them."""
    given = new_meta.get("managedFields")
    if isinstance(given, list) and given in ([], [{}]):
        new_meta.pop("managedFields", None)
        return
    try:
        if _decode_managers(given):
            return
    except ValueError:
        pass
    if "managedFields" in prev_meta:
        new_meta["managedFields"] = copy.deepcopy(prev_meta["managedFields"])
    else:
        new_meta.pop("managedFields", None)


def _status_strategy(resource: Resource, subresource: str, new: Obj, prev: Obj) -> Obj:
    """What an update keeps of ``new`` when the resource has the status subresource: through ``/status`` only its
    status (the rest, managedFields included, is the stored object's: the CRD status strategy's
    PrepareForUpdate); through the object itself all but the status (the stored one stays)."""
    if subresource == "status":
        kept = copy.deepcopy(prev)
        if "status" in new:
            kept["status"] = new["status"]
        else:
            kept.pop("status", None)
        return kept
    if resource.status:
        if "status" in prev:
            new["status"] = copy.deepcopy(prev["status"])
        else:
            new.pop("status", None)
    return new


MAX_NOMINATED = 20


def _validate_schema(resource: Resource, name: str, new: Obj, prev: Obj | None) -> None:
    """What a CRD's schema and CEL rules refuse (422 Invalid), for the rules a test relies on: Kueue v1beta2
    Workload status's ``nominatedClusterNames`` (``MaxItems=20``, items ``MaxLength=256``) and its two
    ``XValidation`` rules, "clusterName is immutable once set" and "clusterName and nominatedClusterNames are
    mutually exclusive" (``apis/kueue/v1beta2/workload_types.go``)."""
    if (resource.group, resource.kind) != ("kueue.x-k8s.io", "Workload"):
        return
    status = new.get("status") or {}
    old = (prev or {}).get("status") or {}
    causes = []
    nominated = status.get("nominatedClusterNames") or []
    if len(nominated) > MAX_NOMINATED:
        causes.append(
            f"status.nominatedClusterNames: Too many: {len(nominated)}: must have at most {MAX_NOMINATED} items"
        )
    if any(not isinstance(n, str) or len(n) > 256 for n in nominated):
        causes.append("status.nominatedClusterNames: Too long: may not be more than 256 bytes")
    if old.get("clusterName") and status.get("clusterName") and old["clusterName"] != status["clusterName"]:
        causes.append('status: Invalid value: "object": clusterName is immutable once set')
    if status.get("clusterName") and nominated:
        causes.append('status: Invalid value: "object": clusterName and nominatedClusterNames are mutually exclusive')
    if causes:
        raise ApiError(422, "Invalid", f'Workload.kueue.x-k8s.io "{name}" is invalid: [{", ".join(causes)}]')


def _apply_config(body: bytes) -> Obj:
    """The applied object: YAML (JSON is YAML), a mapping; 400 ``error decoding YAML`` otherwise."""
    try:
        config = json.loads(body)
    except ValueError:
        try:
            config = yaml.load(body, Loader=_ApplyYaml)  # a SafeLoader, less timestamps
        except yaml.YAMLError as exc:
            raise _bad_request(f"error decoding YAML: {exc}") from None
    if config is None:
        return {}
    if not isinstance(config, dict):
        go_type = {list: "array", str: "string", bool: "bool"}.get(type(config), "number")
        raise _bad_request(
            "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal "
            f"{go_type} into Go value of type map[string]interface {{}}"
        )
    normal: Obj = json.loads(json.dumps(config, default=str))  # keys as strings, as the YAML-to-JSON step makes them
    return normal


def _gvk_text(api_version: Any, kind: Any) -> str:
    """``GroupVersionKind.String()`` of an applied object's apiVersion and kind, as ``Unstructured`` reads them."""
    version = api_version if isinstance(api_version, str) else ""
    name = kind if isinstance(kind, str) else ""
    if version.count("/") > 1:
        return "/, Kind="  # ParseGroupVersion fails: the whole GroupVersionKind is empty
    group, _, version = version.rpartition("/")
    return f"{group}/{version}, Kind={name}"


def _apply_conflict(conflicts: dict[str, set[FieldPath]], managers: dict[str, _Manager]) -> ApiError:
    """409 as ``NewConflictError``: one cause per field, the message grouped by manager (sorted by identity)."""
    listed = [(ident, path) for ident in sorted(conflicts) for path in _set_order(conflicts[ident])]
    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {managers[i].shown()}", "field": _path_text(p)}
        for i, p in listed
    ]
    if len(listed) == 1:
        ident, path = listed[0]
        message = f"Apply failed with 1 conflict: conflict with {managers[ident].shown()}: {_path_text(path)}"
    else:
        lines: list[str] = []
        for ident in sorted(conflicts):
            lines.append(f"conflicts with {managers[ident].shown()}:")
            lines.extend(f"- {_path_text(p)}" for p in _set_order(conflicts[ident]))
        message = f"Apply failed with {len(listed)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, details={"causes": causes})


class ListWatchServer:
    """The cluster a test drives: objects, the revision counter, history, and the HTTP server that exposes them."""

    host = "127.0.0.1"

    def __init__(
        self,
        resources: list[Resource],
        *,
        token: str | None = None,
        host: str = "127.0.0.1",
        tls: tuple[Path, Path] | None = None,
        client_ca: bytes | None = None,
    ) -> None:
        self.host = host  # another address (a bridge's) for clients in network namespaces a test makes
        self.resources = list(resources)
        self.token = token  # the token issued last; None: every request is taken, with or without a token
        self._tokens: set[str] = {token} if token is not None else set()  # the tokens that authenticate now
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
        # HTTPS with the serving pair ``tls``; ``client_ca`` (PEM) signs the client certificates that authenticate
        self.tls_context: ssl.SSLContext | None = None
        self._client_cas: list[x509.Certificate] = []
        if tls is not None:
            self.tls_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls_context.load_cert_chain(*tls)
            if client_ca is not None:
                self.tls_context.verify_mode = ssl.CERT_OPTIONAL
                self.rotate_client_ca(client_ca)
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
        """Replace an existing object, status included (uid, creationTimestamp and managedFields kept if absent);
        watches see MODIFIED."""
        with self._lock:
            resource, stored = self._prepare(obj)
            key = _key(stored, resource)
            prev = self._objects[resource].get(key)
            if prev is None:
                raise KeyError(f"{resource.qualified} {key!r} not found")
            meta = stored["metadata"]
            meta.setdefault("uid", prev["metadata"].get("uid"))
            meta.setdefault("creationTimestamp", prev["metadata"].get("creationTimestamp"))
            if "managedFields" in prev["metadata"]:
                meta.setdefault("managedFields", copy.deepcopy(prev["metadata"]["managedFields"]))
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

    def route(self, parts: list[str]) -> tuple[Resource, str | None, str | None, str]:
        """(resource, namespace, name, subresource) for a resource path; 404 for anything not served (yet), a
        subresource included: only ``status``, of a resource declared with it."""
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", NOT_FOUND)
        namespace: str | None = None
        if len(rest) in (3, 4, 5) and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        subresource = ""
        if len(rest) == 3:
            subresource, rest = rest[2], rest[:2]
        if len(rest) not in (1, 2):
            raise ApiError(404, "NotFound", NOT_FOUND)
        with self._lock:
            for r in self.resources:
                if (r.group, r.version, r.plural) == (group, version, rest[0]) and self.is_installed(r):
                    if (namespace is not None and not r.namespaced) or (
                        namespace is None and r.namespaced and len(rest) == 2
                    ):
                        break
                    if subresource and not (subresource == "status" and r.status):
                        break
                    return r, namespace, rest[1] if len(rest) == 2 else None, subresource
        raise ApiError(404, "NotFound", NOT_FOUND)

    def list_objects(self, resource: Resource) -> list[Obj]:
        """Every stored object of ``resource`` (copies), as a test's controller stand-in reads them."""
        with self._lock:
            return [copy.deepcopy(o) for o in self._objects[resource].values()]

    def find_object(self, resource: Resource, namespace: str | None, name: str) -> Obj | None:
        """``get_object``, or None when there is none."""
        try:
            return self.get_object(resource, namespace, name)
        except ApiError:
            return None

    def get_object(self, resource: Resource, namespace: str | None, name: str) -> Obj:
        with self._lock:
            key = f"{namespace or ''}/{name}" if resource.namespaced else name
            obj = self._objects[resource].get(key)
        if obj is None:
            raise _not_found(resource, name)
        return copy.deepcopy(obj)

    def create_object(self, resource: Resource, namespace: str | None, body: bytes) -> Obj:
        """POST to a collection, as the apiserver's create: the stored object (uid, resourceVersion and
        creationTimestamp the server's; no status where the resource has the status subresource, as a CRD's
        PrepareForCreate drops it), ADDED to watchers; 409 AlreadyExists when the name is taken."""
        obj = _written_object(resource, namespace, body)
        meta = obj["metadata"]
        name = meta.get("name")
        prefix = meta.get("generateName")
        if not name and isinstance(prefix, str) and prefix:  # names.SimpleNameGenerator: 5 random characters
            name = meta["name"] = prefix[:58] + "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))
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
        if resource.status:
            obj.pop("status", None)
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

    def update_object(
        self, resource: Resource, namespace: str | None, name: str, body: bytes, *, subresource: str = ""
    ) -> Obj:
        """PUT of an object (or of its ``/status``), as the apiserver's update: a resourceVersion in the body must be
        the stored one (409 Conflict otherwise, one writer of several wins); the stored object, MODIFIED to
        watchers. Through ``/status`` only the status changes, through the object all but the status (when the
        resource has the subresource); managedFields are kept unless the body carries its own."""
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
            _kept_managed_fields(meta, prev["metadata"])
            obj = _status_strategy(resource, subresource, obj, prev)
            _validate_schema(resource, name, obj, prev)
            if obj == prev:
                return copy.deepcopy(prev)
            self._commit(resource, key, "MODIFIED", obj, prev)
            return copy.deepcopy(obj)

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        content_type: str,
        body: bytes,
        query: dict[str, str],
        *,
        subresource: str = "",
    ) -> tuple[int, Obj]:
        """PATCH of an object (or of its ``/status``), as patch.go takes it: the content type (415 for one this
        server does not take), then PatchOptions (422: ``fieldManager`` is required for apply, ``force`` allowed
        only there), then the patch. Returns (code, object): 201 when an apply created it."""
        media = content_type.split(";", 1)[0].strip().lower()  # parameters (charset) are ignored, as patch.go does
        if media not in (MERGE_PATCH, APPLY_PATCH):
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                f"{MERGE_PATCH}, {APPLY_PATCH}",
            )
        if media == APPLY_PATCH and not query.get("fieldManager"):
            raise _invalid_options("PatchOptions", "fieldManager", "Required value", "is required for apply patch")
        if media != APPLY_PATCH and "force" in query:
            raise _invalid_options("PatchOptions", "force", "Forbidden", "may not be specified for non-apply patch")
        if media == APPLY_PATCH:
            return self.apply_object(
                resource,
                namespace,
                name,
                body,
                query["fieldManager"],
                force=_flag(query, "force"),
                subresource=subresource,
            )
        return 200, self.patch_object(resource, namespace, name, body, subresource=subresource)

    def patch_object(
        self, resource: Resource, namespace: str | None, name: str, body: bytes, *, subresource: str = ""
    ) -> Obj:
        """PATCH with a JSON merge patch (``patch`` checked the content type): the stored object merged, a new
        resourceVersion, MODIFIED to watchers. Through ``/status`` only the status changes, through the object all
        but the status (when the resource has the subresource); managedFields are kept unless the patch sets them."""
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
            _kept_managed_fields(meta, prev["metadata"])
            patched = _status_strategy(resource, subresource, patched, prev)
            _validate_schema(resource, name, patched, prev)
            if patched == prev:
                return copy.deepcopy(prev)
            self._commit(resource, key, "MODIFIED", patched, prev)
            return copy.deepcopy(patched)

    def apply_object(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: bytes,
        manager: str,
        *,
        force: bool = False,
        subresource: str = "",
    ) -> tuple[int, Obj]:
        """Server-side apply (``PATCH`` as ``application/apply-patch+yaml``) as the apiserver's applyPatcher and
        field manager do it: the applied object merged into the stored one by structured-merge-diff's rules, what
        this manager applied last time and no longer applies removed (unless another manager owns it), the
        managers' field sets kept in ``metadata.managedFields``. A field another manager owns and this apply
        changes is a 409 conflict, unless ``force`` (then it changes owner). The object absent: created (201),
        but through ``/status`` 404. Returns (code, object)."""
        with self._lock:
            key = f"{namespace or ''}/{name}" if resource.namespaced else name
            prev = self._objects[resource].get(key)
            if prev is None and subresource:
                raise _not_found(resource, name)  # a subresource never creates (StatusREST.Update)
            config = _apply_config(body)
            if (config.get("apiVersion"), config.get("kind")) != (resource.group_version, resource.kind):
                raise _bad_request(f"invalid object type: {_gvk_text(config.get('apiVersion'), config.get('kind'))}")
            applied_meta = config.get("metadata")
            if isinstance(applied_meta, dict) and isinstance(applied_meta.get("managedFields"), list):
                raise _bad_request("metadata.managedFields must be nil")
            ignored: FieldPath | None = None  # the endpoint's reset fields (GetResetFields)
            if subresource == "status":
                ignored = (("f", "spec"),)
            elif resource.status:
                ignored = (("f", "status"),)
            applied = {k: v for k, v in config.items() if ignored is None or k != ignored[0][1]}
            if isinstance(applied_meta, dict):
                applied["metadata"] = {k: v for k, v in applied_meta.items() if k != "managedFields"}
            lists = _lists(resource)
            try:
                wanted = _field_set(applied, lists, strict=True)
            except _TypedError as exc:
                names = applied_meta if isinstance(applied_meta, dict) else {}
                gvk = f"{resource.group}/{resource.version}, Kind={resource.kind}"
                raise ApiError(
                    500,
                    "",
                    f"failed to create typed patch object ({names.get('namespace') or ''}/{names.get('name') or ''}; "
                    f"{gvk}): {exc}",
                ) from None
            live: Obj = copy.deepcopy(prev) if prev is not None else {}
            live.update({"apiVersion": resource.group_version, "kind": resource.kind})
            try:
                managers = _decode_managers(live.get("metadata", {}).pop("managedFields", None))
            except ValueError as exc:
                raise ApiError(500, "", f"failed to decode managed fields: {exc}") from None
            now = _now()
            if not managers:  # tracking starts now: what the object holds is the before-first-apply manager's
                before = _compare({"apiVersion": resource.group_version, "kind": resource.kind}, live, lists, _Diff())
                first = _Manager(
                    BEFORE_FIRST_APPLY,
                    "Update",
                    resource.group_version,
                    subresource,
                    now,
                    _without(before.added, ignored),
                )
                if first.fields:
                    managers[first.identity] = first
            me = _Manager(manager, "Apply", resource.group_version, subresource, None, _without(wanted, ignored))
            last = managers.get(me.identity)
            if last is not None:
                me.time = last.time
            managers[me.identity] = me
            new = _merge(live, applied, lists)
            if last is not None and last.fields:
                new = _prune(new, managers, last.fields, lists)
            diff = _compare(live, new, lists, _Diff())
            changed = _without(diff.added | diff.modified, ignored)
            conflicts = {
                ident: m.fields & changed
                for ident, m in managers.items()
                if ident != me.identity and m.fields & changed
            }
            if conflicts and not force:
                raise _apply_conflict(conflicts, managers)
            gone = _without(diff.removed, ignored)
            for ident, m in managers.items():
                if ident != me.identity:
                    m.fields -= conflicts.get(ident, set()) | gone
            new_meta = new.setdefault("metadata", {})
            if not isinstance(new_meta, dict):
                raise _bad_request("the applied object's metadata is not an object")
            if prev is None:
                for system in (
                    "creationTimestamp",
                    "uid",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "selfLink",
                ):
                    new_meta.pop(system, None)  # WipeObjectMetaSystemFields
            if resource.namespaced:
                if new_meta.get("namespace") not in (None, "", namespace):
                    raise _bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request"
                    )
                new_meta["namespace"] = namespace
            else:
                new_meta.pop("namespace", None)
            if new_meta.get("name") != name:
                raise _bad_request(
                    f"the name of the object ({new_meta.get('name') or ''}) does not match the name on the URL ({name})"
                )
            wanted_rv = applied_meta.get("resourceVersion") if isinstance(applied_meta, dict) else None
            if prev is not None and wanted_rv and wanted_rv != prev["metadata"].get("resourceVersion"):
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource.qualified} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                    details=_details(resource, name),
                )
            if prev is None:
                new_meta.pop("resourceVersion", None)
                new_meta["uid"] = str(uuid.uuid4())
                new_meta["creationTimestamp"] = now
            else:
                for owned in ("uid", "creationTimestamp", "resourceVersion"):
                    if owned in prev["metadata"]:
                        new_meta[owned] = prev["metadata"][owned]
                    else:
                        new_meta.pop(owned, None)
                new = _status_strategy(resource, subresource, new, prev)
                _validate_schema(resource, name, new, prev)
                new["metadata"].pop("managedFields", None)
            if prev is None or not _identical(new, live):
                me.time = now  # managedFieldsUpdater: the applier's time moves only when the object changed
            entries = _encode_managers(managers)
            if entries:
                new["metadata"]["managedFields"] = entries
            if prev is not None and _identical(new, prev):
                return 200, copy.deepcopy(prev)  # nothing changed, managers included: nothing written
            self._commit(resource, key, "ADDED" if prev is None else "MODIFIED", new, prev)
            return (201 if prev is None else 200), copy.deepcopy(new)

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

    def rotate_token(self, new: str) -> None:
        """Issue ``new`` and let every other token expire: from now on a request that presents an old one is
        answered 401 Unauthorized (a ``Status``), as kube-apiserver refuses a projected service-account token past
        its expiry or an exec plugin's token past its life. Watches already open keep streaming: the apiserver
        authenticates a request once, when it arrives, and never looks at a running watch's token again."""
        with self._lock:
            self.token = new
            self._tokens = {new}

    def accept_token(self, token: str) -> None:
        """Issue ``token`` beside those already valid (a kubelet's new token, while the old one lives on)."""
        with self._lock:
            self.token = token
            self._tokens.add(token)

    def rotate_client_ca(self, pem: bytes) -> None:
        """Take client certificates signed by the CA ``pem`` from now on, and no longer those of the CA before, as
        kube-apiserver does when its ``--client-ca-file`` changes: a request with an older certificate is answered
        401. (The apiserver asks for a certificate at the handshake and verifies it per request, so a stale one
        is a 401; Python's ssl can only verify at the handshake, so every CA ever given stays trusted there and
        the request is judged against the current one.)"""
        assert self.tls_context is not None
        self.tls_context.load_verify_locations(cadata=pem.decode())
        with self._lock:
            self._client_cas = x509.load_pem_x509_certificates(pem)

    def authorized(self, header: str, peer: bytes | None = None) -> bool:
        """Whether the request authenticates: by the ``Authorization`` value's token, valid now, or by ``peer``,
        the client certificate (DER), signed by the current client CA. Without any token or client CA, every
        request is taken."""
        with self._lock:
            if self.token is None and not self._client_cas:
                return True
            if peer is not None and any(_signed_by(peer, ca) for ca in self._client_cas):
                return True
            return _bearer(header) in self._tokens


def _signed_by(der: bytes, ca: x509.Certificate) -> bool:
    """Whether the certificate ``der`` was issued by ``ca`` (name and signature; the handshake checked dates)."""
    try:
        x509.load_der_x509_certificate(der).verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _bearer(header: str) -> str:
    """The token of an ``Authorization: Bearer`` value; "" for none or another scheme."""
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def _api_resources(served: list[Resource], group: str, version: str) -> list[Obj]:
    """The resources of one group version, each followed by its ``PLURAL/status`` when it has that subresource."""
    out: list[Obj] = []
    for r in served:
        if (r.group, r.version) != (group, version):
            continue
        out.append(
            {
                "name": r.plural,
                "singularName": r.kind.lower(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": list(VERBS),
            }
        )
        if r.status:
            out.append(
                {
                    "name": f"{r.plural}/status",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return out


def _api_group(group: str, versions: list[str]) -> Obj:
    """The first declared version is the preferred one."""
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": gvs, "preferredVersion": dict(gvs[0])}


# --- HTTP ---------------------------------------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 drops the SYNs of a feed's dozen reflectors (1 s retransmit)

    def __init__(self, cluster: ListWatchServer) -> None:
        super().__init__((cluster.host, 0), _Handler)
        self.cluster = cluster

    def get_request(self) -> tuple[Any, Any]:
        """The accepted connection, wrapped for TLS when the server serves HTTPS (its handshake runs on the
        handler's thread, so that a slow client does not hold up the others)."""
        sock, address = super().get_request()
        context = self.cluster.tls_context
        if context is not None:
            sock = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address


KILTER_CALLS: list[tuple[str, str, str]] = []
"""(User-Agent, method, path with query) of every request the code of ``kilter serve`` (``SERVER_AGENT``) or
``kilter certs`` (``CERTS_AGENT``) made to any server of this session, told apart from the tests' own calls by
that header: what tests/config/test_rbac_proof.py holds the RBAC of the overlays to."""


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"  # keep-alive and chunked watch streams, like Go's net/http

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def setup(self) -> None:
        self.peer: bytes | None = None  # the client certificate (DER) of a TLS connection, if it gave one
        self.handshake_failed = False
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10)
            try:
                self.request.do_handshake()
                self.peer = self.request.getpeercert(binary_form=True)
            except (ssl.SSLError, OSError):
                self.handshake_failed = True
            self.request.settimeout(None)
        super().setup()
        with self.server.cluster._lock:
            self.server.cluster.connections += 1

    def handle(self) -> None:
        if not self.handshake_failed:
            super().handle()

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
        cluster.record(Request(self.command, url.path, query, accept, _bearer(self.headers.get("Authorization", ""))))
        agent = self.headers.get("User-Agent", "")
        if agent in (SERVER_AGENT, CERTS_AGENT):
            KILTER_CALLS.append((agent, self.command, self.path))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            if not cluster.authorized(self.headers.get("Authorization", ""), self.peer):
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
            resource, namespace, name, subresource = cluster.route(parts)
            if self.command == "POST" and name is None and (namespace is not None or not resource.namespaced):
                self._json(201, cluster.create_object(resource, namespace, body))
                return
            if self.command == "PUT" and name is not None:
                self._json(200, cluster.update_object(resource, namespace, name, body, subresource=subresource))
                return
            if self.command == "PATCH" and name is not None:
                content_type = self.headers.get("Content-Type", "")
                self._json(
                    *cluster.patch(resource, namespace, name, content_type, body, query, subresource=subresource)
                )
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
        if isinstance(self.connection, ssl.SSLSocket):
            return True  # a TLS record cannot be peeked at; during a watch a client sends nothing but its close
        try:
            peeked: bytes = self.connection.recv(1, socket.MSG_PEEK)
        except OSError:
            return True
        return peeked == b""

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle
