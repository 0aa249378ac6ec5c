"""``kilter serve --config FILE``: the Configuration object, strict, and what it sets of ``ServeConfig``.

The file is what a platform team keeps in a ConfigMap beside kilter's
Deployment, spelled as Kubernetes component configurations are (Kueue's
``Configuration``, kube-scheduler's): ``apiVersion: config.kilter.dev/v1alpha1``,
``kind: Configuration``, camelCase keys in sections, durations as ``5m`` or
``30d``. Every field is a ``ServeConfig`` field, named once here with its
section, so the file can say anything the flags can and ``kilter config
default`` prints every one of them with its default and why. Unknown fields,
wrong types and contradictions are refused with the field's path
(``listeners.httpPort``), never dropped: a typo must not leave an old value.

Flags given on the command line override the file, field by field
(``explicit_flags``); so a Deployment can keep its wiring (ports, Secrets,
Leases) in its command and the policy in the ConfigMap.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import re
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import pydantic
import yaml
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from kilter.cli.configuration_pool import POOL_EXAMPLE, PoolSection, check_duration
from kilter.cli.serve_config import DEFAULTS, ServeConfig
from kilter.model.aliasing import check_aliasing, may_alias
from kilter.model.durations import parse_duration
from kilter.model.errors import InputError
from kilter.model.files import read_bounded

__all__ = [
    "API_VERSION",
    "KIND",
    "MAX_CONFIG_BYTES",
    "Configuration",
    "config_of",
    "default_text",
    "explicit_flags",
    "flag_paths",
    "given_fields",
    "load",
    "merged",
    "read",
    "serve_fields",
    "settings",
]

API_VERSION = "config.kilter.dev/v1alpha1"
KIND = "Configuration"
MAX_CONFIG_BYTES = 1024 * 1024  # what one ConfigMap can hold: a larger file was never the operator's Configuration


def _duration_text(seconds: float) -> str:
    """``seconds`` exactly, in the largest unit that divides it (``30d``, ``5m``, ``10s``, ``0.5s``)."""
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _setting(serve: str, doc: str, *, duration: bool = False, alias: str | None = None) -> Any:
    """A field of the file that sets ``ServeConfig.<serve>``; its default is ``DEFAULTS``' value, in file form."""
    value = getattr(DEFAULTS, serve)
    if duration:
        value = _duration_text(value)
    elif isinstance(value, tuple):
        value = list(value)
    elif isinstance(value, Path):
        value = str(value)
    extra: JsonDict = {"serve": serve, "duration": duration}
    return pydantic.Field(default=value, description=doc, json_schema_extra=extra, alias=alias)


class _Section(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True, alias_generator=to_camel)

    @pydantic.field_validator("*", mode="after")
    @classmethod
    def _durations_parse(cls, value: Any, info: pydantic.ValidationInfo) -> Any:
        field = cls.model_fields[info.field_name] if info.field_name else None
        extra = field.json_schema_extra if field is not None else None
        if isinstance(extra, dict) and extra.get("duration"):
            check_duration(value, str(info.field_name))
        return value


class State(_Section):
    """Where kilter's view of the cluster comes from."""

    snapshot: str | None = _setting("snapshot", "A snapshot file as the state, re-read when it changes.")
    demo: bool = _setting("demo", "The embedded demo fleet as the state.")
    kubeconfig: str | None = _setting(
        "kubeconfig", "A kubeconfig: watch its cluster as the state (unless a snapshot) and bind pods through it."
    )
    in_cluster: bool = _setting("in_cluster", "The same with the API server of the cluster kilter's pod runs in.")
    context: str | None = _setting("context", "The kubeconfig's context; null: its current-context.")
    reload_interval: str = _setting("reload_interval_s", "How often the snapshot file is checked.", duration=True)
    platforms: str | None = _setting("platforms", "A YAML file adding or overriding catalog platforms.")
    health_signals: str | None = _setting(
        "health_signals",
        "A YAML file of the node conditions, taints and labels that mark a GPU node unusable; null: kilter's.",
    )
    queues: str | None = _setting(
        "queues", "ClusterQueues, Cohorts and ResourceFlavors (YAML) for Volcano queues when Kueue is not installed."
    )


