"""``kilter serve --config``, ``kilter config default|validate``: the Configuration file against ``ServeConfig``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from kilter.cli import configuration, serve
from kilter.cli.configuration import (
    API_VERSION,
    KIND,
    Configuration,
    config_of,
    flag_paths,
    load,
    serve_fields,
    settings,
)
from kilter.cli.main import build_parser, main
from kilter.cli.serve_config import DEFAULTS, ServeConfig
from kilter.model.errors import InputError


def _write(tmp_path: Path, body: dict[str, Any], name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"apiVersion": API_VERSION, "kind": KIND, **body}), encoding="utf-8")
    return path


def _serve(argv: list[str]) -> ServeConfig:
    """What ``kilter serve ARGV`` runs with, as ``serve.run`` reads it."""
    args = build_parser().parse_args(["serve", *argv])
    return configuration.merged(args, configuration.explicit_flags(args.parser, ["serve", *argv]))


# ---------------------------------------------------------------------------- the default file


def test_the_default_file_is_every_default(tmp_path: Path) -> None:
    path = tmp_path / "default.yaml"
    path.write_text(configuration.default_text(), encoding="utf-8")
    assert config_of(path) == DEFAULTS


def test_the_file_reaches_every_setting_once() -> None:
    paths = flag_paths()
    assert set(paths) | {"pool"} == {f.name for f in dataclasses.fields(ServeConfig)}, "pool: its own section"
    assert len(set(paths.values())) == len(paths), "two settings of the file set one field"


def _other(field: FieldInfo) -> Any:
    """A valid value unlike the field's default, of its kind in the file."""
    value, extra = field.default, field.json_schema_extra
    assert isinstance(extra, dict)
    if extra["duration"]:
        return "7h"
    if value is None:
        return 5 if int in get_args(field.annotation) else "/x/y"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 3
    if isinstance(value, list):
        return ["10.0.0.0/8"]
    return {"info": "debug", "text": "json"}.get(value, f"/x/{value}")


def test_each_setting_of_the_file_sets_its_own_field() -> None:
    body: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND}
    expected: dict[str, Any] = {}
    for section, _, name, field in settings():
        value = _other(field)
        body.setdefault(to_camel(section), {})[field.alias or to_camel(name)] = value
        extra = field.json_schema_extra
        assert isinstance(extra, dict)
        expected[str(extra["serve"])] = value
    fields = serve_fields(Configuration.model_validate(body))
    for name, value in expected.items():
        got = fields[name]
        if value == "7h":
            assert got == 7 * 3600, name
        elif isinstance(value, list):
            assert got == tuple(value), name
        else:
            assert str(got) == str(value), name
        assert got != getattr(DEFAULTS, name), name


# ---------------------------------------------------------------------------- refusals, by path


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"listeners": {"httpPorts": 1}}, "listeners.httpPorts: Extra inputs are not permitted"),
        ({"listeners": {"httpPort": "8888"}}, "listeners.httpPort: Input should be a valid integer"),
        ({"listeners": {"httpTls": True}}, "listeners.httpTls: Extra inputs are not permitted"),
        ({"gangs": {"timeout": "five minutes"}}, "gangs.timeout"),
        ({"spares": {"forPreemptible": "true"}}, "spares.forPreemptible: Input should be a valid boolean"),
        ({"logging": {"level": "verbose"}}, "logging.level"),
        ({"splitwait": {"factor": 1}}, "splitwait: Extra inputs are not permitted"),
        ({"listeners": {"trustedNetworks": "10.0.0.0/8"}}, "listeners.trustedNetworks: Input should be a valid list"),
    ],
)
def test_a_bad_field_is_refused_with_its_path(tmp_path: Path, body: dict[str, Any], path: str) -> None:
    with pytest.raises(InputError, match=path.replace(".", r"\.", 1)):
        load(_write(tmp_path, body))


