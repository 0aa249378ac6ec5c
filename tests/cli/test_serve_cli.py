"""``kilter serve`` refuses bad setups with one line and exit code 2, before it listens anywhere."""

from __future__ import annotations

import asyncio
import gc
import resource
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.listeners import ensure_file_limit
from kilter.cli.main import build_parser, main
from kilter.cli.serve import build_app
from kilter.cli.serve_config import ServeConfig
from kilter.model.errors import InputError
from tests.extenders.conftest import cluster_objects, make_certificates, serve_config, write_snapshot


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["serve", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "no cluster to serve"),
        (("--snapshot", "/nonexistent/snapshot.yaml"), "cannot read /nonexistent/snapshot.yaml"),
        (("--demo", "--tls-cert-file", "cert.pem"), "--tls-cert-file and --tls-key-file go together"),
        (("--demo", "--gang-timeout", "soon"), "'soon' is not a duration"),
        (("--demo", "--http-tls"), "--http-tls needs --tls-cert-file and --tls-key-file"),
        (("--demo", "--max-body-bytes", "10"), "--max-body-bytes must be at least 1024"),
        (("--demo", "--volcano-max-body-bytes", "10"), "--volcano-max-body-bytes must be at least 1024"),
        (("--demo", "--header-timeout", "0s"), "--header-timeout must be above zero"),
        (("--demo", "--body-timeout", "never"), "'never' is not a duration"),
        (("--demo", "--max-connections", "0"), "--max-connections must be at least 1"),
        (("--demo", "--trusted-networks", "10.0.0.0/8,pods"), "--trusted-networks: 'pods' is not a CIDR"),
        (("--demo", "--http-client-ca", "ca.crt"), "--http-client-ca needs --http-tls"),
        (("--demo", "--kubeconfig", "/nonexistent/kubeconfig"), "cannot use /nonexistent/kubeconfig"),
        (("--demo", "--max-namespace-gang-gpus", "0"), "--max-namespace-gang-gpus must be at least 1"),
        (("--demo", "--max-namespace-gang-plans", "0"), "--max-namespace-gang-plans must be at least 1"),
    ],
)
def test_bad_setups_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    code, err = run(capsys, *args)
    assert code == 2 and message in err and err.count("\n") == 1


def test_an_unreadable_certificate_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("not a certificate")
    key.write_text("not a key")
    code, err = run(capsys, "--demo", "--tls-cert-file", str(cert), "--tls-key-file", str(key))
    assert code == 2 and "cannot load the TLS certificate" in err


def test_by_default_only_loopback_callers_are_trusted() -> None:
    rule = ServeConfig().trust_rule
    assert (
        rule({"client": ("127.0.0.1", 1)})
        and rule({"client": ("::1", 1)})
        and rule({"client": ("::ffff:127.0.0.9", 1)})
    )
    assert not rule({"client": ("10.0.0.1", 1)}) and not rule({"client": None})
    assert rule({}), "no client at all: an in-process call, not a network caller"


def test_the_flags_parse_to_the_configs_own_defaults() -> None:
    args = build_parser().parse_args(["serve", "--snapshot", "cluster.yaml"])
    assert ServeConfig.from_args(args) == ServeConfig(snapshot=Path("cluster.yaml"))


