"""Kubernetes resource quantities, parsed exactly once at the boundary.

A quantity is a decimal number with an optional binary (Ki..Ei) or decimal
(n, u, m, k, M..E) suffix, or an exponent (``1e3``). Parsing goes to
``Decimal`` so that ``100m`` is exactly 0.1 and never a float; devices such
as GPUs must come out as whole counts.

Kubernetes caps every quantity at 2^63-1 in magnitude (apimachinery's
``resource.Quantity``: "numbers larger ... will be capped"), and so does
this module, before any arithmetic: ``1e999999999`` or a 5,000-digit number
is the cap, not a ``decimal.Overflow`` or an ``int()`` refusal, and
``quota.amount`` then reads the cap as Unlimited, as Kueue does.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, DecimalException

from kilter.model.errors import InputError

__all__ = ["MAX_MAGNITUDE", "parse_quantity", "to_count", "to_milli"]

MAX_MAGNITUDE = Decimal(2**63 - 1)
"""The largest quantity Kubernetes holds; larger ones are capped to it (and smaller negative ones to its negation)."""

_SUFFIX: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$")


def parse_quantity(value: str | int | float, *, path: str = "$") -> Decimal:
    """The exact value of a quantity; InputError for anything Kubernetes would reject."""
    if isinstance(value, bool):
        raise InputError(f"quantity must be a string or number, not {value!r}", path=path)
    if isinstance(value, int):
        return _capped(Decimal(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"quantity must be a finite number, not {value!r}", path=path)
        return _capped(Decimal(repr(value)))
    if not isinstance(value, str):
        raise InputError(f"quantity must be a string or number, not {type(value).__name__}", path=path)
    match = _QUANTITY.match(value.strip())
    if not match:
        raise InputError(f"malformed quantity {value!r}", path=path)
    number, exponent, suffix = match.groups()
    try:
        base = Decimal(number)
        scale = Decimal(f"1{exponent}") if exponent else _SUFFIX[suffix or ""]
        if base and base.adjusted() + scale.adjusted() > _DIGITS:  # past the cap: don't multiply out 1e999999999
            return MAX_MAGNITUDE.copy_sign(base)
        return _capped(base * scale)
    except DecimalException as exc:
        raise InputError(f"malformed quantity {value[:40]!r}", path=path) from exc


_MAX_INT = 2**63 - 1
_DIGITS = len(str(_MAX_INT))  # 19: a product whose exponent sum exceeds this is at least 10^20


def _capped(q: Decimal) -> Decimal:
    return q if abs(q) <= MAX_MAGNITUDE else MAX_MAGNITUDE.copy_sign(q)


def to_count(value: str | int | float, *, path: str = "$") -> int:
    """A whole, non-negative device count (extended resources cannot be fractional)."""
    if type(value) is str and len(value) < _DIGITS and value.isascii() and value.isdigit():
        return int(value)  # "4": nearly every device quantity, read for every pod of a live cluster
    if type(value) is int and 0 <= value <= _MAX_INT:
        return value
    q = parse_quantity(value, path=path)
    if q < 0 or q != q.to_integral_value():
        raise InputError(f"device count must be a whole number >= 0, not {value!r}", path=path)
    return int(q)


def to_milli(value: str | int | float, *, path: str = "$") -> int:
    """Milli-units, rounded up as Kubernetes rounds ``MilliValue``."""
    q = parse_quantity(value, path=path) * 1000
    return int(q.to_integral_value(rounding="ROUND_CEILING"))
