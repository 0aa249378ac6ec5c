"""Reading a kubeconfig as client-go's clientcmd does, keeping where each credential comes from."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from kilter.kube import kubeconfig as kubeconfigs
from kilter.kube.kubeconfig import User
from kilter.model.errors import InputError


def write(path: Path, **doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", **doc}))
    return path


def entry(name: str, kind: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, kind: body}


def test_in_a_list_the_first_file_to_name_an_entry_wins_and_its_paths_are_relative_to_that_file(
    tmp_path: Path,
) -> None:
    first = write(
        tmp_path / "team" / "config",
        users=[entry("me", "user", {"tokenFile": "token", "client-certificate": "me.crt", "client-key": "me.key"})],
    )
    second = write(
        tmp_path / "home" / "config",
        clusters=[entry("c", "cluster", {"server": "https://10.0.0.1:6443", "certificate-authority": "ca.crt"})],
        users=[entry("me", "user", {"token": "shadowed"})],
        contexts=[entry("ctx", "context", {"cluster": "c", "user": "me"})],
        **{"current-context": "ctx"},
    )
    target = kubeconfigs.read(Path(f"{first}{os.pathsep}{tmp_path / 'absent'}{os.pathsep}{second}"))
    assert target.server == "https://10.0.0.1:6443" and target.ca_file == tmp_path / "home" / "ca.crt"
    team = tmp_path / "team"
    assert target.user == User(token_file=team / "token", cert_file=team / "me.crt", key_file=team / "me.key")


def test_the_context_flag_wins_over_current_context_and_data_fields_are_base64(tmp_path: Path) -> None:
    pem = b"-----BEGIN CERTIFICATE-----\n...\n"
    path = write(
        tmp_path / "config",
        clusters=[
            entry("a", "cluster", {"server": "https://a:6443"}),
            entry(
                "b",
                "cluster",
                {"server": "https://b:6443", "certificate-authority-data": base64.b64encode(pem).decode()},
            ),
        ],
        users=[
            entry("u", "user", {"client-certificate-data": base64.b64encode(b"C").decode(), "client-key-data": "Sw=="})
        ],
        contexts=[
            entry("a", "context", {"cluster": "a", "user": "u"}),
            entry("b", "context", {"cluster": "b", "user": "u"}),
        ],
        **{"current-context": "a"},
    )
    assert kubeconfigs.read(path).server == "https://a:6443"
    target = kubeconfigs.read(path, "b")
    assert (target.server, target.ca_data, target.user.cert_data, target.user.key_data) == (
        "https://b:6443",
        pem.decode(),
        b"C",
        b"K",
    )


@pytest.mark.parametrize(
    ("user", "context", "message"),
    [
        pytest.param({"token": "t"}, "nope", "no context named 'nope'", id="no such context"),
        pytest.param(
            {"auth-provider": {"name": "oidc"}}, None, "auth-provider 'oidc' is not supported", id="auth-provider"
        ),
        pytest.param({"client-key-data": "not base64!"}, None, "client-key-data is not base64", id="bad base64"),
    ],
)
def test_what_kilter_cannot_use_is_refused_in_one_line(
    tmp_path: Path, user: dict[str, Any], context: str | None, message: str
) -> None:
    path = write(
        tmp_path / "config",
        clusters=[entry("c", "cluster", {"server": "https://c:6443"})],
        users=[entry("u", "user", user)],
        contexts=[entry("ctx", "context", {"cluster": "c", "user": "u"})],
        **{"current-context": "ctx"},
    )
    with pytest.raises(InputError) as refused:
        kubeconfigs.read(path, context)
    assert refused.value.message.startswith(f"cannot use {path}: ") and message in refused.value.message


def test_a_kubeconfig_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        kubeconfigs.read(tmp_path / "absent")


def test_outside_a_pod_the_in_cluster_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="KUBERNETES_SERVICE_HOST"):
        kubeconfigs.in_cluster(tmp_path, {})
