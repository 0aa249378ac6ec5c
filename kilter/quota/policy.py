"""kilter's policy annotations on ClusterQueues and Cohorts, parsed and validated.

* ``kilter.dev/usage-half-life`` (ClusterQueue, Cohort; a duration such as
  ``7d``, ``36h``, ``90m``): the fair share counts decayed historical usage.
* ``kilter.dev/min-runtime`` (ClusterQueue, Cohort; a duration): admitted
  workloads younger than this are not preempted for fair sharing.
* ``kilter.dev/decayed-usage`` (ClusterQueue, Cohort; JSON written by kilter
  only): the persisted decay state, ``time`` and ``usage`` per ``flavor/resource``.

A Cohort's ``min-runtime`` applies to every ClusterQueue below it unless the
ClusterQueue or a nearer Cohort sets its own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from kilter.model.annotations import DECAYED_USAGE, MIN_RUNTIME, USAGE_HALF_LIFE
from kilter.model.durations import parse_duration
from kilter.model.errors import InputError

__all__ = [
    "DECAYED_USAGE",
    "MIN_RUNTIME",
    "USAGE_HALF_LIFE",
    "DecayState",
    "Policy",
    "parse_duration",
    "parse_policy",
    "parse_time",
    "read_time",
]


def parse_time(text: str, *, path: str) -> float:
    """Seconds since the epoch of an RFC 3339 time (``2026-12-01T10:00:00Z``)."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise InputError(f"{text!r} is not an RFC 3339 time", path=path) from None


def read_time(value: object) -> float | None:
    """``parse_time`` of a time an object may or may not carry: None for none, or one that does not read (a
    caller that only weighs objects by their times skips what it cannot read rather than refuse it)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_time(value, path="time")
    except InputError:
        return None


@dataclass(frozen=True)
class DecayState:
    """Decayed usage per (flavor, resource) as of ``time`` (seconds since the epoch)."""

    time: float
    usage: Mapping[tuple[str, str], float] = field(default_factory=dict)


@dataclass(frozen=True)
class Policy:
    half_life_s: float | None = None
    min_runtime_s: float | None = None
    decay: DecayState | None = None


def _decay_state(raw: str, *, path: str) -> DecayState:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"{DECAYED_USAGE} is not JSON: {exc.msg}", path=path) from None
    except RecursionError:  # a value anyone may write, nested past the parser's depth
        raise InputError(f"{DECAYED_USAGE} is not JSON: nested too deep", path=path) from None
    if not isinstance(data, dict) or not isinstance(data.get("time"), str) or not isinstance(data.get("usage"), dict):
        shape = '{"time": RFC3339, "usage": {"flavor/resource": number}}'
        raise InputError(f"{DECAYED_USAGE} must be {shape}", path=path)
    usage: dict[tuple[str, str], float] = {}
    for key, value in data["usage"].items():
        flavor, sep, resource = key.partition("/")
        if not sep or not flavor or not resource:
            raise InputError(f"{DECAYED_USAGE}: key {key!r} is not flavor/resource", path=path)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or not math.isfinite(value):
            raise InputError(f"{DECAYED_USAGE}: usage of {key} must be a number >= 0", path=path)
        usage[(flavor, resource)] = float(value)
    return DecayState(parse_time(data["time"], path=path), usage)


def parse_policy(annotations: Mapping[str, str], *, path: str) -> Policy:
    """The policy a ClusterQueue's or Cohort's annotations ask for; InputError names the bad one."""
    apath = f"{path}.metadata.annotations"
    half_life = None
    if USAGE_HALF_LIFE in annotations:
        half_life = parse_duration(annotations[USAGE_HALF_LIFE], path=f"{apath}['{USAGE_HALF_LIFE}']")
        if half_life <= 0:
            raise InputError(f"{USAGE_HALF_LIFE} must be longer than 0s", path=f"{apath}['{USAGE_HALF_LIFE}']")
    min_runtime = None
    if MIN_RUNTIME in annotations:
        min_runtime = parse_duration(annotations[MIN_RUNTIME], path=f"{apath}['{MIN_RUNTIME}']")
    decay = None
    if DECAYED_USAGE in annotations:
        decay = _decay_state(annotations[DECAYED_USAGE], path=f"{apath}['{DECAYED_USAGE}']")
    return Policy(half_life, min_runtime, decay)
