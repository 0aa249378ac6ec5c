"""What the HTTP listener answers when a verb fails in a way no handler foresaw: the one map from path to answer.

A bug must cost one request, never the server, and never a 5xx: kube-scheduler
and Volcano treat a 5xx as the extender being down (kube-scheduler retries or,
with ``ignorable: false``, fails the whole cycle) rather than as a refusal.
So the failure is put in the protocol's own error field where it has one, and
the protocol's error always refuses, never allows:

- ``/scheduler/filter``: ``ExtenderFilterResult`` with ``Nodes``/``NodeNames``
  null (no node passes) and ``Error`` set; ``/scheduler/bind``:
  ``ExtenderBindingResult`` with ``Error`` set (the pod is not bound).
- ``/scheduler/prioritize``, ``/scheduler/preempt``: their answers have no
  error field, so HTTP 400 with one line (kube-scheduler drops the
  extender's scores, or its preemption advice, for this pod).
- Volcano's ``predicate``: ``status`` with code Error (in the list form at
  ``/volcano/v1.9/``); ``prioritize``, ``allocateFunc``, ``deallocateFunc``:
  ``errorMessage``; every other verb and every other path: HTTP 400, one line.

The server logs the traceback and counts the failure in
``kilter_internal_errors_total``; this module only words the answer.
"""

from __future__ import annotations

import msgspec

from kilter.extenders import wire
from kilter.extenders.scheduler import VerbAnswer
from kilter.extenders.volcano import wire as vw
from kilter.extenders.volcano.answers import legacy_predicate

__all__ = ["OUTCOME", "internal_error", "one_line"]

OUTCOME = "internal-error"  # the decisions metric's outcome label of these answers
_ENCODER = msgspec.json.Encoder()


def one_line(exc: BaseException) -> str:
    """``kilter internal error: <type>: <message>`` on one line, whatever the exception's text holds."""
    text = " ".join(str(exc).split())
    return (
        f"kilter internal error: {type(exc).__name__}: {text}"
        if text
        else f"kilter internal error: {type(exc).__name__}"
    )


def internal_error(path: str, message: str) -> VerbAnswer:
    """The in-protocol answer to a request to ``path`` that failed with ``message`` (one line, no newline)."""
    if path == "/scheduler/filter":
        result = wire.FilterResult(error=message, failed_nodes={}, failed_and_unresolvable_nodes={})
        return VerbAnswer(200, _ENCODER.encode(result), OUTCOME)
    if path == "/scheduler/bind":
        return VerbAnswer(200, _ENCODER.encode(wire.BindingResult(message)), OUTCOME)
    verb = path.removeprefix("/volcano/") if path.startswith("/volcano/") else ""
    if verb == "predicate":
        return VerbAnswer(200, _ENCODER.encode({"status": message, "code": vw.ERROR}), OUTCOME)
    if verb == "v1.9/predicate":
        return legacy_predicate(
            VerbAnswer(200, _ENCODER.encode({"status": message, "code": vw.ERROR}), OUTCOME), _ENCODER
        )
    if verb.removeprefix("v1.9/") == "prioritize":
        return VerbAnswer(200, _ENCODER.encode({"nodeScore": {}, "errorMessage": message}), OUTCOME)
    if verb.removeprefix("v1.9/") in ("allocateFunc", "deallocateFunc"):
        return VerbAnswer(200, _ENCODER.encode({"errorMessage": message}), OUTCOME)
    return VerbAnswer(400, f"{message}\n".encode(), OUTCOME)
