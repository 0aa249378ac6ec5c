"""Node lifecycle: which state a node moves to next, from its health over time and its qualification result.

States live in the node label ``kilter.dev/lifecycle`` (``LIFECYCLE_STATES``);
only ``ready`` (or no label) takes new plans (``health``). The transitions
kilter makes, each for a reason a person would accept:

* ``ready`` (or none) → ``degraded``: the node failed its health signals
  ``failures`` times within ``window_s`` (a flapping node: each failure a
  new episode, a healthy stretch between), or stayed failing for
  ``sustained_s``. One blip is not enough: a node that fails once and
  recovers keeps its gangs' trust.
* ``degraded`` → ``repairing``: nothing runs on it any more (its gangs
  ended or moved), so repair can start without killing work.
* ``repairing`` → ``qualifying``: its health signals have stayed clear for
  ``sustained_s`` (the repair is done, not a flap between failures) and no
  ``failed`` qualification stands (the repair tooling clears it when it has
  repaired what failed); the last result is cleared, so only a new burn-in
  can pass it.
* ``qualifying`` → ``ready``: the burn-in tooling labelled it
  ``kilter.dev/qualification=passed`` (with the suite, when one is
  required, in ``kilter.dev/qualification-suite``) and it is healthy;
  ``=failed`` sends it back to ``repairing``.

``maintenance`` and ``retired`` are a person's (or a maintenance plan's)
to set and to end: kilter never moves a node out of them. Nor does it touch
a cordon: a node a person cordoned stays cordoned whatever its state, and a
cordon (``spec.unschedulable`` and the ``node.kubernetes.io/unschedulable``
taint Kubernetes adds with it) is no health failure. Failures are counted
only while a node is ``ready``: what it went through in repair or
maintenance is not held against it once it is back.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from kilter.model.annotations import LIFECYCLE
from kilter.model.core_v1 import Node
from kilter.topology.health import DEFAULTS, HealthSignals

__all__ = [
    "QUALIFICATION",
    "QUALIFICATION_SUITE",
    "FlapMemory",
    "LifecyclePolicy",
    "Transition",
    "health_problem",
    "next_state",
]

QUALIFICATION = "kilter.dev/qualification"
"""Node label the burn-in tooling sets: ``passed`` or ``failed``."""
QUALIFICATION_SUITE = "kilter.dev/qualification-suite"
"""Node label the burn-in tooling sets beside it: the name of the suite that ran."""
CORDON_TAINT = "node.kubernetes.io/unschedulable"
"""The taint the node controller adds to a cordoned node: a decision, like the cordon."""


@dataclass(frozen=True)
class LifecyclePolicy:
    failures: int = 3
    window_s: float = 600.0
    sustained_s: float = 300.0
    suite: str = ""  # the qualification suite that must have passed; "" for any


@dataclass(frozen=True)
class Transition:
    node: str
    from_state: str
    to_state: str
    reason: str
    clear_qualification: bool = False
    resource_version: str = ""  # of the node the decision was made on: the write's precondition


def health_problem(node: Node, signals: HealthSignals = DEFAULTS) -> str | None:
    """What is wrong with the node's health, apart from a cordon or its lifecycle label (a person's decision and
    kilter's own, neither of them a failure of the node)."""
    labels = {k: v for k, v in node.metadata.labels.items() if k != LIFECYCLE}
    taints = [t for t in node.spec.taints if t.key != CORDON_TAINT]
    bare = msgspec.structs.replace(
        node,
        metadata=msgspec.structs.replace(node.metadata, labels=labels),
        spec=msgspec.structs.replace(node.spec, unschedulable=False, taints=taints),
    )
    return signals.unusable_reason(bare)


@dataclass
class FlapMemory:
    """Per node, when its failure episodes began (within the window), whether it is failing now, and since when
    it has been healthy; all of it forgotten when the node's state changes."""

    episodes: dict[str, deque[float]] = field(default_factory=dict)
    failing_since: dict[str, float] = field(default_factory=dict)
    healthy_since: dict[str, float] = field(default_factory=dict)
    state: dict[str, str] = field(default_factory=dict)

    def observe(self, node: str, state: str, problem: str | None, now: float, window_s: float) -> None:
        if self.state.get(node) != state:
            self.drop(node)
            self.state[node] = state
        if problem is None:
            self.failing_since.pop(node, None)
            self.healthy_since.setdefault(node, now)
        else:
            self.healthy_since.pop(node, None)
        if state in ("", "ready"):  # failures count against a node that is in service, nowhere else
            starts = self.episodes.setdefault(node, deque())
            if problem is not None and node not in self.failing_since:
                self.failing_since[node] = now
                starts.append(now)
            while starts and now - starts[0] > window_s:
                starts.popleft()

    def drop(self, node: str) -> None:
        for memo in (self.episodes, self.failing_since, self.healthy_since, self.state):
            memo.pop(node, None)

    def forget(self, keep: set[str] | None = None) -> None:
        """Everything of the nodes not in ``keep`` (None: of every node, as when this replica stops leading)."""
        for node in set(self.state) - (keep or set()):
            self.drop(node)


def next_state(
    node: Node,
    problem: str | None,
    memory: FlapMemory,
    policy: LifecyclePolicy,
    now: float,
    busy: Callable[[str], bool],
) -> Transition | None:
    """The transition kilter makes for ``node`` now (the module's rules), or None. ``memory`` must have observed
    this round's ``problem``; ``busy(node)`` says whether anything still runs on it."""
    name = node.metadata.name
    labels = node.metadata.labels
    state = labels.get(LIFECYCLE, "")
    if state in ("", "ready"):
        episodes = len(memory.episodes.get(name, ()))
        since = memory.failing_since.get(name)
        if problem is not None and episodes >= policy.failures:
            why = f"{episodes} health failures within {policy.window_s:g}s, the last: {problem}"
            return Transition(name, state or "ready", "degraded", why)
        if since is not None and now - since >= policy.sustained_s:
            why = f"failing for {now - since:.0f}s: {problem}"
            return Transition(name, state or "ready", "degraded", why)
        return None
    if state == "degraded" and not busy(name):
        return Transition(name, state, "repairing", "nothing runs on it: repair can start")
    if state == "repairing" and problem is None and labels.get(QUALIFICATION) != "failed":
        healthy = now - memory.healthy_since.get(name, now)
        if healthy >= policy.sustained_s:
            why = f"its health signals have been clear for {healthy:.0f}s"
            return Transition(name, state, "qualifying", why, clear_qualification=True)
    if state == "qualifying":
        result = labels.get(QUALIFICATION, "")
        suite = labels.get(QUALIFICATION_SUITE, "")
        if policy.suite and suite != policy.suite:
            return None
        if result == "failed":
            return Transition(name, state, "repairing", f"qualification failed ({suite or 'no suite named'})")
        if result == "passed" and problem is None:
            return Transition(name, state, "ready", f"qualification passed ({suite or 'no suite named'})")
    return None
