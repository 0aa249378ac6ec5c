"""What a ``kilter simulate --maintenance SPEC`` rollout is: when it starts, how long a domain is out, how many at once.

The spec is one flag's value, comma-separated ``key=value`` items an operator
can read aloud, e.g. ``at=3d,step=4h,k=2``:

- ``at``: when the rollout begins, counted from the trace's first submission
  (a duration, default ``0s``);
- ``step``: how long each scale-up domain is out once drained (default
  ``4h``: a firmware flash, reboot and qualification of a rack);
- ``k``: at most this many domains cordoned or out at once (default 1);
- ``wait``: the longest a step waits for jobs to end before it drains
  (default the planner's, ``topology.maintenance.MaintenanceAsk.max_wait_s``,
  6h); the naive drain never waits;
- ``window``: the maintenance window's length from ``at`` (optional): the
  report says whether each rollout ended inside it. Nothing is cut short by it.

Every rollout takes every scale-up domain of the fleet, in the order its
``order`` says (``MaintenanceSettings``): ``kilter`` plans it with
``topology.maintenance.plan_maintenance``, ``naive`` rolls through the domains
in name order, draining at once (``sim.maintenance`` runs both).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from kilter.model.durations import parse_duration
from kilter.model.errors import InputError
from kilter.topology.maintenance import MaintenanceAsk

__all__ = ["DEFAULT_STEP_S", "ORDERS", "MaintenanceSettings", "Order", "parse_maintenance"]

Order = Literal["kilter", "naive"]
ORDERS: tuple[Order, ...] = ("kilter", "naive")
DEFAULT_STEP_S = 4 * 3600.0
_KEYS = ("at", "step", "k", "wait", "window")
_DEFAULT_WAIT_S = MaintenanceAsk({}, 0.0, 1.0).max_wait_s  # the planner's own default: one source of it


@dataclass(frozen=True)
class MaintenanceSettings:
    """A rollout over every domain (seconds from the trace's start; ``window_s`` None: no window) and who orders it."""

    at_s: float = 0.0
    step_s: float = DEFAULT_STEP_S
    k: int = 1
    max_wait_s: float = _DEFAULT_WAIT_S
    window_s: float | None = None
    order: Order = "kilter"

    def ordered_by(self, order: Order) -> MaintenanceSettings:
        return replace(self, order=order)


def parse_maintenance(text: str) -> MaintenanceSettings:
    """The settings of a ``--maintenance`` value (module docstring); every mistake is an InputError naming the item."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise InputError(f"--maintenance: expected key=value items separated by commas (e.g. at=3d,step=4h,k=2), "
                         f"got {text!r}")  # fmt: skip
    values: dict[str, str] = {}
    for item in items:
        key, has_value, value = (part.strip() for part in item.partition("="))
        if key not in _KEYS or not has_value or not value:
            raise InputError(f"--maintenance: {item!r} is not one of {', '.join(k + '=…' for k in _KEYS)}")
        if key in values:
            raise InputError(f"--maintenance: {key} is given twice")
        values[key] = value
    k = values.get("k", "1")
    if not k.isascii() or not k.isdigit() or not 1 <= int(k) <= 10_000:
        raise InputError(f"--maintenance: k={k!r} must be a whole number of domains, at least 1")
    seconds = {
        key: parse_duration(values[key], path=f"--maintenance {key}") for key in _KEYS if key != "k" and key in values
    }
    step_s = seconds.get("step", DEFAULT_STEP_S)
    window_s = seconds.get("window")
    if step_s <= 0:
        raise InputError("--maintenance: step must be longer than 0s")
    if window_s is not None and window_s <= 0:
        raise InputError("--maintenance: window must be longer than 0s")
    return MaintenanceSettings(seconds.get("at", 0.0), step_s, int(k), seconds.get("wait", _DEFAULT_WAIT_S), window_s)
