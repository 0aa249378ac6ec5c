"""Which promised starts came true, how late, and which gangs started in a domain reserved for another.

Expected starts are worked out afresh from the objects each time
(``expected_starts``), so what was promised is only known by comparing one
answer with the next. ``StartWatch`` keeps, per pending gang, the first
start it was promised (what its user saw first, as the simulator's
``reserving`` counts it) and the previous answer. When a gang is found
running, its start (``Held.started_s``: its Workload's admission, else its
pods' start) less that promise is its start error: late above 0. A gang
found running that was not running before, on a domain the previous
answer reserved from a later moment for a gang ahead of it in the queue
(any, for a gang that never queued), was backfilled ahead of that
reservation. Both feed the servers' metrics; a gang that
started and ended between two answers is not seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kilter.gangs.expected_starts import ExpectedStarts
from kilter.topology.fleet import Fleet

__all__ = ["StartWatch", "Started"]


@dataclass(frozen=True, slots=True)
class Started:
    """What one answer tells that the previous did not: promised gangs that started (their start errors in
    seconds, late above 0) and how many gangs started ahead of another's reservation in its domains."""

    errors: tuple[float, ...] = ()
    backfilled: int = 0


@dataclass
class StartWatch:
    """The first promise of every pending gang and the last answer seen (module docstring)."""

    promised: dict[str, float] = field(default_factory=dict)
    last: ExpectedStarts | None = None

    def observe(self, starts: ExpectedStarts, fleet: Fleet) -> Started:
        running = {h.owner: h for h in starts.holdings if h.owner}
        errors = tuple(running[o].started_s - t for o, t in sorted(self.promised.items()) if o in running)
        pending = {s.gang.owner for s in starts.starts}
        self.promised = {o: t for o, t in self.promised.items() if o in pending}  # started or gone: forgotten
        for s in starts.starts:
            if s.reservation is not None:
                self.promised.setdefault(s.gang.owner, s.reservation.start_s)
        backfilled = 0
        last = self.last
        if last is not None:
            before = {h.owner for h in last.holdings}
            place = {s.gang.owner: i for i, s in enumerate(last.starts)}
            for h in starts.holdings:
                if not h.owner or h.owner in before:
                    continue
                domains = {int(d) for d in fleet.node_domain[list(h.nodes)]}
                ahead = last.starts[: place.get(h.owner, len(last.starts))]
                backfilled += any(
                    (r := s.reservation) is not None and h.started_s < r.start_s and not domains.isdisjoint(r.domains)
                    for s in ahead
                )
        self.last = starts
        return Started(errors, backfilled)
