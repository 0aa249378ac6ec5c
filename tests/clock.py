"""A clock tests move by hand: handed to kilter's code where it would read ``time.time`` or ``time.monotonic``."""

from __future__ import annotations


class Clock:
    """Stands at ``now`` (seconds) until the test sets ``now`` again."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