class Listeners(_Section):
    """The HTTP (extender, Volcano, metrics), HTTPS (webhooks) and gRPC listeners, and who may call them."""

    address: str = _setting("address", "The address every listener binds; 0.0.0.0 is every interface.")
    http_port: int = _setting("http_port", "The HTTP listener: /scheduler/*, /volcano/*, /debug/*, /metrics.")
    webhook_port: int = _setting("webhook_port", "The HTTPS webhook listener (started only with a certificate).")
    grpc_port: int = _setting("grpc_port", "The gRPC listener (kilter.v1.Placement, health, reflection); 0: off.")
    tls_cert_file: str | None = _setting("tls_cert_file", "PEM certificate of the webhook and gRPC listeners.")
    tls_key_file: str | None = _setting("tls_key_file", "Its private key (PEM).")
    http_tls: bool = _setting("http_tls", "Serve the HTTP listener over HTTPS too, same certificate.", alias="httpTLS")
    http_client_ca: str | None = _setting(
        "http_client_ca", "With httpTLS: require client certificates this CA signed.", alias="httpClientCA"
    )
    grpc_client_ca: str | None = _setting(
        "grpc_client_ca", "Require gRPC client certificates this CA signed.", alias="grpcClientCA"
    )
    trusted_networks: list[str] = _setting(
        "trusted_networks",
        "Callers that may use /scheduler/*, /volcano/* and /debug/*, by peer address; /healthz, /readyz and "
        "/metrics answer everyone.",
    )
    probe_networks: list[str] = _setting(
        "probe_networks",
        "The kubelet's addresses (the node's): its probes may use the trusted callers' share of connections.",
    )
    max_body_bytes: int = _setting("max_body_bytes", "The largest /scheduler/* body read.")
    volcano_max_body_bytes: int = _setting("volcano_max_body_bytes", "The largest /volcano/* body read.")
    header_timeout: str = _setting(
        "header_timeout_s", "Close a connection that has not sent a request's headers within this.", duration=True
    )
    body_timeout: str = _setting(
        "body_timeout_s", "Close a connection whose body is not complete this long after its headers.", duration=True
    )
    tls_handshake_timeout: str = _setting(
        "tls_handshake_timeout_s", "Close a TLS connection whose handshake takes longer.", duration=True
    )
    keep_alive_timeout: str = _setting(
        "keep_alive_timeout_s", "Close a kept-alive connection idle for this long.", duration=True
    )
    max_connections: int = _setting(
        "max_connections", "Open connections per listener (gRPC too) and open gRPC streams; more are refused."
    )


class LeaderElection(_Section):
    """Which replica writes: plan records, AdmissionCheck status, Events."""

    leader_elect: bool = _setting("leader_elect", "Campaign for the Lease; only its holder writes.")
    lease: str = _setting("lease", "NAMESPACE/NAME of the Lease of leaderElect.")
    follow_lease: str | None = _setting(
        "follow_lease", "NAMESPACE/NAME of the Lease of the kube-scheduler in this pod: write only while it leads."
    )


class PlanRecords(_Section):
    """The kilter.dev/plan records: who may write them, and the keys that sign them."""

    kilter_users: list[str] = _setting(
        "kilter_user", "Users allowed to write kilter-only annotations; empty: kilter's service account."
    )
    key_file: str | None = _setting("plan_key_file", "A file of the signing keys, one per line.")
    key_secret: str | None = _setting(
        "plan_key_secret", "NAMESPACE/NAME of the Secret of the keys, created, re-read and rotated by kilter."
    )
    key_rotation: str = _setting(
        "plan_key_rotation_s", "Put a new key first in keySecret once the first is this old.", duration=True
    )


