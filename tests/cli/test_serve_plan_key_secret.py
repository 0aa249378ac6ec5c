"""``kilter serve --plan-key-secret``: the Secret is created at start and its key signs every plan record; a
Secret kilter cannot use, or a flag it cannot use it with, ends the command with one line and exit 2."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from kilter.cli.main import main
from kilter.cli.serve import build_app
from kilter.gangs.key_secret import DATA_KEY
from kilter.gangs.keys import PlanKeys
from kilter.model.annotations import PLAN_KEY_ROTATED_AT
from tests.extenders.conftest import cluster_objects, serve_config, write_snapshot
from tests.listwatch import SECRETS, ListWatchServer
from tests.live_mode import kubeconfig

TOKEN = "plan-keys"
REF = "kilter-system/kilter-plan-keys"


@pytest.fixture
def cluster() -> Iterator[ListWatchServer]:
    with ListWatchServer([SECRETS], token=TOKEN) as server:
        yield server


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    path = tmp_path / "snapshot.json"
    write_snapshot(path, cluster_objects())
    return path


def the_secret(cluster: ListWatchServer) -> dict[str, object]:
    return cluster.get_object(SECRETS, "kilter-system", "kilter-plan-keys")


def test_serving_creates_the_secret_and_signs_plan_records_with_its_key(
    tmp_path: Path, cluster: ListWatchServer, snapshot: Path
) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", cluster.port, TOKEN)
    app, _ = build_app(serve_config(snapshot, kubeconfig=config, plan_key_secret=REF))
    secret = the_secret(cluster)
    assert PLAN_KEY_ROTATED_AT in secret["metadata"]["annotations"]  # type: ignore[index]
    key = base64.b64decode(secret["data"][DATA_KEY]).strip()  # type: ignore[index]
    assert app.extender.gangs.keys.sign(b"m") == PlanKeys([key], source="test").sign(b"m")
    assert app.metrics.registry.get_sample_value("kilter_plan_key_secret_failures_total") == 0
    again, _ = build_app(serve_config(snapshot, kubeconfig=config, plan_key_secret=REF))
    assert again.extender.gangs.keys.sign(b"m") == app.extender.gangs.keys.sign(b"m")  # a replica: the same key


def test_a_malformed_secret_ends_serve_with_one_line_and_exit_2(
    tmp_path: Path, cluster: ListWatchServer, snapshot: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.add(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "kilter-plan-keys", "namespace": "kilter-system"},
            "data": {DATA_KEY: base64.b64encode(b"too short\n").decode()},
        }
    )
    config = kubeconfig(tmp_path / "kubeconfig", cluster.port, TOKEN)
    argv = ["serve", "--snapshot", str(snapshot), "--kubeconfig", str(config), "--plan-key-secret", REF]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--plan-key-secret {REF}: data.keys: the key on line 1 is shorter" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        pytest.param(["--plan-key-secret", REF], "--plan-key-secret needs a cluster", id="no cluster"),
        pytest.param(
            ["--plan-key-secret", REF, "--plan-key-file", "keys"],
            "--plan-key-file and --plan-key-secret exclude each other",
            id="both sources",
        ),
        pytest.param(
            ["--plan-key-secret", REF, "--plan-key-rotation", "later"],
            "--plan-key-rotation",
            id="not a duration",
        ),
    ],
)
def test_flags_that_cannot_serve_plan_keys_end_serve_with_one_line_and_exit_2(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--demo", *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_a_rotation_period_within_the_gang_timeout_is_refused(
    tmp_path: Path, cluster: ListWatchServer, snapshot: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", cluster.port, TOKEN)
    argv = ["serve", "--snapshot", str(snapshot), "--kubeconfig", str(config), "--plan-key-secret", REF]
    assert main([*argv, "--gang-timeout", "1h", "--plan-key-rotation", "1h"]) == 2
    assert "--plan-key-rotation must be longer than --gang-timeout" in capsys.readouterr().err
    assert cluster.requests == []  # refused before any call
