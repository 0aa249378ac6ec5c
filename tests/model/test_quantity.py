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


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("1e999999999", id="an exponent Decimal would overflow on"),
        pytest.param("1.5e400000000", id="a fraction times such an exponent"),
        pytest.param("9" * 5000, id="more digits than int() converts"),
        pytest.param("10000000000000000000", id="one digit more than 2^63-1 has"),
        pytest.param("8Ei", id="2^63 exactly"),
        pytest.param(2**70, id="a JSON integer past int64"),
        pytest.param(1e300, id="a JSON float past int64"),
    ],
)
def test_quantities_past_what_kubernetes_holds_are_capped_at_2_to_the_63_minus_1(text: str | int | float) -> None:
    assert quantity.parse_quantity(text) == 2**63 - 1
    assert quantity.to_count(text) == 2**63 - 1  # a device count no node offers: refused downstream, not a crash
    assert quantity.parse_quantity(f"-{text}" if isinstance(text, str) else -text) == -(2**63 - 1)


def test_the_cap_itself_and_tiny_quantities_are_read_as_they_are() -> None:
    assert quantity.to_count(str(2**63 - 1)) == 2**63 - 1
    assert quantity.parse_quantity("1e-999999999") == 0
