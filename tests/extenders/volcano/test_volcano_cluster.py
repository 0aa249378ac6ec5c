"""With a cluster connected, a refusal at enqueue becomes an Event on the PodGroup; ``--queues`` supplies quota."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kilter.cli.main import main
from kilter.cli.serve import build_app
from tests.extenders.conftest import _Server, cluster_objects, serve_config, write_snapshot
from tests.extenders.test_bind_api import TOKEN
from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import Volcano, cluster_queue, gpu_job, open_session, quota_objects, volcano_queue
from tests.fakeapi import Call, FakeApi, running
from tests.live_mode import kubeconfig


@pytest.fixture
def api() -> Iterator[FakeApi]:
    def respond(call: Call) -> tuple[int, Any]:
        return 201, call.body

    with running(respond) as server:
        yield server


@pytest.fixture
def connected(tmp_path: Path, api: FakeApi) -> Iterator[Volcano]:
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, [*cluster_objects(), *quota_objects()])
    app, _ = build_app(serve_config(snapshot, kubeconfig=kubeconfig(tmp_path / "kubeconfig", api.port, TOKEN)))
    with _Server(app, None) as port:
        yield Volcano(app, port)


def events(api: FakeApi, count: int) -> list[Call]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = [c for c in api.calls if c.path.endswith("/events")]
        if len(found) >= count:
            return found
        time.sleep(0.01)
    return [c for c in api.calls if c.path.endswith("/events")]


def test_a_job_refused_for_good_gets_one_event_on_its_podgroup(connected: Volcano, api: FakeApi) -> None:
    huge, later = gpu_job("huge", 25, 4), gpu_job("later", 25, 4)
    open_session(connected, [huge, later])
    for _ in range(3):  # asked again every session: one Event, not one per answer
        assert connected.post("jobEnqueueable", vp.job_args(huge)) == (200, {"status": -1})
    # Events are written in order by one worker: once later's is in, every Event of huge's answers is too.
    assert connected.post("jobEnqueueable", vp.job_args(later)) == (200, {"status": -1})
    found = events(api, 2)
    assert [c.body["involvedObject"]["name"] for c in found] == ["huge", "later"]
    call = found[0]
    assert call.method == "POST" and call.path == "/api/v1/namespaces/ml/events"
    assert call.authorization == f"Bearer {TOKEN}"
    event = call.body
    assert event["involvedObject"] == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "namespace": "ml",
        "name": "huge",
    }
    assert event["type"] == "Warning" and event["reason"] == "KilterNeverFits"
    assert "could ever hold (96)" in event["message"]


def test_a_job_that_only_waits_gets_no_event(connected: Volcano, api: FakeApi) -> None:
    jobs = [gpu_job(name, 12, 4) for name in ("a", "b", "c")]
    never = gpu_job("never", 25, 4)
    open_session(connected, [*jobs, never])
    answers = [connected.post("jobEnqueueable", vp.job_args(job))[1]["status"] for job in jobs]
    assert answers == [1, 1, -1]
    # Events are written in order by one worker: once never's is in, any Event of the waiting job would be too.
    assert connected.post("jobEnqueueable", vp.job_args(never)) == (200, {"status": -1})
    assert [c.body["involvedObject"]["name"] for c in events(api, 1)] == ["never"]


def test_queues_file_defines_quota_when_kueue_is_not_installed(tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshot.json"
    queues = [o for o in quota_objects() if o["kind"] != "Queue"]
    write_snapshot(snapshot, [*cluster_objects(), volcano_queue("ml-training", cluster_queue="training")])
    path = tmp_path / "queues.yaml"
    path.write_text(yaml.safe_dump_all(queues))
    app, _ = build_app(serve_config(snapshot, queues=path))
    with _Server(app, None) as port:
        v = Volcano(app, port)
        huge = gpu_job("huge", 25, 4)
        fits = gpu_job("fits", 2, 4)
        open_session(v, [huge, fits])
        assert v.post("jobEnqueueable", vp.job_args(fits)) == (200, {"status": 1})
        assert v.post("jobEnqueueable", vp.job_args(huge)) == (200, {"status": -1})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "no ClusterQueue, Cohort or ResourceFlavor"),
        (yaml.safe_dump(cluster_queue("bad", 4, lending=8)), "lendingLimit exceeds nominalQuota"),
    ],
)
def test_a_bad_queues_file_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(content)
    code = main(["serve", "--demo", "--queues", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
