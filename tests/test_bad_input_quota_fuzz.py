"""Mutated queue objects never crash ``kilter queues``: the answer is a table or a one-line error."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kilter.cli.queues import queues_data
from kilter.model.errors import KilterError
from kilter.state import cluster
from tests.conftest import REPO
from tests.test_bad_input_fuzz import json_values, mutate, paths

DOCS = [d for d in yaml.safe_load_all((REPO / "examples" / "queues" / "ai-platform.yaml").read_text()) if d]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_mutated_queue_snapshot_yields_queues_or_a_kilter_error(data: st.DataObject) -> None:
    docs: list[Any] = copy.deepcopy(DOCS)
    index = data.draw(st.integers(0, len(docs) - 1))
    path = data.draw(st.sampled_from(paths(docs[index])))
    docs[index] = mutate(docs[index], path, data.draw(json_values))
    try:
        result = queues_data(cluster.from_objects(docs), now=1_796_122_800.0, pending=True)
        assert "clusterQueues" in result
    except KilterError as exc:
        assert str(exc)