def test_every_flag_reaches_its_field() -> None:
    argv = ["serve", "--demo", "--http-port", "1", "--address", "127.0.0.1", "--webhook-port", "2"]
    argv += ["--kilter-user", "u1", "--kilter-user", "u2", "--max-body-bytes", "2048", "--in-cluster"]
    argv += ["--volcano-max-body-bytes", "4096", "--header-timeout", "3s", "--body-timeout", "1m"]
    argv += ["--tls-handshake-timeout", "2s", "--keep-alive-timeout", "500ms", "--max-connections", "64"]
    argv += ["--http-tls", "--http-client-ca", "ca.crt", "--trusted-networks", "10.244.0.0/16, fd00::/8"]
    argv += ["--context", "c", "--leader-elect", "--lease", "ns/l", "--queues", "q.yaml"]
    argv += ["--gang-timeout", "1h30m", "--reload-interval", "250ms", "--log-level", "debug", "--platforms", "p.yaml"]
    argv += ["--max-namespace-gang-gpus", "40", "--max-namespace-gang-plans", "3", "--spare-nodes-per-domain", "2"]
    argv += ["--tls-cert-file", "c.crt", "--tls-key-file", "c.key", "--log-format", "json"]
    config = ServeConfig.from_args(build_parser().parse_args(argv))
    assert config == ServeConfig(
        demo=True,
        http_port=1,
        address="127.0.0.1",
        webhook_port=2,
        kilter_user=("u1", "u2"),
        max_body_bytes=2048,
        volcano_max_body_bytes=4096,
        header_timeout_s=3.0,
        body_timeout_s=60.0,
        tls_handshake_timeout_s=2.0,
        keep_alive_timeout_s=0.5,
        max_connections=64,
        http_tls=True,
        http_client_ca=Path("ca.crt"),
        tls_cert_file=Path("c.crt"),
        tls_key_file=Path("c.key"),
        log_format="json",
        trusted_networks=("10.244.0.0/16", "fd00::/8"),
        in_cluster=True,
        context="c",
        leader_elect=True,
        lease="ns/l",
        queues=Path("q.yaml"),
        gang_timeout_s=5400.0,  # 1h30m = 3600 + 1800 s
        reload_interval_s=0.25,
        log_level="debug",
        platforms=Path("p.yaml"),
        max_namespace_gang_gpus=40,
        max_namespace_gang_plans=3,
        spare_nodes_per_domain=2,
    )


def test_the_namespace_gang_caps_default_to_half_the_fleet_and_32_plans(capsys: pytest.CaptureFixture[str]) -> None:
    config = ServeConfig.from_args(build_parser().parse_args(["serve", "--demo"]))
    assert config.gang_limits.max_plans_per_namespace == 32
    assert config.gang_limits.gpu_cap(152) == 76  # None: half of whatever the fleet has
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--max-namespace-gang-gpus N" in shown and "half the fleet's GPUs for pods it does not show yet" in shown
    assert "--max-namespace-gang-plans N" in shown and "(default 32)" in shown


def test_an_unreadable_client_ca_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cert, key, _ = make_certificates(tmp_path)
    args = ("--demo", "--tls-cert-file", str(cert), "--tls-key-file", str(key), "--http-tls")
    code, err = run(capsys, *args, "--http-client-ca", str(tmp_path / "missing.pem"))
    assert code == 2 and "client CA" in err and "missing.pem" in err and err.count("\n") == 1


def test_the_file_limit_is_raised_to_fit_the_caps_or_the_caps_are_refused() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert ensure_file_limit(1) == soft  # already enough: left alone
    if hard != resource.RLIM_INFINITY:
        with pytest.raises(InputError, match="--max-connections"):
            ensure_file_limit(hard)


def test_the_snapshot_watch_is_held_from_startup_and_cancelled_at_shutdown(tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, cluster_objects())
    app, _ = build_app(serve_config(snapshot))

    async def lifespan() -> None:
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        sent: asyncio.Queue[str] = asyncio.Queue()

        async def send(message: dict[str, Any]) -> None:
            await sent.put(message["type"])

        await inbox.put({"type": "lifespan.startup"})
        serving = asyncio.create_task(app({"type": "lifespan"}, inbox.get, send))  # type: ignore[arg-type]
        assert await sent.get() == "lifespan.startup.complete"
        gc.collect()  # the loop keeps tasks only weakly: kilter must hold its own
        watches = [t for t in asyncio.all_tasks() if t.get_name() == "snapshot-watch"]
        assert len(watches) == 1 and not watches[0].done()
        await inbox.put({"type": "lifespan.shutdown"})
        assert await sent.get() == "lifespan.shutdown.complete"
        await serving
        await asyncio.gather(*watches, return_exceptions=True)
        assert watches[0].cancelled()

    asyncio.run(lifespan())
