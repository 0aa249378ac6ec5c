"""``kilter serve --leader-elect``: two replicas, one Lease; only the holder writes, and a clean stop hands over."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kilter.cli.main import main
from kilter.cli.serve import build_app
from kilter.extenders.server import App
from tests.extenders.conftest import _Server, cluster_objects, serve_config, write_snapshot
from tests.fakeapi import FakeApi
from tests.kube.test_leader import NAME, NAMESPACE, LeaseStore, serving
from tests.live_mode import kubeconfig


@pytest.fixture
def leases() -> Iterator[tuple[LeaseStore, FakeApi]]:
    store = LeaseStore()
    with serving(store.respond) as server:
        yield store, server


def replica(tmp_path: Path, port: int, name: str) -> App:
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, cluster_objects())
    config = kubeconfig(tmp_path / f"kubeconfig-{name}", port, name)
    app, _ = build_app(serve_config(snapshot, kubeconfig=config, leader_elect=True, lease="kilter-system/kilter"))
    return app


def until(predicate: object, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def _asked_for_the_lease(api: FakeApi, replica: str) -> bool:
    return any(c.authorization == f"Bearer {replica}" and "/leases" in c.path for c in list(api.calls))


def test_one_replica_writes_and_hands_over_when_it_stops(tmp_path: Path, leases: tuple[LeaseStore, FakeApi]) -> None:
    store, api = leases
    first, second = replica(tmp_path, api.port, "one"), replica(tmp_path, api.port, "two")
    assert not first.is_writer() and not second.is_writer()  # nobody writes before it has won the Lease
    first_server = _Server(first, None)
    first_server.__enter__()
    try:
        assert until(first.is_writer)
        with _Server(second, None):
            assert until(lambda: _asked_for_the_lease(api, "two"))  # the second replica has tried, and lost
            assert first.is_writer() and not second.is_writer()
            lease = store.leases["kilter"]
            assert lease["metadata"]["namespace"] == "kilter-system"
            assert lease["spec"]["leaseDurationSeconds"] == 15
            first_server.__exit__(None, None, None)  # a clean stop releases the Lease...
            assert not first.is_writer()
            assert until(second.is_writer, timeout_s=5.0)  # ...so the other replica need not wait 15 s
    finally:
        if first_server.thread.is_alive():
            first_server.__exit__(None, None, None)


def test_leader_election_without_a_cluster_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--demo", "--leader-elect"]) == 2
    assert "--leader-elect needs a cluster" in capsys.readouterr().err


def test_following_the_schedulers_lease_writes_while_the_scheduler_in_this_pod_holds_it(
    tmp_path: Path, leases: tuple[LeaseStore, FakeApi]
) -> None:
    store, api = leases
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, cluster_objects())
    config = kubeconfig(tmp_path / "kubeconfig", api.port, "kilter")
    app, _ = build_app(serve_config(snapshot, kubeconfig=config, follow_lease=f"{NAMESPACE}/{NAME}"))

    def held_by(holder: str) -> None:
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "resourceVersion": str(store.version)},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": f"{holder}-{time.time()}"},
        }
        store.leases[NAME] = lease

    held_by(f"{socket.gethostname()}_1f3a")  # kube-scheduler in this pod (same hostname) leads
    with _Server(app, None):
        assert until(app.is_writer)
        held_by("another-scheduler-pod_77c2")
        assert until(lambda: not app.is_writer())
    assert store.count("PUT", "kilter") == store.count("POST", "kilter") == 0


def test_campaigning_and_following_at_once_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", 1, "kilter")
    argv = ["serve", "--demo", "--kubeconfig", str(config), "--leader-elect", "--follow-lease", "kube-system/x"]
    assert main(argv) == 2
    assert "exclude each other" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(["--leader-elect", "--lease", "kilter-system/.."], id="a lease named .."),
        pytest.param(["--leader-elect", "--lease", "kilter-system/Kilter_Lease"], id="a lease name with _"),
        pytest.param(["--leader-elect", "--lease", "kilter%2Fsystem/kilter"], id="an escaped slash in the namespace"),
        pytest.param(["--follow-lease", "kube-system/kube scheduler"], id="a followed lease name with a space"),
        pytest.param(["--follow-lease=-kube-system/kube-scheduler"], id="a namespace starting with -"),
    ],
)
def test_a_lease_no_api_server_would_accept_is_refused_at_startup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", 1, "kilter")  # port 1: nothing is ever asked of it
    assert main(["serve", "--demo", "--kubeconfig", str(config), *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