def test_a_wrong_kind_or_version_or_shape_is_refused(tmp_path: Path) -> None:
    for text, why in (
        (f"apiVersion: {API_VERSION}\nkind: KubeSchedulerConfiguration\n", "kind"),
        ("apiVersion: config.kilter.dev/v1\nkind: Configuration\n", "apiVersion"),
        (f"apiVersion: {API_VERSION}\nkind: {KIND}\n---\napiVersion: v1\n", "one Configuration object"),
        ("apiVersion: [\n", "not YAML"),
    ):
        path = tmp_path / "c.yaml"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(InputError, match=why):
            load(path)
    with pytest.raises(InputError, match="cannot read"):
        load(tmp_path / "absent.yaml")


def test_a_contradiction_is_named_by_the_files_paths(tmp_path: Path) -> None:
    path = _write(tmp_path, {"planRecords": {"keyFile": "/keys", "keySecret": "kube-system/kilter-plan-keys"}})
    with pytest.raises(InputError, match=r"planRecords\.keyFile and planRecords\.keySecret exclude each other"):
        config_of(path)
    low = _write(tmp_path, {"listeners": {"maxBodyBytes": 10, "volcanoMaxBodyBytes": 10}}, "low.yaml")
    with pytest.raises(InputError, match=r"listeners\.maxBodyBytes must be at least 1024"):
        config_of(low)


def test_a_contradiction_between_flag_and_file_names_each_where_it_is(tmp_path: Path) -> None:
    path = _write(tmp_path, {"planRecords": {"keySecret": "kube-system/kilter-plan-keys"}})
    with pytest.raises(InputError, match=r"--plan-key-file and planRecords\.keySecret exclude each other"):
        _serve(["--config", str(path), "--plan-key-file", "/keys"])


# ---------------------------------------------------------------------------- flags over the file


def test_flags_given_override_the_file_and_flags_not_given_do_not(tmp_path: Path) -> None:
    path = _write(tmp_path, {"listeners": {"httpPort": 7777, "grpcPort": 7070}, "gangs": {"timeout": "9m"}})
    config = _serve(["--config", str(path), "--grpc-port", "9999"])
    assert (config.http_port, config.grpc_port, config.gang_timeout_s) == (7777, 9999, 540)


def test_a_flag_given_at_its_default_still_overrides_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, {"listeners": {"httpPort": 7777, "headerTimeout": "1m"}})
    config = _serve(["--config", str(path), "--http-port", str(DEFAULTS.http_port), "--header-timeout=10s"])
    assert config.http_port == DEFAULTS.http_port and config.header_timeout_s == 10


def test_without_config_the_flags_alone_decide() -> None:
    assert _serve(["--demo", "--http-port", "7"]) == dataclasses.replace(DEFAULTS, demo=True, http_port=7)


def test_the_policy_in_the_file_reaches_the_servers_objects(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {
            "state": {"demo": True},
            "explain": {"records": 17, "perPod": 2, "nodes": 5000},
            "runtimeEstimates": {"window": 9},
            "splitWait": {"factor": 0.5, "reservations": True},
        },
    )
    app, _ = serve.build_app(config_of(path))
    assert app.extender.gangs.settings.reservations  # every door keeps reservations
    log = app.extender.log
    assert (log.records, log.per_pod, log.entries) == (17, 2, 5000)
    waits = app.extender.gangs.waits
    assert waits is not None and waits.defaults.factor == 0.5
    assert waits.runtimes.learner._window == 9


# ---------------------------------------------------------------------------- kilter config


def test_kilter_config_default_prints_a_file_that_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "default"]) == 0
    out = capsys.readouterr().out
    assert out == configuration.default_text()
    path = tmp_path / "default.yaml"
    path.write_text(out, encoding="utf-8")
    assert main(["config", "validate", str(path)]) == 0
    assert "every setting at its default" in capsys.readouterr().out


