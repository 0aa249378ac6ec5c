"""AdmissionReview v1 as kube-apiserver sends it and reads the answer back.

The answer must echo the request's ``uid`` and say exactly
``admission.k8s.io/v1`` / ``AdmissionReview``; a mutation is a JSON Patch
(RFC 6902) sent base64-encoded with ``patchType: JSONPatch``; a denial
carries a ``metav1.Status`` whose code is 4xx. The object's kind comes from
the request, so one path serves every kind.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

__all__ = [
    "ADMISSION_V1",
    "AdmissionRequest",
    "AdmissionReview",
    "Verdict",
    "answer",
    "json_pointer",
]

ADMISSION_V1 = "admission.k8s.io/v1"


class GroupVersionKind(msgspec.Struct):
    group: str = ""
    version: str = ""
    kind: str = ""


class GroupVersionResource(msgspec.Struct):
    group: str = ""
    version: str = ""
    resource: str = ""


class UserInfo(msgspec.Struct):
    username: str = ""
    uid: str = ""
    groups: list[str] | None = None


class AdmissionRequest(msgspec.Struct, rename="camel"):
    uid: str
    kind: GroupVersionKind
    operation: str
    resource: GroupVersionResource = msgspec.field(default_factory=GroupVersionResource)
    sub_resource: str = ""
    name: str = ""
    namespace: str = ""
    user_info: UserInfo = msgspec.field(default_factory=UserInfo)
    object: Any = None
    old_object: Any = None
    dry_run: bool | None = None


class AdmissionReview(msgspec.Struct, rename="camel"):
    api_version: str
    kind: str
    request: AdmissionRequest | None = None


@dataclass
class Verdict:
    """What a webhook decided: allow (with an optional patch and warnings) or deny with a reason."""

    allowed: bool = True
    message: str = ""
    code: int = 403
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def answer(uid: str, verdict: Verdict, *, mutating: bool) -> bytes:
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        code = verdict.code if 400 <= verdict.code < 500 else 400
        reason = {400: "BadRequest", 403: "Forbidden", 422: "Invalid"}.get(code, "BadRequest")
        response["status"] = {"code": code, "reason": reason, "message": verdict.message}
    elif mutating and verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(msgspec.json.encode(verdict.patch)).decode()
    if verdict.warnings:
        response["warnings"] = verdict.warnings
    return msgspec.json.encode({"apiVersion": ADMISSION_V1, "kind": "AdmissionReview", "response": response})


def json_pointer(parts: Sequence[str | int]) -> str:
    """RFC 6901: ``~`` and ``/`` inside a key become ``~0`` and ``~1``."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)
