"""Quota amounts: exact integers with Kueue's Unlimited sentinel and saturation rules.

Kueue (``pkg/resources/amount.go``) keeps quota as int64 in canonical units —
milli-CPU for ``cpu``, ``Quantity.Value()`` (rounded up) for everything else —
and saturates instead of wrapping: ``MaxInt64`` means Unlimited, Unlimited
absorbs additions, ``Unlimited - Unlimited = 0``, ``x - Unlimited`` is the
most negative value. kilter's amounts are Python ints under the same rules,
converted from quantities once, here.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal

from kilter.model import quantity
from kilter.model.core_v1 import Quantity

__all__ = ["INT64_MAX", "INT64_MIN", "UNLIMITED", "add", "display", "from_quantity", "is_unlimited", "sub"]

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
UNLIMITED = INT64_MAX
CPU = "cpu"


def is_unlimited(a: int) -> bool:
    return a == UNLIMITED


def _clamp(v: int) -> int:
    return INT64_MIN if v < INT64_MIN else INT64_MAX if v > INT64_MAX else v


def add(a: int, b: int) -> int:
    """a + b: Unlimited stays Unlimited; a bounded sum saturates just below the sentinel."""
    if a == UNLIMITED or b == UNLIMITED:
        return UNLIMITED
    v = _clamp(a + b)
    return UNLIMITED - 1 if v == UNLIMITED else v


def sub(a: int, b: int) -> int:
    """a - b with Kueue's cases: U-U = 0, U-x = U, x-U = MinInt64, else saturating."""
    if a == UNLIMITED and b == UNLIMITED:
        return 0
    if a == UNLIMITED:
        return UNLIMITED
    if b == UNLIMITED:
        return INT64_MIN
    return _clamp(a - b)


def from_quantity(resource: str, value: Quantity, *, path: str = "$") -> int:
    """Canonical amount of a quantity: milli-units for cpu, rounded-up units otherwise; Unlimited on overflow."""
    q = quantity.parse_quantity(value, path=path)
    scaled = q * 1000 if resource == CPU else q
    v = int(scaled.to_integral_value(rounding=ROUND_CEILING))
    return UNLIMITED if v >= INT64_MAX else max(v, INT64_MIN)


def display(resource: str, a: int) -> int | float:
    """Base units for people and JSON: cores for cpu (may be fractional), whole units otherwise; inf = Unlimited."""
    if a == UNLIMITED:
        return float("inf")
    if resource == CPU:
        d = Decimal(a) / 1000
        return int(d) if d == d.to_integral_value() else float(d)
    return a
