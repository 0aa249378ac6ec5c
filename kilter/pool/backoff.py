"""Leaving a peer alone for a while after it broke the pool's bounds: what it sends is not read, nor is it called.

A peer that sends a message over ``bounds`` once is faulty or hostile, and
would most likely do it again next round: reading each costs a worker
thread up to the bounds. So it is struck: neither called (``Gossip``) nor
answered (``PoolServicer``) for ``first_s``, doubling with each strike in
a row up to ``longest_s``, and forgiven at its next exchange that keeps
the bounds. With ``longest_s`` the time to live, a peer that keeps failing
costs one read per TTL, and what it said before ages out as it would if
it were down.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass
class Backoff:
    """Strikes by key (a peer's name, or a caller's certificate names or address) and until when each waits."""

    first_s: float = 1.0
    longest_s: float = 30.0
    most_keys: int = 1024  # callers remembered; past it the ones whose wait is over are forgotten first
    _strikes: dict[str, tuple[int, float]] = field(default_factory=dict)  # key -> (strikes in a row, until)

    def left(self, key: str, now: float) -> float:
        """Seconds ``key`` still waits (0 when it is not backed off)."""
        struck = self._strikes.get(key)
        return 0.0 if struck is None else max(0.0, struck[1] - now)

    def strike(self, key: str, now: float) -> float:
        """Back ``key`` off once more; the seconds it now waits."""
        if key not in self._strikes and len(self._strikes) >= self.most_keys:
            self._forget(now)
        strikes = self._strikes.get(key, (0, now))[0] + 1
        wait = min(self.longest_s, self.first_s * float(1 << min(strikes - 1, 30)))
        self._strikes[key] = (strikes, now + wait)
        return wait

    def forgive(self, key: str) -> None:
        """``key`` kept the bounds: its next strike starts from ``first_s`` again."""
        self._strikes.pop(key, None)

    def waiting(self, now: float) -> int:
        """How many keys are backed off now."""
        return sum(1 for _, until in self._strikes.values() if until > now)

    def _forget(self, now: float) -> None:
        over = [k for k, (_, until) in self._strikes.items() if until <= now]
        for key in over or sorted(self._strikes, key=lambda k: self._strikes[k][1])[: len(self._strikes) // 2]:
            del self._strikes[key]