class Gangs(_Section):
    """Gang plans: how long one waits for its pods, and how much one namespace's unadmitted gangs may hold."""

    timeout: str = _setting("gang_timeout_s", "Drop a gang's plan if not all its pods bind within this.", duration=True)
    max_namespace_gang_gpus: int | None = _setting(
        "max_namespace_gang_gpus",
        "GPUs the open plans of one namespace's gangs no queue admitted yet may hold; null: no cap for gangs whose "
        "pods kilter sees, half the fleet for pods it does not see yet.",
        alias="maxNamespaceGangGPUs",
    )
    max_namespace_gang_plans: int = _setting(
        "max_namespace_gang_plans", "Open plans of one namespace's gangs no queue admitted yet."
    )


class SplitWaitSection(_Section):
    """The split-wait rule where no job, ClusterQueue or Cohort sets kilter.dev/split-wait."""

    factor: float = _setting(
        "split_wait",
        "A preferred gang whose best plan spans more scale-up domains than it needs waits for fewer up to factor x "
        "slowdown x extra domains x its expected runtime; 0: never.",
    )
    max: str = _setting("split_wait_max_s", "The longest such a wait lasts.", duration=True)
    slowdown: float = _setting("split_slowdown", "How much slower a gang runs per extra domain (0.2: 20%).")
    reservations: bool = _setting("reservations", "Give each queue's oldest multi-node gang a kept reservation.")


class Spares(_Section):
    """Spare nodes kept free per scale-up domain for repairs, where no ResourceFlavor, ClusterQueue or Cohort
    sets them."""

    nodes_per_domain: int = _setting("spare_nodes_per_domain", "Spare nodes per scale-up domain.")
    for_preemptible: bool = _setting(
        "spares_for_preemptible", "Lend the spares to preemptible pods, taken back when a repair needs them."
    )


class LifecycleSection(_Section):
    """The lifecycle controller: nodes moved through kilter.dev/lifecycle states (docs/lifecycle.md)."""

    enabled: bool = _setting("lifecycle", "Run it (the leader writes node labels and Events).")
    failures: int = _setting("lifecycle_failures", "Health failures within window that make a ready node degraded.")
    window: str = _setting("lifecycle_window_s", "The window those failures are counted in.", duration=True)
    sustained: str = _setting(
        "lifecycle_sustained_s", "How long one failure may last before the node is degraded anyway.", duration=True
    )
    suite: str = _setting("lifecycle_suite", "The qualification suite whose passed makes a node ready; empty: any.")
    interval: str = _setting(
        "lifecycle_interval_s", "Time between two rounds (node moves, maintenance requests' drains).", duration=True
    )
    max_unavailable_domains: int = _setting(
        "maintenance_max_unavailable",
        "Domains a maintenance request (kilter.dev/maintenance on nodes) takes out at once.",
    )
    step_duration: str = _setting(
        "maintenance_step_s",
        "How long a requested domain is out once drained, re-qualification included.",
        duration=True,
    )
    max_wait: str = _setting(
        "maintenance_max_wait_s", "The longest a request's step waits for jobs to end.", duration=True
    )
    eviction_timeout: str = _setting(
        "maintenance_eviction_timeout_s",
        "How long a refused eviction is retried before the request stops.",
        duration=True,
    )


class RuntimeEstimateSettings(_Section):
    """What a gang without a declared runtime is expected to take: learned from finished Kueue Workloads."""

    window: int = _setting(
        "runtime_window", "Finished Workloads per ClusterQueue and gang-size class the median is taken over."
    )


class Explain(_Section):
    """What /debug/explain and kubectl kilter explain keep of kilter's decisions."""

    records: int = _setting("explain_records", "Decision records kept in all; the least recently decided pods go.")
    per_pod: int = _setting("explain_per_pod", "Records kept per pod.")
    nodes: int = _setting("explain_nodes", "Node verdicts kept across all records (about 13 bytes each).")


class Logging(_Section):
    """kilter's log."""

    level: Literal["debug", "info", "warning", "error"] = _setting("log_level", "The threshold of every logger.")
    format: Literal["text", "json"] = _setting(
        "log_format", "text, or json: one object per line with the gang, pod and workload keys (needs a restart)."
    )