def test_kilter_config_validate_says_what_the_file_sets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, {"spares": {"nodesPerDomain": 1}})
    assert main(["config", "validate", str(path)]) == 0
    assert "sets spares.nodesPerDomain: 1" in capsys.readouterr().out


def test_kilter_config_validate_refuses_a_bad_file_with_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, {"gangs": {"timeoutt": "5m"}})
    assert main(["config", "validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kilter config: ") and "gangs.timeoutt: Extra inputs are not permitted" in err
    assert err.count("\n") == 1, "one line, never a traceback"


# ---------------------------------------------------------------------------- what the file and flags make together


def test_a_flag_is_judged_with_the_file_not_alone(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    path = _write(tmp_path, {"listeners": {"httpTLS": True, "tlsCertFile": "/c.pem", "tlsKeyFile": "/k.pem"}})
    config = _serve(["--config", str(path), "--http-client-ca", str(ca)])  # refused alone: it needs --http-tls
    assert config.http_tls and config.http_client_ca == ca


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"listeners": {"httpPort": 70000}}, r"listeners\.httpPort must be 0 \(any free port\) to 65535"),
        ({"listeners": {"headerTimeout": "0s"}}, r"listeners\.headerTimeout must be above zero"),
        ({"gangs": {"timeout": "0s"}}, r"gangs\.timeout must be above zero"),
        ({"state": {"reloadInterval": "0s"}}, r"state\.reloadInterval must be at least"),
        ({"listeners": {"httpTLS": True}}, r"listeners\.httpTLS needs listeners\.tlsCertFile"),
        (
            {"leaderElection": {"leaderElect": True, "followLease": "kube-system/s"}},
            r"leaderElection\.leaderElect and leaderElection\.followLease exclude each other",
        ),
        ({"leaderElection": {"lease": "nonsense"}}, r"leaderElection\.lease must be NAMESPACE/NAME"),
    ],
)
def test_a_file_serve_would_refuse_is_refused_by_validation(tmp_path: Path, body: dict[str, Any], says: str) -> None:
    with pytest.raises(InputError, match=says):
        config_of(_write(tmp_path, body))


def test_a_key_given_twice_or_bytes_that_are_not_text_are_refused(tmp_path: Path) -> None:
    twice = tmp_path / "twice.yaml"
    twice.write_text(
        f"apiVersion: {API_VERSION}\nkind: {KIND}\nlisteners:\n  httpPort: 1\nlisteners:\n  grpcPort: 2\n",
        encoding="utf-8",
    )
    with pytest.raises(InputError, match=r"line 5, column 1: the key 'listeners' is given twice"):
        load(twice)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(f"apiVersion: {API_VERSION}\nkind: {KIND}\n# caf\xe9\n".encode("latin-1"))
    with pytest.raises(InputError, match="not UTF-8"):
        load(latin)


def test_a_state_source_flag_replaces_the_files_other_source(tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshot.yaml"
    path = _write(tmp_path, {"state": {"demo": True}})
    config = _serve(["--config", str(path), "--snapshot", str(snapshot)])
    assert config.snapshot == snapshot and not config.demo


def test_validate_judges_the_file_with_the_deployments_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, {"planRecords": {"keyFile": "/keys"}})
    assert main(["config", "validate", str(path)]) == 0
    capsys.readouterr()
    flags = ["--in-cluster", "--plan-key-secret", "kube-system/kilter-plan-keys"]
    assert main(["config", "validate", str(path), "--", *flags]) == 2
    assert "planRecords.keyFile and --plan-key-secret exclude each other" in capsys.readouterr().err


def test_validate_checks_the_spare_count_against_the_catalog(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, {"spares": {"nodesPerDomain": 1000}})
    assert main(["config", "validate", str(path)]) == 2
    assert "spares.nodesPerDomain must be a whole number from 0 to" in capsys.readouterr().err


# ---------------------------------------------------------------------------- the pool section

