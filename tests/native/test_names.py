"""The compiled name index answers exactly as a dict would."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter._native import names
from kilter._native.twin import names as twin


def lookup(index: names.NameIndex | twin.NameIndex, wanted: list[str]) -> tuple[list[int], int]:
    out = np.empty(len(wanted), dtype=np.int32)
    unknown = index.lookup(wanted, out)
    return out.tolist(), unknown


def test_names_map_to_their_index_and_strangers_to_minus_one() -> None:
    index = names.NameIndex(["gb200-r001-t00", "gb200-r001-t01", "nœud-ü"])
    assert lookup(index, ["gb200-r001-t01", "zz", "nœud-ü", "", "gb200-r001-t0"]) == ([1, -1, 2, -1, -1], 3)
    assert index.index("gb200-r001-t00") == 0 and len(index) == 3


def test_freshly_decoded_strings_are_found() -> None:
    index = names.NameIndex([f"node-{i}" for i in range(1000)])
    wanted = json.loads(json.dumps([f"node-{i}" for i in range(999, -1, -7)]))
    assert lookup(index, wanted)[0] == list(range(999, -1, -7))


def test_duplicates_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        names.NameIndex(["a", "b", "a"])


def test_non_strings_are_a_type_error() -> None:
    with pytest.raises(TypeError, match="not str"):
        names.NameIndex(["a"]).lookup(["a", 3], np.empty(2, dtype=np.int32))  # type: ignore[list-item]


def test_an_empty_index_knows_nothing() -> None:
    assert lookup(names.NameIndex([]), ["a"]) == ([-1], 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=12), unique=True, max_size=60), st.lists(st.text(max_size=12), max_size=40))
def test_core_and_twin_agree(known: list[str], extra: list[str]) -> None:
    wanted = known[::2] + extra
    assert lookup(names.NameIndex(known), wanted) == lookup(twin.NameIndex(known), wanted)


def test_names_resolve_straight_from_a_json_array() -> None:
    index = names.NameIndex(["a", "bb", "node-3"])
    found = index.lookup_json(b' [ "node-3","zz" ,\n"a"] ')
    assert found is not None
    assert found[0].tolist() == [2, -1, 0] and found[1] == 1
    empty = index.lookup_json(b"[]")
    assert empty is not None and empty[0].tolist() == [] and empty[1] == 0


def test_an_escaped_name_asks_for_the_normal_decoder() -> None:
    assert names.NameIndex(["a"]).lookup_json(b'["a", "b\\u0041"]') is None


@pytest.mark.parametrize(
    "data",
    [b"", b"{}", b'["a"', b'["a" "b"]', b'["a",]', b"[1]", b'["a"] x', b'["a\nb"]', b'["abc'],
)
def test_malformed_json_arrays_are_value_errors(data: bytes) -> None:
    with pytest.raises(ValueError):
        names.NameIndex(["a"]).lookup_json(data)
    with pytest.raises(ValueError):
        twin.NameIndex(["a"]).lookup_json(data)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.from_regex(r"[a-z0-9][a-z0-9.-]{0,20}", fullmatch=True), unique=True, max_size=50),
    st.lists(st.from_regex(r"[a-z0-9.-]{0,20}", fullmatch=True), max_size=30),
)
def test_json_lookup_agrees_with_the_twin(known: list[str], extra: list[str]) -> None:
    data = json.dumps(known[::3] + extra).encode()
    a = names.NameIndex(known).lookup_json(data)
    b = twin.NameIndex(known).lookup_json(data)
    assert a is not None and b is not None
    assert (a[0].tolist(), a[1]) == (b[0].tolist(), b[1])
