"""Tokens that rotate: a token file is read again on client-go's schedule, and a 401 is met with a fresh reading.

Real files and the list/watch test server over loopback; where the schedule
matters the credentials get an injected clock, so no test waits a minute.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kilter.kube import kubeconfig as kubeconfigs
from kilter.kube.api import ApiError, ApiServer, connect
from kilter.kube.credentials import FILE_PERIOD_S, LEEWAY_S, RETRY_S, Credentials, of_user
from kilter.kube.kubeconfig import User
from tests.clock import Clock
from tests.kube.auth_kit import kubeconfig
from tests.listwatch import PODS, ListWatchServer

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}}
TEST_AGENT = "credentials-tests"  # not kilter serve's: these requests are the test's, not calls RBAC must grant


@pytest.fixture
def cluster() -> Iterator[ListWatchServer]:
    with ListWatchServer([PODS], token="t1") as server:
        yield server


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("t1\n")
    return path


@pytest.fixture
def api(tmp_path: Path, cluster: ListWatchServer, token_file: Path) -> ApiServer:
    config = kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{cluster.port}", {"tokenFile": str(token_file)})
    return connect(config, user_agent=TEST_AGENT)


def tokens(cluster: ListWatchServer) -> list[str]:
    return [r.token for r in cluster.requests]


def rotate(cluster: ListWatchServer, token_file: Path, token: str) -> None:
    """The kubelet writes the new token first; the old one expires after."""
    token_file.write_text(token)
    cluster.rotate_token(token)


def test_a_token_file_is_read_again_once_its_token_is_50_seconds_old_and_not_before(token_file: Path) -> None:
    clock = Clock()
    credentials = of_user(User(token_file=token_file), tls=None, clock=clock)
    assert credentials.current().authorization == "Bearer t1"
    token_file.write_text("t2")
    clock.now += FILE_PERIOD_S - LEEWAY_S - 0.1  # 49.9 s: client-go's cache still holds the token
    assert credentials.current().authorization == "Bearer t1"
    clock.now += 0.1
    assert credentials.current().authorization == "Bearer t2"
    assert credentials.refreshed == 1


def test_a_token_file_that_cannot_be_read_keeps_the_last_token_and_says_so_until_it_can(token_file: Path) -> None:
    clock = Clock()
    credentials = of_user(User(token_file=token_file), tls=None, clock=clock)
    credentials.current()
    token_file.unlink()
    clock.now += FILE_PERIOD_S
    assert credentials.current().authorization == "Bearer t1"
    assert credentials.refresh_errors == 1
    assert credentials.problems() == [
        f"credentials not read again: cannot read {token_file}: No such file or directory"
    ]
    token_file.write_text("t2")
    assert credentials.current().authorization == "Bearer t1"  # not tried again within RETRY_S
    clock.now += RETRY_S
    assert credentials.current().authorization == "Bearer t2"
    assert credentials.problems() == []


def test_a_call_refused_with_401_is_sent_once_more_with_the_token_file_read_at_once(
    api: ApiServer, cluster: ListWatchServer, token_file: Path
) -> None:
    assert api.call("GET", "/api/v1/pods")["items"] == []
    rotate(cluster, token_file, "t2")
    assert api.call("GET", "/api/v1/pods")["items"] == []
    assert tokens(cluster) == ["t1", "t1", "t2"]  # the refused GET, then the same GET with the new token
    assert api.credentials is not None and api.credentials.unauthorized == 0 and api.credentials.problems() == []


def test_a_write_refused_with_401_is_sent_once_more_and_done_once(
    api: ApiServer, cluster: ListWatchServer, token_file: Path
) -> None:
    rotate(cluster, token_file, "t2")
    created = api.call("POST", "/api/v1/namespaces/ml/pods", POD)  # the apiserver authenticates before anything
    assert created["metadata"]["name"] == "p" and [r.method for r in cluster.requests] == ["POST", "POST"]
    assert len(cluster.objects(PODS)) == 1


def test_a_watch_refused_with_401_is_opened_again_with_the_token_file_read_at_once(
    api: ApiServer, cluster: ListWatchServer, token_file: Path
) -> None:
    rotate(cluster, token_file, "t2")
    conn, response = api.stream("/api/v1/pods?watch=1&resourceVersion=0&timeoutSeconds=5", timeout_s=10)
    try:
        cluster.add({**POD, "metadata": {"name": "q", "namespace": "ml"}})
        event = json.loads(response.readline())
    finally:
        conn.close()
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "q")
    assert tokens(cluster) == ["t1", "t2"]


def test_a_401_that_stands_is_counted_and_named_until_a_call_gets_through(
    api: ApiServer, cluster: ListWatchServer, token_file: Path
) -> None:
    credentials = api.credentials
    assert credentials is not None
    cluster.rotate_token("t9")  # a token kilter cannot get: the file still holds t1
    with pytest.raises(ApiError) as refused:
        api.call("GET", "/api/v1/pods?limit=5")
    assert refused.value.code == 401 and "Unauthorized" in str(refused.value)
    assert tokens(cluster) == ["t1"]  # read again, nothing new: not sent twice
    with pytest.raises(ApiError):
        api.stream("/api/v1/pods?watch=1", timeout_s=5)
    assert credentials.unauthorized == 2
    assert credentials.problems() == [
        "credentials refused: the API server answered 401 Unauthorized to GET /api/v1/pods after kilter read its "
        "credentials again (2 refused so far)"
    ]
    token_file.write_text("t9")
    assert api.call("GET", "/api/v1/pods")["items"] == []
    assert credentials.problems() == [] and credentials.unauthorized == 2


def test_calls_refused_together_read_the_token_file_once(token_file: Path) -> None:
    clock = Clock()
    credentials = of_user(User(token_file=token_file), tls=None, clock=clock)
    first, second = credentials.current(), credentials.current()  # two calls in flight with t1
    token_file.write_text("t2")
    assert credentials.refused(first)  # read again: t2 is new
    token_file.write_text("t3")
    assert credentials.refused(second)  # read since it was sent: t2 is new to it, the file is not read again
    assert credentials.current().authorization == "Bearer t2"


def test_in_a_pod_the_service_accounts_projected_token_is_a_file_read_again(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("projected")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    target = kubeconfigs.in_cluster(tmp_path, env)
    assert target.server == "https://10.96.0.1:443" and target.user == User(token_file=tmp_path / "token")
    clock = Clock()
    credentials = of_user(target.user, tls=None, clock=clock)
    assert credentials.current().authorization == "Bearer projected"
    (tmp_path / "token").write_text("renewed")
    clock.now += FILE_PERIOD_S
    assert credentials.current().authorization == "Bearer renewed"


def test_a_token_written_in_the_kubeconfig_is_presented_as_it_is(tmp_path: Path, cluster: ListWatchServer) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{cluster.port}", {"token": "t1"})
    api = connect(config, user_agent=TEST_AGENT)
    assert api.call("GET", "/api/v1/pods")["items"] == [] and tokens(cluster) == ["t1"]
    assert isinstance(api.credentials, Credentials) and api.credentials.sources[0].what == "the kubeconfig's token"
