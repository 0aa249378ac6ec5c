"""The JSON answer writer against its twin and against the json module's reading of what it writes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter._native.jsonout import JsonNames
from kilter._native.twin import jsonout as twin

names_st = st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(names_st, st.data())
def test_answers_equal_the_twin_and_parse_back(names: list[str], data: st.DataObject) -> None:
    native, reference = JsonNames(names), twin.JsonNames(names)
    idx = np.array(data.draw(st.lists(st.integers(0, len(names) - 1), max_size=60)), dtype=np.int32)
    values = [json.dumps(v).encode() for v in data.draw(st.lists(st.text(max_size=8), min_size=1, max_size=5))]
    value_of = np.array([data.draw(st.integers(0, len(values) - 1)) for _ in idx], dtype=np.int32)
    scores = np.array([data.draw(st.integers(0, 10)) for _ in idx], dtype=np.int8)

    assert native.array(idx) == reference.array(idx.tolist())
    assert json.loads(native.array(idx)) == [names[i] for i in idx]
    assert native.object(idx, value_of, values) == reference.object(idx.tolist(), value_of.tolist(), values)
    assert json.loads(native.object(idx, value_of, values)) == {
        names[i]: json.loads(values[v]) for i, v in zip(idx.tolist(), value_of.tolist(), strict=True)
    }
    assert native.host_scores(idx, scores) == reference.host_scores(idx.tolist(), scores.tolist())


def test_bad_indices_and_shapes_are_refused() -> None:
    native = JsonNames(["a", "b"])
    with pytest.raises(IndexError):
        native.array(np.array([2], dtype=np.int32))
    with pytest.raises(IndexError):
        native.array(np.array([-1], dtype=np.int32))
    with pytest.raises(ValueError):
        native.object(np.array([0], dtype=np.int32), np.array([], dtype=np.int32), [b"1"])
    with pytest.raises(IndexError):
        native.object(np.array([0], dtype=np.int32), np.array([3], dtype=np.int32), [b"1"])
    with pytest.raises(ValueError):
        native.host_scores(np.array([0], dtype=np.int32), np.array([100], dtype=np.int8))
