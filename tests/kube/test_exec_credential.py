"""A kubeconfig's exec plugin (EKS, GKE, AKS): run at the start, again before its credentials expire, again on a
401, and its answers checked as client-go checks them.

The plugin is a script the test writes (``auth_kit.Plugin``): it prints what
the test put in its answer file and logs every run, so the tests count runs
and read what kilter told it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.kube import kubeconfig as kubeconfigs
from kilter.kube.api import ApiServer, connect
from kilter.kube.credentials import LEEWAY_S, of_user
from kilter.model.errors import InputError
from tests.clock import Clock
from tests.kube.auth_kit import EXEC_V1, Plugin, kubeconfig
from tests.listwatch import PODS, ListWatchServer

T0 = 1_900_000_000.0  # the plugin's clock and kilter's agree: the test sets both


@pytest.fixture
def cluster() -> Iterator[ListWatchServer]:
    with ListWatchServer([PODS], token="e1") as server:
        yield server


@pytest.fixture
def plugin(tmp_path: Path) -> Plugin:
    plugin = Plugin(tmp_path / "plugin")
    plugin.answer("e1")
    return plugin


def config(tmp_path: Path, cluster: ListWatchServer, plugin: Plugin, **exec_fields: Any) -> Path:
    return kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{cluster.port}", plugin.user(**exec_fields))


def test_the_plugin_runs_once_and_again_10_seconds_before_the_expiry_it_gave(
    tmp_path: Path, cluster: ListWatchServer, plugin: Plugin
) -> None:
    plugin.answer("e1", expires=T0 + 900)  # ~15 minutes, as aws eks get-token
    wall, clock = Clock(T0), Clock(0.0)
    credentials = of_user(kubeconfigs.read(config(tmp_path, cluster, plugin)).user, tls=None, clock=clock, wall=wall)
    assert credentials.current().authorization == "Bearer e1"
    plugin.answer("e2", expires=T0 + 1800)
    wall.now = T0 + 900 - LEEWAY_S - 1
    assert credentials.current().authorization == "Bearer e1" and len(plugin.runs()) == 1
    wall.now += 1
    assert credentials.current().authorization == "Bearer e2" and len(plugin.runs()) == 2
    wall.now += 600
    assert credentials.current().authorization == "Bearer e2" and len(plugin.runs()) == 2


def test_without_an_expiry_the_plugin_runs_again_only_on_a_401_and_the_call_goes_through(
    tmp_path: Path, cluster: ListWatchServer, plugin: Plugin
) -> None:
    api = connect(config(tmp_path, cluster, plugin))
    assert api.call("GET", "/api/v1/pods")["items"] == [] and len(plugin.runs()) == 1
    plugin.answer("e2")
    cluster.rotate_token("e2")
    assert api.call("GET", "/api/v1/pods")["items"] == []
    assert [r.token for r in cluster.requests] == ["e1", "e1", "e2"] and len(plugin.runs()) == 2
    assert api.credentials is not None and api.credentials.unauthorized == 0 and api.credentials.refreshed == 1


def test_calls_refused_together_run_the_plugin_once(tmp_path: Path, cluster: ListWatchServer, plugin: Plugin) -> None:
    credentials = of_user(kubeconfigs.read(config(tmp_path, cluster, plugin)).user, tls=None)
    in_flight = [credentials.current() for _ in range(5)]
    plugin.answer("e2")
    assert all(credentials.refused(sent) for sent in in_flight)
    assert len(plugin.runs()) == 2  # client-go's maybeRefreshCreds: only a 401 to the current credentials runs it


def test_a_plugin_that_fails_keeps_the_last_token_and_is_named_until_it_runs_again(
    tmp_path: Path, cluster: ListWatchServer, plugin: Plugin
) -> None:
    api = connect(config(tmp_path, cluster, plugin))
    plugin.fail()
    cluster.rotate_token("e2")
    with pytest.raises(Exception, match="401"):
        api.call("GET", "/api/v1/pods")
    assert api.credentials is not None
    assert api.credentials.problems()[1:] == [
        f"credentials not read again: exec plugin {plugin.user()['exec']['command']} exited 3: no credentials for you"
    ]


def test_the_plugin_is_told_it_runs_without_a_terminal_and_given_its_env_and_the_cluster_when_asked(
    tmp_path: Path, cluster: ListWatchServer, plugin: Plugin
) -> None:
    path = kubeconfig(
        tmp_path / "kubeconfig",
        f"http://127.0.0.1:{cluster.port}",
        plugin.user(provideClusterInfo=True, env=[{"name": "TEST_MARK", "value": "from-kubeconfig"}]),
        extensions=[{"name": "client.authentication.k8s.io/exec", "extension": {"audience": "kilter"}}],
    )
    connect(path)
    (run,) = plugin.runs()
    assert run["mark"] == "from-kubeconfig"
    assert run["info"] == {
        "kind": "ExecCredential",
        "apiVersion": EXEC_V1,
        "spec": {
            "interactive": False,
            "cluster": {"server": f"http://127.0.0.1:{cluster.port}", "config": {"audience": "kilter"}},
        },
    }


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        pytest.param(dict(raw="not json"), "did not print JSON", id="not JSON"),
        pytest.param(dict(raw='{"kind": "Status"}'), "did not print an ExecCredential", id="another kind"),
        pytest.param(
            dict(raw='{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", "status": {}}'),
            "answered 'client.authentication.k8s.io/v1beta1'; the kubeconfig asks for client.authentication.k8s.io/v1",
            id="another version",
        ),
        pytest.param(
            dict(raw=f'{{"apiVersion": "{EXEC_V1}", "kind": "ExecCredential"}}'), "without a status", id="no status"
        ),
        pytest.param(dict(), "issued neither a token nor a certificate and key", id="empty status"),
        pytest.param(dict(cert=b"PEM"), "a certificate without its key", id="certificate alone"),
        pytest.param(
            dict(
                raw=f'{{"apiVersion": "{EXEC_V1}", "kind": "ExecCredential", "status": '
                '{"token": "x", "expirationTimestamp": "2030-01-01T00:00:00"}}'
            ),
            "not RFC 3339",
            id="expiry without an offset",
        ),
    ],
)
def test_an_answer_client_go_would_refuse_is_refused_at_the_start_in_one_line(
    tmp_path: Path, cluster: ListWatchServer, plugin: Plugin, answer: dict[str, Any], message: str
) -> None:
    plugin.answer(**answer)
    with pytest.raises(InputError) as refused:
        connect(config(tmp_path, cluster, plugin))
    assert message in refused.value.message and "\n" not in refused.value.message
    assert refused.value.message.startswith(f"cannot use {tmp_path / 'kubeconfig'}: exec plugin ")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param({"interactiveMode": "Always"}, "interactiveMode 'Always' needs a terminal", id="Always"),
        pytest.param({"interactiveMode": ""}, "interactiveMode '' is required for v1", id="v1 without a mode"),
        pytest.param({"apiVersion": "client.authentication.k8s.io/v1alpha1"}, "exec apiVersion", id="v1alpha1 (gone)"),
        pytest.param(
            {"command": "/nonexistent/plugin", "installHint": "install it"}, "not found: install it", id="missing"
        ),
    ],
)
def test_an_exec_block_kilter_cannot_run_is_refused_at_the_start(
    tmp_path: Path, cluster: ListWatchServer, plugin: Plugin, fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        connect(config(tmp_path, cluster, plugin, **fields))


def test_a_v1beta1_plugin_without_a_mode_runs_as_if_available(
    tmp_path: Path, cluster: ListWatchServer, plugin: Plugin
) -> None:
    plugin.answer(
        raw='{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", '
        '"status": {"token": "e1"}}'
    )
    api = connect(
        config(tmp_path, cluster, plugin, apiVersion="client.authentication.k8s.io/v1beta1", interactiveMode=None)
    )
    assert api.call("GET", "/api/v1/pods")["items"] == []


def test_a_static_token_wins_over_the_plugin_as_in_client_go(
    tmp_path: Path, cluster: ListWatchServer, plugin: Plugin
) -> None:
    user = {**plugin.user(), "token": "e1"}
    api: ApiServer = connect(kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{cluster.port}", user))
    assert api.call("GET", "/api/v1/pods")["items"] == [] and plugin.runs() == []
