"""Names no Kubernetes object can have are refused at the door, and what the explain log and the Volcano notes keep
is bounded in bytes, not only in count: a caller cannot grow kilter's memory by sending long names or texts."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kilter.extenders.explain import DecisionLog, Record
from kilter.extenders.volcano import notes as notes_module
from kilter.extenders.volcano.notes import MAX_NOTE_TEXT, Notes
from tests.extenders.conftest import Served, names_args, pod_json, serve_snapshot
from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import Volcano, gpu_job, open_session, serve


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from tests.extenders.conftest import cluster_objects

    with serve_snapshot(tmp_path_factory.mktemp("names"), cluster_objects()) as s:
        yield s


def _filter(served: Served, args: dict[str, object]) -> dict[str, object]:
    status, data, _ = served.call("POST", "/scheduler/filter", json.dumps(args).encode())
    assert status == 200
    result: dict[str, object] = json.loads(data)
    return result


@pytest.mark.parametrize("length", [254, 300, 40_000])
def test_a_node_name_longer_than_any_node_can_have_is_an_error_and_nothing_is_kept(served: Served, length: int) -> None:
    log = served.app.extender.log
    before = log.nbytes
    result = _filter(served, names_args(pod_json(f"long-node-{length}", 4), ["r1-t00", "n" * length]))
    assert "length <= 253" in str(result["Error"]), result["Error"]
    assert log.nbytes == before and log.explain("ml", f"long-node-{length}") is None


def test_a_node_name_of_253_bytes_is_a_node_kilter_does_not_know(served: Served) -> None:
    result = _filter(served, names_args(pod_json("name-253", 4), ["r1-t00", "n" * 253]))
    assert result["Error"] == "" and result["NodeNames"] == ["r1-t00"]


@pytest.mark.parametrize("length", [254, 300])
def test_a_node_object_with_a_long_name_is_an_error(served: Served, length: int) -> None:
    body = {"Pod": pod_json("long-item", 4), "Nodes": {"metadata": {}, "items": [{"metadata": {"name": "n" * length}}]}}
    result = _filter(served, {**body, "NodeNames": None})
    assert "length <= 253" in str(result["Error"]), result["Error"]


@pytest.mark.parametrize(("field", "value"), [("name", "p" * 254), ("name", "p" * 4_000_000), ("namespace", "n" * 64)])
def test_a_pod_with_a_name_no_pod_can_have_is_an_error(served: Served, field: str, value: str) -> None:
    pod = pod_json("x", 4)
    pod["metadata"][field] = value
    result = _filter(served, names_args(pod, ["r1-t00"]))
    assert "length <=" in str(result["Error"]) and f"$.Pod.metadata.{field}" in str(result["Error"]), result["Error"]


@pytest.fixture
def volcano(tmp_path: Path) -> Iterator[Volcano]:
    yield from serve(tmp_path, [])


def test_a_volcano_job_with_a_name_no_podgroup_can_have_is_refused_and_not_noted(volcano: Volcano) -> None:
    job = gpu_job("a", 2, 4)
    open_session(volcano, [job])
    long = copy.deepcopy(vp.job_args(job))
    long["job"]["Name"] = "j" * 2_000_000
    status, answer = volcano.post("jobEnqueueable", long)
    assert status == 400 and "length <= 253" in str(answer), str(answer)[:300]
    notes = volcano.app.volcano.notes if volcano.app.volcano is not None else None
    assert notes is not None and all(len(key) <= 63 + 1 + 253 for key in notes)
    assert volcano.post("jobEnqueueable", vp.job_args(job))[0] == 200, "the next job is answered"


def _record(unknown: int, name_bytes: int) -> Record:
    names = [f"{i:0{name_bytes}d}" for i in range(unknown)]
    return Record(
        "filter",
        0.0,
        "no fit",
        ["known"],
        np.full(unknown, -1, dtype=np.int32),
        codes=np.zeros(unknown, dtype=np.int8),
        sent=names,
    )


@pytest.mark.parametrize("max_bytes", [200_000, 1_000_000, 5_000_000])
def test_the_explain_log_keeps_within_its_byte_budget_and_counts_what_it_holds(max_bytes: int) -> None:
    log = DecisionLog(records=10_000, entries=10**9, max_bytes=max_bytes)
    for pod in range(300):
        log.add("ml", f"p{pod}", _record(100, 253))
        kept = [(key, r) for key, records in log._log.items() for r in records]
        assert log.nbytes == sum(r.nbytes + len(key) for key, r in kept), "the count is what is held"
        assert log.nbytes <= max_bytes
    assert log.explain("ml", "p299") is not None, "the newest pod is kept"
    assert log.explain("ml", "p0") is None, "the oldest went first"


def test_volcano_notes_keep_within_their_byte_budget_and_cut_long_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notes_module, "MAX_NOTES_BYTES", 100_000)
    notes = Notes()
    for i in range(200):
        notes.add(f"ml/job-{i}", "plan", "x" * 10_000)
        notes.add(f"ml/job-{i}", "wait", f"short {i}")
        assert notes.nbytes == sum(len(k) + sum(len(w) + len(t) for w, t in v.items()) for k, v in notes.items())
        assert notes.nbytes <= 100_000
    plan = notes["ml/job-199"]["plan"]
    assert plan.startswith("x" * MAX_NOTE_TEXT) and plan.endswith(f"({10_000 - MAX_NOTE_TEXT:,} characters cut)")
    assert "ml/job-0" not in notes