POOL = {
    "region": "eu-west",
    "clusters": ["eu-west-workers"],
    "peers": [
        {"name": "us-east", "address": "kilter.us-east.example.com:9090"},
        {"name": "ap-south", "address": "10.1.2.3:9090", "clusters": ["ap-1", "ap-2"], "serverName": "kilter"},
    ],
    "exchangeInterval": "500ms",
    "ttl": "20s",
    "dispatch": {"admitDeadline": "2m", "nominateAtMost": 2},
}
MTLS = {"tlsCertFile": "/tls/tls.crt", "tlsKeyFile": "/tls/tls.key", "grpcClientCA": "/tls/ca.crt"}


def test_the_pool_section_reaches_serve_with_its_durations_and_clusters(tmp_path: Path) -> None:
    config = config_of(_write(tmp_path, {"state": {"inCluster": True}, "listeners": MTLS, "pool": POOL}))
    pool = config.pool
    assert pool is not None and (pool.region, pool.exchange_interval_s, pool.ttl_s) == ("eu-west", 0.5, 20.0)
    assert (pool.admit_deadline_s, pool.nominate_at_most, pool.dispatch) == (120.0, 2, True)
    assert pool.cluster_regions() == {
        "eu-west-workers": "eu-west",
        "us-east": "us-east",
        "ap-1": "ap-south",
        "ap-2": "ap-south",
    }
    assert pool.members == {"eu-west", "us-east", "ap-south"}
    assert config_of(_write(tmp_path, {}, "none.yaml")).pool is None, "no section: no pool"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"peers": [{"name": "eu-west", "address": "a:1"}]}, "pool.peers[0].name: eu-west is named twice"),
        ({"peers": [{"name": "us-east", "address": "nowhere"}]}, "pool.peers[0].address: must be HOST:PORT"),
        ({"peers": [{"name": "US East", "address": "a:1"}]}, "pool.peers[0].name"),
        ({"ttl": "1s"}, "pool.ttl: must be at least 3 exchange intervals"),
        ({"dispatch": {"nominateAtMost": 21}}, "pool.dispatch.nominateAtMost: must be 1 to 20"),
        ({"clusters": ["us-east"]}, "MultiKueueCluster us-east is named for eu-west and us-east"),
        ({"exchangeInterval": "soon"}, "pool.exchangeInterval"),
        ({"gossip": True}, "pool.gossip: Extra inputs are not permitted"),
        ({"region": "eu-west,us-west"}, "pool.region: must be one region name"),
        ({"clusters": [""]}, "is not a MultiKueueCluster name"),
    ],
)
def test_a_bad_pool_section_is_refused_with_the_file_and_the_path(
    tmp_path: Path, change: dict[str, Any], says: str
) -> None:
    path = _write(tmp_path, {"state": {"inCluster": True}, "listeners": MTLS, "pool": {**POOL, **change}})
    with pytest.raises(InputError) as caught:
        config_of(path)
    assert str(path) in str(caught.value) and says in str(caught.value)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"state": {"inCluster": True}, "pool": POOL}, "the exchange needs mutual TLS"),
        (
            {"state": {"inCluster": True}, "listeners": {**MTLS, "grpcPort": 0}, "pool": POOL},
            "listeners.grpcPort must not be 0",
        ),
        ({"state": {"demo": True}, "listeners": MTLS, "pool": POOL}, "pool.dispatch: writes Workloads"),
        (
            {"state": {"inCluster": True}, "listeners": MTLS, "pool": {**POOL, "insecure": True}},
            "pool.insecure: the gRPC listener serves TLS",
        ),
    ],
)
def test_a_pool_serve_could_not_run_is_refused(tmp_path: Path, body: dict[str, Any], says: str) -> None:
    with pytest.raises(InputError, match=says):
        config_of(_write(tmp_path, body))
    insecure = {**body, "pool": {**POOL, "insecure": True}}
    if "mutual TLS" in says:
        assert config_of(_write(tmp_path, insecure, "insecure.yaml")).pool is not None, "insecure allows plaintext"
