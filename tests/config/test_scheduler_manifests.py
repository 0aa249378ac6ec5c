"""config/components/scheduler-extender: what kube-scheduler validates and what kilter relies on, checked against
kilter itself.

The port, the verbs, the device resources and the command line come from
kilter's own parser, server and catalog, so a change on either side that
breaks the deployment fails here rather than in a cluster.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
from pathlib import PurePosixPath
from urllib.parse import urlsplit

import pytest
import yaml

from kilter.cli.main import build_parser
from kilter.cli.serve_config import ServeConfig
from kilter.extenders.server import VERBS
from kilter.topology.catalog import BUILTIN, Catalog
from tests.config.test_rbac_manifests import may_keep_plan_keys_in
from tests.config.yamldocs import COMPONENTS, Obj, component, container, documents, kilter_command, one

MANIFESTS = COMPONENTS / "scheduler-extender"
CONFIG_FILE = MANIFESTS / "kube-scheduler-config.yaml"
README_FILE = MANIFESTS / "README.md"
PROFILE = "kilter-scheduler"
DEFAULT_EXTENDER_TIMEOUT_S = 5.0  # kube-scheduler's DefaultExtenderTimeout


# ---------------------------------------------------------------------------- helpers


_DURATION = re.compile(r"(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))+")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration_s(text: str) -> float:
    """Seconds in a Go duration string ("2s", "1m30s", "500ms"), as metav1.Duration reads it."""
    if not _DURATION.fullmatch(text):
        raise ValueError(f"not a Go duration: {text!r}")
    return sum(float(n) * _UNIT_S[u] for n, u in _DURATION_PART.findall(text))


def _configmap_file(pod_spec: Obj, container: Obj, path: str) -> tuple[str, str]:
    """The (ConfigMap name, key) a container sees at ``path``; only whole-volume mounts without items qualify."""
    target = PurePosixPath(path)
    for mount in container.get("volumeMounts", []):
        if PurePosixPath(mount["mountPath"]) != target.parent:
            continue
        assert "subPath" not in mount, f"{mount['mountPath']}: a subPath mount never sees ConfigMap updates"
        volume = next(v for v in pod_spec["volumes"] if v["name"] == mount["name"])
        assert "configMap" in volume, f"volume {volume['name']} is not a ConfigMap"
        assert "items" not in volume["configMap"], "items would rename the keys"
        return volume["configMap"]["name"], target.name
    raise AssertionError(f"container {container['name']} mounts nothing at {target.parent}")


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def config() -> Obj:
    docs = documents(CONFIG_FILE)
    assert len(docs) == 1, "kube-scheduler-config.yaml holds exactly one document"
    return docs[0]


@pytest.fixture(scope="module")
def extender(config: Obj) -> Obj:
    extenders = config.get("extenders") or []
    assert len(extenders) == 1, "exactly one extender: kilter"
    ext: Obj = extenders[0]
    return ext


@pytest.fixture(scope="module")
def deployment_docs() -> list[Obj]:
    return component("scheduler-extender")


@pytest.fixture(scope="module")
def deployment(deployment_docs: list[Obj]) -> Obj:
    return one(deployment_docs, "Deployment", "kilter-scheduler")


@pytest.fixture(scope="module")
def pod_spec(deployment: Obj) -> Obj:
    spec: Obj = deployment["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def kilter_args(pod_spec: Obj) -> argparse.Namespace:
    return kilter_command(pod_spec)


@pytest.fixture(scope="module")
def default_http_port() -> int:
    port: int = build_parser().parse_args(["serve", "--demo"]).http_port
    return port


# ---------------------------------------------------------------------------- kube-scheduler-config.yaml


def test_config_is_a_v1_kube_scheduler_configuration(config: Obj) -> None:
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"


def test_one_profile_named_kilter_scheduler(config: Obj) -> None:
    assert [p["schedulerName"] for p in config["profiles"]] == [PROFILE]


def test_leader_election_uses_its_own_lease(config: Obj) -> None:
    election = config["leaderElection"]
    assert election["leaderElect"] is True
    assert election["resourceName"] == PROFILE, "not the default scheduler's Lease (kube-scheduler)"
    assert election["resourceNamespace"] == "kube-system"


def test_kilter_writes_while_the_scheduler_of_its_pod_holds_that_lease(
    config: Obj, kilter_args: argparse.Namespace
) -> None:
    election = config["leaderElection"]
    assert kilter_args.follow_lease == f"{election['resourceNamespace']}/{election['resourceName']}"
    assert not kilter_args.leader_elect, "following and campaigning exclude each other"


def test_extenders_see_every_feasible_node(config: Obj) -> None:
    assert config["percentageOfNodesToScore"] == 100


def test_url_points_at_kilter_on_loopback_at_its_default_port(extender: Obj, default_http_port: int) -> None:
    url = urlsplit(extender["urlPrefix"])
    assert url.scheme == "http" and not extender.get("enableHTTPS", False)
    assert url.hostname is not None and ipaddress.ip_address(url.hostname).is_loopback
    assert url.port == default_http_port
    assert url.path.rstrip("/") == "/scheduler"


def test_verbs_are_kilters(extender: Obj) -> None:
    for key in ("filterVerb", "prioritizeVerb", "preemptVerb"):
        assert extender.get(key) in VERBS, f"{key} must name one of kilter's verbs {VERBS}"
    if "bindVerb" in extender:
        assert extender["bindVerb"] in VERBS


def test_at_most_one_extender_binds(config: Obj) -> None:
    assert sum(1 for e in config["extenders"] if e.get("bindVerb")) <= 1


def test_kilter_binds_only_with_an_api_server_to_bind_through(extender: Obj, kilter_args: argparse.Namespace) -> None:
    # Without --in-cluster/--kubeconfig kilter's binder creates no Binding: a pod "bound" by it would stay Pending.
    if extender.get("bindVerb"):
        assert kilter_args.in_cluster or kilter_args.kubeconfig is not None


def test_weight_is_positive_because_prioritize_is_set(extender: Obj) -> None:
    assert extender["prioritizeVerb"]
    assert isinstance(extender["weight"], int) and not isinstance(extender["weight"], bool)
    assert extender["weight"] > 0


def test_node_cache_capable(extender: Obj) -> None:
    assert extender["nodeCacheCapable"] is True


def test_managed_resources_are_the_catalogs_gpu_resources(extender: Obj) -> None:
    names = [r["name"] for r in extender["managedResources"]]
    assert len(names) == len(set(names)), "duplicate managedResources"
    assert set(names) == {"nvidia.com/gpu", "amd.com/gpu"}
    # Every device kind kilter places must reach it, and it must know every kind it is sent.
    assert set(names) == set(Catalog(BUILTIN).device_resources)
    for resource in extender["managedResources"]:
        assert resource["ignoredByScheduler"] is False, "NodeResourcesFit must keep counting GPUs"


def test_http_timeout_is_a_duration_under_the_default(extender: Obj) -> None:
    raw = extender["httpTimeout"]
    assert isinstance(raw, str), "httpTimeout is a duration string such as 2s"
    assert 0 < go_duration_s(raw) < DEFAULT_EXTENDER_TIMEOUT_S


def test_ignorable_is_an_explicit_choice(extender: Obj) -> None:
    assert isinstance(extender.get("ignorable"), bool)


@pytest.mark.parametrize(
    ("text", "seconds"), [("2s", 2.0), ("500ms", 0.5), ("1m30s", 90.0), ("1.5s", 1.5), ("1h", 3600.0)]
)
def test_go_duration(text: str, seconds: float) -> None:
    assert go_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "2", "2 s", "s", "2sec", "-1s"])
def test_go_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        go_duration_s(text)


# ---------------------------------------------------------------------------- deployment.yaml


def test_configmap_embeds_the_same_scheduler_config(deployment_docs: list[Obj], config: Obj) -> None:
    data = one(deployment_docs, "ConfigMap", "kilter-scheduler-config")["data"]
    assert len(data) == 1
    (embedded,) = data.values()
    assert yaml.safe_load(embedded) == config


def test_scheduler_reads_the_mounted_config(deployment_docs: list[Obj], pod_spec: Obj) -> None:
    scheduler = container(pod_spec, "kube-scheduler")
    assert scheduler["image"].startswith("registry.k8s.io/kube-scheduler:v1.")
    argv = [*scheduler.get("command", []), *scheduler.get("args", [])]
    paths = [a.removeprefix("--config=") for a in argv if a.startswith("--config=")]
    assert len(paths) == 1, "one --config=PATH"
    name, key = _configmap_file(pod_spec, scheduler, paths[0])
    configmap = one(deployment_docs, "ConfigMap", name)
    assert key in configmap["data"]


def test_kilter_command_parses_and_matches_the_extender(
    kilter_args: argparse.Namespace, extender: Obj, pod_spec: Obj
) -> None:
    assert kilter_args.command == "serve"
    assert kilter_args.http_port == urlsplit(extender["urlPrefix"]).port
    assert not kilter_args.http_tls, "the extender URL is http (the certificate is for the webhook listener only)"
    assert kilter_args.snapshot is None and kilter_args.in_cluster, "the cluster itself is the state (list/watch)"


def test_kilter_listens_where_the_kubelet_probes_reach(kilter_args: argparse.Namespace, pod_spec: Obj) -> None:
    # httpGet probes connect to the pod IP: a loopback-only listener would fail them all.
    assert not ipaddress.ip_address(kilter_args.address).is_loopback
    kilter = container(pod_spec, "kilter")
    ports = [kilter_args.http_port, kilter_args.grpc_port]  # the webhooks component adds the webhook port
    assert [p["containerPort"] for p in kilter["ports"]] == ports
    probes = {kind: kilter[kind]["httpGet"] for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert probes["startupProbe"]["path"] == "/healthz"
    assert probes["readinessProbe"]["path"] == "/readyz"
    for probe in probes.values():
        assert probe["port"] == kilter_args.http_port
        assert probe.get("scheme", "HTTP") == "HTTP"


def test_kilter_trusts_the_scheduler_on_loopback_and_no_pod_address(
    kilter_args: argparse.Namespace, extender: Obj
) -> None:
    # The verbs answer by the connection's peer address (kilter's trust rule), NetworkPolicy or not: kube-scheduler
    # calls from the loopback address of urlPrefix; a caller from the pod network (any pod IP) must get 403.
    config = ServeConfig.from_args(kilter_args)
    host = urlsplit(extender["urlPrefix"]).hostname
    assert host is not None
    assert config.trust_rule({"client": (host, 40000)}), "kube-scheduler's calls would be refused"
    for network in config.trusted_networks:
        assert ipaddress.ip_network(network).is_loopback, f"{network} lets callers off the pod's loopback in"
    assert config.http_client_ca is None
    assert not config.trust_rule({"client": ("10.244.1.7", 40000)})


def test_the_pods_loopback_is_its_own(pod_spec: Obj) -> None:
    # With hostNetwork the pod's loopback would be the node's: every process on the node would be trusted.
    assert not pod_spec.get("hostNetwork", False)


def test_the_extenders_bodies_fit_kilters_limit_for_node_names(kilter_args: argparse.Namespace, extender: Obj) -> None:
    # nodeCacheCapable sends ~20 bytes a node: 5,000 nodes and a Pod at etcd's 1.5 MiB limit fit the default.
    config = ServeConfig.from_args(kilter_args)
    assert extender["nodeCacheCapable"] is True
    assert config.max_body_bytes >= 5000 * 20 + int(1.5 * 1024 * 1024)


def test_no_service_exposes_kilter(deployment_docs: list[Obj], kilter_args: argparse.Namespace) -> None:
    for service in (d for d in deployment_docs if d.get("kind") == "Service"):
        for port in service["spec"].get("ports", []):
            assert kilter_args.http_port not in (port.get("port"), port.get("targetPort"))
            assert port.get("targetPort") != "extender"


def test_network_policy_selects_the_pod(
    deployment_docs: list[Obj], deployment: Obj, kilter_args: argparse.Namespace
) -> None:
    policy = one(deployment_docs, "NetworkPolicy")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    # Only the webhook port is opened (the apiserver must reach it); everything else stays node, loopback and
    # port-forward traffic.
    for rule in policy["spec"].get("ingress") or []:
        assert rule.get("ports"), "an ingress rule without ports would open every port"
        assert [p["port"] for p in rule["ports"]] == [kilter_args.webhook_port]


def test_the_pod_itself_is_placed_by_the_default_scheduler(pod_spec: Obj) -> None:
    assert pod_spec.get("schedulerName", "default-scheduler") == "default-scheduler"


def test_service_account_holds_the_scheduler_roles(deployment_docs: list[Obj], deployment: Obj, config: Obj) -> None:
    namespace = deployment["metadata"]["namespace"]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    one(deployment_docs, "ServiceAccount", account)
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}

    def bound(binding_kind: str, role_kind: str) -> set[str]:
        return {
            b["roleRef"]["name"]
            for b in deployment_docs
            if b.get("kind") == binding_kind and subject in b["subjects"] and b["roleRef"]["kind"] == role_kind
        }

    assert {"system:kube-scheduler", "system:volume-scheduler"} <= bound("ClusterRoleBinding", "ClusterRole")
    roles = bound("RoleBinding", "Role")
    assert "extension-apiserver-authentication-reader" in roles
    # system:kube-scheduler only allows get/update on the Lease named kube-scheduler.
    lease = config["leaderElection"]["resourceName"]
    grants = [
        rule
        for d in deployment_docs
        if d.get("kind") == "Role" and d["metadata"]["name"] in roles
        for rule in d["rules"]
        if "leases" in rule["resources"] and lease in rule.get("resourceNames", [])
    ]
    assert any({"get", "update"} <= set(rule["verbs"]) for rule in grants), f"no get/update on Lease {lease}"


def test_kilter_keeps_its_plan_keys_in_a_secret_of_its_namespace_that_its_account_may_keep(
    deployment_docs: list[Obj], deployment: Obj, pod_spec: Obj, kilter_args: argparse.Namespace
) -> None:
    namespace = deployment["metadata"]["namespace"]
    assert kilter_args.plan_key_secret == f"{namespace}/kilter-plan-keys" and kilter_args.plan_key_file is None
    assert ServeConfig.from_args(kilter_args).has_cluster, "--plan-key-secret needs a cluster"
    subject = {"kind": "ServiceAccount", "name": pod_spec["serviceAccountName"], "namespace": namespace}
    may_keep_plan_keys_in(deployment_docs, subject, namespace)


def test_the_webhook_lets_this_kilter_and_the_one_beside_volcano_write_plan_records(
    deployment: Obj, pod_spec: Obj, kilter_args: argparse.Namespace
) -> None:
    volcano = one(component("volcano"), "Deployment", "kilter-volcano")
    accounts = [
        (deployment["metadata"]["namespace"], pod_spec["serviceAccountName"]),
        (volcano["metadata"]["namespace"], volcano["spec"]["template"]["spec"]["serviceAccountName"]),
    ]
    assert kilter_args.kilter_user == [f"system:serviceaccount:{ns}:{account}" for ns, account in accounts]


def test_everything_lives_in_kube_system(deployment_docs: list[Obj]) -> None:
    for doc in deployment_docs:
        if doc["kind"] not in ("ClusterRoleBinding", "ClusterRole"):
            assert doc["metadata"]["namespace"] == "kube-system", f"{doc['kind']} {doc['metadata']['name']}"


# ---------------------------------------------------------------------------- README.md


def _choices_table() -> dict[str, str]:
    text = README_FILE.read_text(encoding="utf-8")
    section = text.split("## Choices", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        key = re.search(r"`([^`]+)`", cells[0]) if len(cells) >= 3 else None
        if key is not None:
            rows[key.group(1)] = cells[1].strip("`")
    return rows


def _shown(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_readme_choices_match_the_manifests(config: Obj, extender: Obj, kilter_args: argparse.Namespace) -> None:
    rows = _choices_table()
    assert {"ignorable", "httpTimeout", "weight", "nodeCacheCapable"} <= rows.keys()
    for key, shown in rows.items():
        if key.startswith("--"):
            actual: object = getattr(kilter_args, key.removeprefix("--").replace("-", "_"))
        elif key in extender:
            actual = extender[key]
        elif key in config:
            actual = config[key]
        else:
            assert shown == "(not set)", f"README shows {key} = {shown}, the manifests do not set it"
            continue
        assert shown == _shown(actual), f"README shows {key} = {shown}, the manifests say {actual}"
