"""``kilter serve`` across credential rotations: its watches, its leader Lease and its binds carry on.

The list/watch test server rotates the token it takes (the old one gets 401,
as a projected service-account token or an exec plugin's token past its
life); kilter's credentials come from a token file (the pod's projected
token, a kubeconfig's ``tokenFile``) or from an exec plugin (EKS, GKE, AKS).
Every watch is cut after each rotation, so each one must be opened again
with the new token; the scheduler's Lease (which kilter follows, as the manifests
deploy it) must be read with it; a bind must go
through with it.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.serve import build_app
from tests.extenders.conftest import Served, _Server, cluster_objects, names_args, pod_json, serve_config
from tests.kube.auth_kit import Plugin, kubeconfig
from tests.listwatch import LEASES, PODS, ListWatchServer
from tests.live_mode import RESOURCES, LiveCluster, wait_ready
from tests.topology.builders import CLIQUE, node_dict

LEASE = "kube-system/kube-scheduler"
SCHEDULER = f"{socket.gethostname()}_1f3a"  # kube-scheduler in kilter's pod, as --follow-lease tells it


def until(predicate: Callable[[], object], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not in {timeout_s} s: {what}")
        time.sleep(0.05)


def issuer(tmp_path: Path, server: ListWatchServer, source: str) -> tuple[Path, Callable[[str], None]]:
    """A kubeconfig whose user is ``source``, and how the test hands that source a new token."""
    url = f"http://127.0.0.1:{server.port}"
    if source == "token file":
        token = tmp_path / "token"

        def write(value: str) -> None:
            token.write_text(value)

        write("t0")
        return kubeconfig(tmp_path / "kubeconfig", url, {"tokenFile": str(token)}), write
    plugin = Plugin(tmp_path / "plugin")
    plugin.answer("t0")
    return kubeconfig(tmp_path / "kubeconfig", url, plugin.user()), plugin.answer


@contextmanager
def serving(tmp_path: Path, source: str) -> Iterator[tuple[Served, ListWatchServer, Callable[[str], None]]]:
    with ListWatchServer([*RESOURCES, LEASES], token="t0") as server:
        config, issue = issuer(tmp_path, server, source)
        cluster = LiveCluster(server, config)
        cluster.replace(cluster_objects())
        server.add(scheduler_lease(SCHEDULER))
        app, store = build_app(serve_config(None, kubeconfig=config, follow_lease=LEASE))
        with _Server(app, None) as port:
            wait_ready(store)
            until(app.is_writer, "kilter leads")
            yield Served(app, store, None, port, cluster=cluster), server, issue


def get(served: Served, path: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def scheduler_lease(holder: str) -> dict[str, Any]:
    """kube-scheduler's Lease as the scheduler in kilter's pod (same hostname) or another pod holds it."""
    namespace, name = LEASE.split("/")
    spec = {
        "holderIdentity": holder,
        "leaseDurationSeconds": 15,
        "renewTime": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()),
    }
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def hold(server: ListWatchServer, holder: str) -> None:
    """The scheduler named ``holder`` holds (or renews) the Lease kilter follows."""
    server.update(scheduler_lease(holder))


def node_of(server: ListWatchServer, name: str) -> str:
    (pod,) = [o for o in server.objects(PODS) if o["metadata"]["name"] == name]
    return str(pod["spec"].get("nodeName") or "")


def bind(served: Served, name: str, node: str) -> dict[str, Any]:
    pod = pod_json(name, 4)
    served.post("filter", names_args(pod, [node]))
    meta = pod["metadata"]
    body = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
    status, answer = served.post("bind", body)
    assert status == 200
    return answer  # type: ignore[no-any-return]


def seen(served: Served, node: str) -> Callable[[], bool]:
    return lambda: served.store.node_named(node) is not None


@pytest.mark.parametrize("source", ["token file", "exec plugin"])
def test_a_running_kilter_keeps_its_watches_its_lease_and_its_binds_across_token_rotations(
    tmp_path: Path, source: str
) -> None:
    with serving(tmp_path, source) as (served, server, issue):
        for n in (1, 2, 3):
            issue(f"t{n}")  # the kubelet (or the plugin) has the new token first; the old one expires after
            server.rotate_token(f"t{n}")
            assert server.drop_watches() > 0  # each watch must be opened again, with the new token
            added = f"r3-t{n:02d}"
            server.add(node_dict(added, labels={CLIQUE: "r3"}))
            until(seen(served, added), f"the node added after rotation {n}")
            # kilter writes while the scheduler of its pod holds the Lease: it must keep reading it to know
            hold(server, "another-scheduler-pod_77c2")
            until(lambda: not served.app.is_writer(), f"the Lease seen taken over after rotation {n}")
            hold(server, SCHEDULER)
            until(served.app.is_writer, f"the Lease seen held again after rotation {n}")
            assert bind(served, f"p{n}", f"r1-t{n:02d}")["Error"] == ""
            assert node_of(server, f"p{n}") == f"r1-t{n:02d}"
        assert json.loads(get(served, "/readyz"))["problems"] == []
        metrics = get(served, "/metrics")
        assert "kilter_api_unauthorized_total 0.0" in metrics
        assert "kilter_api_credential_rotations_total 3.0" in metrics


def test_a_401_that_stands_is_counted_and_named_on_readyz_until_kilter_gets_a_token_it_takes(tmp_path: Path) -> None:
    with serving(tmp_path, "token file") as (served, server, issue):
        server.rotate_token("t1")  # kilter's file still holds t0
        server.drop_watches()
        until(lambda: json.loads(get(served, "/readyz"))["problems"], "/readyz names the refusal")
        (problem,) = json.loads(get(served, "/readyz"))["problems"]
        assert problem.startswith("credentials refused: the API server answered 401 Unauthorized to GET /api")
        assert "kilter_api_unauthorized_total 0.0" not in get(served, "/metrics")
        issue("t1")
        until(lambda: json.loads(get(served, "/readyz"))["problems"] == [], "/readyz clear once a call gets through")
