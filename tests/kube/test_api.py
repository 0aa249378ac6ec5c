"""Calls to the API server: list pages share a kept-alive connection, refusals carry the server's message."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from kilter.kube.api import ApiError, ApiServer
from kilter.kube.protobuf import ACCEPT, MEDIA_TYPE
from tests.listwatch import PODS, ListWatchServer, _Handler

TOKEN = "api-token"


@pytest.fixture
def server() -> Iterator[ListWatchServer]:
    with ListWatchServer([PODS], token=TOKEN) as s:
        yield s


def api_for(server: ListWatchServer) -> ApiServer:
    # Paths the test picks to exercise the client: not calls of kilter's (tests/config/test_rbac_proof.py).
    return ApiServer("http", "127.0.0.1", server.port, {"Authorization": f"Bearer {TOKEN}"}, user_agent="api-tests")


def test_calls_within_keep_alive_share_one_connection_and_others_do_not(server: ListWatchServer) -> None:
    api = api_for(server)
    with api.keep_alive():
        for _ in range(5):
            assert api.call_raw("GET", "/api/v1/pods?limit=2")[1] == "application/json"
    assert server.connections == 1
    for _ in range(2):
        api.call_raw("GET", "/api/v1/pods")
    assert server.connections == 3


def test_a_kept_connection_the_server_closed_is_replaced(
    server: ListWatchServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_Handler, "timeout", 0.2)  # the server drops a connection idle this long
    api = api_for(server)
    with api.keep_alive():
        api.call_raw("GET", "/api/v1/pods")
        time.sleep(0.6)
        raw, media = api.call_raw("GET", "/api/v1/pods")
    assert media == "application/json" and b'"PodList"' in raw
    assert server.connections == 2


def test_a_protobuf_refusal_carries_the_status_message(server: ListWatchServer) -> None:
    with pytest.raises(ApiError) as refused:
        api_for(server).call_raw("GET", "/api/v1/pods?continue=not-a-token", accept=ACCEPT)
    assert refused.value.code == 400 and "continue" in str(refused.value)
    last = server.requests[-1]
    assert last.accept == ACCEPT


def test_pods_come_back_as_protobuf_when_asked(server: ListWatchServer) -> None:
    raw, media = api_for(server).call_raw("GET", "/api/v1/pods", accept=ACCEPT)
    assert media == MEDIA_TYPE and raw.startswith(b"k8s\x00")