class Configuration(pydantic.BaseModel):
    """``config.kilter.dev/v1alpha1`` Configuration: every setting of ``kilter serve``."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True, alias_generator=to_camel)

    api_version: Literal["config.kilter.dev/v1alpha1"]
    kind: Literal["Configuration"]
    state: State = State()
    listeners: Listeners = Listeners()
    leader_election: LeaderElection = LeaderElection()
    plan_records: PlanRecords = PlanRecords()
    gangs: Gangs = Gangs()
    split_wait: SplitWaitSection = SplitWaitSection()
    spares: Spares = Spares()
    runtime_estimates: RuntimeEstimateSettings = RuntimeEstimateSettings()
    explain: Explain = Explain()
    logging: Logging = Logging()
    lifecycle: LifecycleSection = LifecycleSection()
    pool: PoolSection | None = None

    SECTIONS: ClassVar[tuple[str, ...]] = (
        "state",
        "listeners",
        "leader_election",
        "plan_records",
        "gangs",
        "split_wait",
        "spares",
        "runtime_estimates",
        "explain",
        "logging",
        "lifecycle",
    )


def settings() -> Iterator[tuple[str, type[_Section], str, pydantic.fields.FieldInfo]]:
    """(section name, section model, field name, field) of every setting, in the file's order."""
    for section in Configuration.SECTIONS:
        model = Configuration.model_fields[section].annotation
        assert isinstance(model, type) and issubclass(model, _Section)
        for name, field in model.model_fields.items():
            yield section, model, name, field


def _serve_name(field: pydantic.fields.FieldInfo) -> str:
    extra = field.json_schema_extra
    assert isinstance(extra, dict)
    return str(extra["serve"])


def flag_paths() -> dict[str, str]:
    """``ServeConfig`` field -> its path in the file (``http_port`` -> ``listeners.httpPort``)."""
    return {
        _serve_name(field): f"{to_camel(section)}.{field.alias or to_camel(name)}"
        for section, _, name, field in settings()
    }


def serve_fields(config: Configuration) -> dict[str, Any]:
    """The ``ServeConfig`` fields the file sets, each converted to its field's type (durations to seconds)."""
    fields: dict[str, Any] = {}
    for section, _, name, field in settings():
        value = getattr(getattr(config, section), name)
        serve = _serve_name(field)
        extra = field.json_schema_extra
        assert isinstance(extra, dict)
        if extra["duration"]:
            value = parse_duration(value, path=flag_paths()[serve])
        elif isinstance(value, list):
            value = tuple(value)
        elif isinstance(value, str) and serve in _PATHS:
            value = Path(value)
        fields[serve] = value
    if config.pool is not None:
        fields["pool"] = config.pool.settings()
    return fields


_PATHS = frozenset(f.name for f in dataclasses.fields(ServeConfig) if "Path" in str(f.type))
"""The ``ServeConfig`` fields that hold a file's path (the file spells them as strings)."""


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping: YAML keeps the last silently, and a second
    ``listeners:`` block would drop the first without a word."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _errors(e: pydantic.ValidationError) -> str:
    lines = []
    for error in e.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        lines.append(f"{where}: {message}" if where else message)
    return "; ".join(lines)


def read(path: Path) -> bytes:
    """The bytes of a regular file of at most ``MAX_CONFIG_BYTES`` (never a FIFO or device); InputError otherwise."""
    return read_bounded(path, MAX_CONFIG_BYTES)


def load(path: Path, data: bytes | None = None) -> Configuration:
    """The Configuration in ``path`` (or ``data``, its bytes); InputError naming the file and each bad field."""
    if data is None:
        data = read(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte {e.start})") from None
    try:
        docs = [d for d in yaml.load_all(text, Loader=_UniqueKeys) if d is not None]
        if may_alias(text):
            check_aliasing(docs, str(path))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{path}: not YAML{where}: {problem}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be a Configuration") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        found = f"{len(docs)} documents" if len(docs) != 1 else f"a {type(docs[0]).__name__}"
        raise InputError(f"{path}: expected one Configuration object, found {found}")
    try:
        return Configuration.model_validate(docs[0])
    except pydantic.ValidationError as e:
        raise InputError(f"{path}: {_errors(e)}") from None


