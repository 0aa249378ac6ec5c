"""The one format of each ``kilter.dev/*`` value that has more than one reader."""

from __future__ import annotations

import pytest

from kilter.model.annotations import MAX_GANG_SIZE, is_true, parse_gang_size
from kilter.model.errors import InputError


@pytest.mark.parametrize(
    ("raw", "size"),
    [
        pytest.param("1", 1, id="one pod is a gang of one"),
        pytest.param("0004", 4, id="leading zeros are still four"),
        pytest.param(str(MAX_GANG_SIZE), MAX_GANG_SIZE, id="the limit itself"),
    ],
)
def test_a_gang_size_is_a_whole_number_up_to_the_limit(raw: str, size: int) -> None:
    assert parse_gang_size(raw) == size


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("0", id="no pods"),
        pytest.param("-1", id="negative"),
        pytest.param("+4", id="signed"),
        pytest.param(" 4", id="leading space"),
        pytest.param("4\n", id="trailing newline"),
        pytest.param("1e3", id="exponent"),
        pytest.param("1_000", id="underscore"),
        pytest.param("abc", id="not a number"),
        pytest.param("", id="empty"),
        pytest.param(str(MAX_GANG_SIZE + 1), id="one past the limit"),
        pytest.param(str(2**64), id="past any integer width"),
        pytest.param("9" * 5000, id="more digits than int() converts"),
        pytest.param("\uff14", id="fullwidth digit four, which int() reads"),
        pytest.param("\u00b2", id="superscript two, which isdigit() accepts and int() refuses"),
    ],
)
def test_anything_else_is_refused_naming_the_key_and_the_range(raw: str) -> None:
    with pytest.raises(InputError, match=r"^label kilter\.dev/gang-size must be a whole number from 1 to 100,000"):
        parse_gang_size(raw)


@pytest.mark.parametrize(
    ("raw", "set_"),
    [
        pytest.param("true", True, id="true"),
        pytest.param("True", True, id="any case"),
        pytest.param(" true ", True, id="spaces around"),
        pytest.param("false", False, id="false"),
        pytest.param("1", False, id="not a one"),
        pytest.param("yes", False, id="not a yes"),
        pytest.param("", False, id="empty"),
        pytest.param(None, False, id="absent"),
    ],
)
def test_an_opt_in_annotation_is_set_by_true_alone(raw: str | None, set_: bool) -> None:
    assert is_true(raw) is set_
