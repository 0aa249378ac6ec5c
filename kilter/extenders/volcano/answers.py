"""Volcano's answer bodies that are more than a constant: predicate statuses, node scores, error fields.

Each verb answers in its own response struct (``pkg/scheduler/plugins/extender``):
predicate's ``{"status","code"}`` (v1.9 and older: a list of api.Status),
prioritize's ``{"nodeScore","errorMessage"}``, allocate's ``{"errorMessage"}``.
A bad body goes in that error field where the verb has one, else HTTP 400.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from kilter.extenders.scheduler import VerbAnswer
from kilter.extenders.volcano import wire as vw
from kilter.topology.fleet import Fleet

__all__ = [
    "MAX_NODE_SCORE",
    "bad_request",
    "error_message",
    "legacy_predicate",
    "node_scores",
    "predicate",
    "score_error",
]

MAX_NODE_SCORE = 100  # Volcano adds extender scores to its plugins', which use the framework's 0..100
SCORE_TEXT = [str(v).encode() for v in range(MAX_NODE_SCORE + 1)]
_ENCODER = msgspec.json.Encoder()


def predicate(code: int, reason: str) -> VerbAnswer:
    """A predicate answer: ``code`` is one of Volcano's framework status codes (``wire.SUCCESS`` ...)."""
    return VerbAnswer(
        200, _ENCODER.encode({"status": reason, "code": code}), "passed" if code == vw.SUCCESS else "failed"
    )


def node_scores(fleet: Fleet, index: npt.NDArray[np.int32], scaled: npt.NDArray[np.int32]) -> VerbAnswer:
    """Scores (0..MAX_NODE_SCORE) of the offered nodes kilter knows (``index`` >= 0), keyed by node name."""
    known = np.flatnonzero(index >= 0)
    scores_json = fleet.json_names().object(index[known], scaled[known].astype(np.int32), SCORE_TEXT)
    return VerbAnswer(200, b'{"nodeScore":' + scores_json + b',"errorMessage":""}', "scored")


def score_error(message: str) -> VerbAnswer:
    return VerbAnswer(200, _ENCODER.encode({"nodeScore": {}, "errorMessage": message}), "error")


def error_message(message: str, outcome: str) -> VerbAnswer:
    """allocateFunc / deallocateFunc's answer with an error (``outcome``: the decisions metric's label)."""
    return VerbAnswer(200, _ENCODER.encode({"errorMessage": message}), outcome)


def bad_request(exc: Exception) -> VerbAnswer:
    """HTTP 400 with the reason, for the verbs whose answer has no error field."""
    return VerbAnswer(400, str(exc).encode(), "error")


def legacy_predicate(answer: VerbAnswer, encoder: msgspec.json.Encoder) -> VerbAnswer:
    """``{"status":[api.Status…]}``, Volcano v1.9's PredicateResponse: empty when the node fits."""
    new = msgspec.json.decode(answer.body)
    if not new["status"]:
        return VerbAnswer(200, b'{"status":[]}', answer.outcome)
    old = {"status": [{"Code": new["code"], "Reason": new["status"], "Plugin": "kilter"}]}
    return VerbAnswer(200, encoder.encode(old), answer.outcome)
