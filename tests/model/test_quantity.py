"""Quantities parse exactly, and devices come out as whole counts."""

from __future__ import annotations

from decimal import Decimal

import pytest

from kilter.model import quantity
from kilter.model.errors import InputError


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4", Decimal(4)),
        ("100m", Decimal("0.1")),
        ("1.5Gi", Decimal(1.5 * 2**30)),
        ("2k", Decimal(2000)),
        ("1e3", Decimal(1000)),
        ("500u", Decimal("0.0005")),
        (8, Decimal(8)),
    ],
)
def test_quantities_parse_exactly(text: str | int, value: Decimal) -> None:
    assert quantity.parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "four", "1.2.3", "10XB", "--1"])
def test_malformed_quantities_are_input_errors(text: str) -> None:
    with pytest.raises(InputError, match="malformed quantity"):
        quantity.parse_quantity(text, path="$.spec.x")


@pytest.mark.parametrize("text", ["500m", "-1", "1.5"])
def test_device_counts_must_be_whole_and_non_negative(text: str) -> None:
    with pytest.raises(InputError, match="whole number"):
        quantity.to_count(text)


def test_a_bool_is_not_a_quantity() -> None:
    with pytest.raises(InputError):
        quantity.parse_quantity(True)


def test_milli_rounds_up_like_kubernetes() -> None:
    assert quantity.to_milli("1500u") == 2
    assert quantity.to_milli("2") == 2000


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_numbers_are_input_errors(value: float) -> None:
    with pytest.raises(InputError, match="finite"):
        quantity.parse_quantity(value)