def config_of(path: Path, flags: dict[str, Any] | None = None, data: bytes | None = None) -> ServeConfig:
    """The ``ServeConfig`` of the file at ``path`` (or of ``data``, its bytes) with ``flags`` (given on the command
    line) over it.

    A contradiction (both key sources, a body limit below 1 KiB) is reported with the file's paths for the
    fields the file set, the flags' names for the ones given as flags."""
    try:
        file_fields = serve_fields(load(path, data))
    except InputError as e:
        message = e.message if e.message.startswith(f"{path}:") else f"{path}: {e.message}"
        raise InputError(message) from None
    flags = flags or {}
    try:
        return ServeConfig(**{**file_fields, **flags})
    except InputError as e:
        message = e.message
        for serve, where in flag_paths().items():
            flag = "--" + serve.removesuffix("_s").replace("_", "-")
            if serve not in flags:
                message = re.sub(rf"{re.escape(flag)}(?![\w-])", where, message)
        raise InputError(f"{path}: {message}") from None


def given_fields(args: argparse.Namespace, given: Sequence[str]) -> dict[str, Any]:
    """The ``ServeConfig`` fields the flags named in ``given`` (parser dests: ``header_timeout``) set, read as
    ``ServeConfig.from_args`` reads them (``header_timeout_s``: seconds)."""
    from_flags = ServeConfig.fields_from_args(args)
    fields = {f.name for f in dataclasses.fields(ServeConfig)}
    chosen = {dest if dest in fields else f"{dest}_s" for dest in given}
    out = {f: from_flags[f] for f in sorted(chosen & fields)}
    for pair in (("snapshot", "demo"), ("kubeconfig", "in_cluster")):  # one flag of a pair replaces the file's other
        for given_one, other in (pair, pair[::-1]):
            if given_one in out and other not in out:
                out[other] = getattr(DEFAULTS, other)
    return out


def merged(args: argparse.Namespace, given: Sequence[str]) -> ServeConfig:
    """``kilter serve``'s record: ``ServeConfig.from_args`` alone, or with ``--config`` the file with the flags
    named in ``given`` (the parser's dests of flags the command line gave) over it."""
    if args.config is None:
        return ServeConfig.from_args(args)
    return config_of(args.config, given_fields(args, given))


def explicit_flags(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """The dests of the flags ``argv`` gives itself (not by default): ``argv`` parsed again with no defaults."""
    quiet = argparse.ArgumentParser(add_help=False)
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            clone = copy.copy(action)
            clone.default, clone.required = argparse.SUPPRESS, False
            quiet._add_action(clone)
    seen, _ = quiet.parse_known_args(list(argv))
    return sorted(vars(seen))


def default_text() -> str:
    """A complete Configuration with every default, each field preceded by what it does (``kilter config
    default``)."""
    lines = [
        "# kilter serve --config FILE: every setting with its default. Flags given on the command line override",
        "# the file; `kilter config validate FILE` checks one. Durations: 90s, 5m, 36h, 30d.",
        f"apiVersion: {API_VERSION}",
        f"kind: {KIND}",
    ]
    current = None
    for section, model, name, field in settings():
        if section != current:
            current = section
            summary = " ".join((model.__doc__ or "").split("\n\n")[0].split())
            lines.extend(f"# {text}" for text in textwrap.wrap(summary, 112))
            lines.append(f"{to_camel(section)}:")
        for text in textwrap.wrap(field.description or "", 110):
            lines.append(f"  # {text}")
        value = yaml.safe_dump(field.default, default_flow_style=True).strip().removesuffix("...").strip()
        lines.append(f"  {field.alias or to_camel(name)}: {value}")
    lines.extend(POOL_EXAMPLE.splitlines())
    return "\n".join(lines) + "\n"
