"""config/components/volcano: what volcano-scheduler reads and what kilter serves, checked against both.

Volcano reads its configuration leniently: an unknown plugin is skipped, a misspelled
flag or argument is ignored, an unparsable timeout becomes 1s - and one mistake, a
comma-separated managedResources, crashes the scheduler. The upstream names below are
those of volcano-sh/volcano at ed72c7c (after v1.16.0-alpha.1); the port, the verbs, the
device resources, the command line and the queue objects come from kilter itself.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from kilter.cli.main import build_parser
from kilter.cli.serve_config import ServeConfig
from kilter.extenders.volcano import VOLCANO_VERBS
from kilter.extenders.volcano.quota_jobs import CLUSTER_QUEUE_ANNOTATION
from kilter.model import codec
from kilter.model.kueue import ClusterQueue, Cohort
from kilter.quota.tree import build_tree
from kilter.state import snapshot
from kilter.state.live import default_resources
from kilter.topology.catalog import BUILTIN, Catalog
from tests.config.test_rbac_manifests import may_keep_plan_keys_in
from tests.config.test_scheduler_manifests import go_duration_s
from tests.config.yamldocs import COMPONENTS, Obj, component, container, container_argv, documents, one

MANIFESTS = COMPONENTS / "volcano"
CONF_FILE = MANIFESTS / "volcano-scheduler.conf.yaml"
KILTER_FILE = MANIFESTS / "kilter.yaml"
README_FILE = MANIFESTS / "README.md"
EXAMPLE_QUEUE_FILE = COMPONENTS.parents[1] / "examples" / "queues" / "volcano-queue.yaml"

NAMESPACE = "volcano-system"
CONF_CONFIGMAP = "volcano-scheduler-configmap"  # the chart's {{ .Release.Name }}-scheduler-configmap, release volcano
CONF_KEY = "volcano-scheduler.conf"  # base of the chart's basic.scheduler_config_file
SCHEDULER_LABELS = {"app": "volcano-scheduler"}  # installer/helm/chart/volcano/templates/scheduler.yaml
DEFAULT_HTTP_TIMEOUT_S = 1.0  # extender.go: ec.httpTimeout = time.Second

OPTIONAL_VERBS = {"jobEnqueued"}  # extender.jobEnqueuedVerb is read only by Volcano HEAD / v1.16.0-alpha

# pkg/scheduler/plugins/extender/extender.go: every argument key the plugin reads (jobEnqueuedVerb: HEAD only).
EXTENDER_ARGUMENTS = {
    "extender.urlPrefix",
    "extender.httpTimeout",
    "extender.ignorable",
    "extender.managedResources",
    "extender.onSessionOpenVerb",
    "extender.onSessionCloseVerb",
    "extender.predicateVerb",
    "extender.prioritizeVerb",
    "extender.preemptableVerb",
    "extender.reclaimableVerb",
    "extender.queueOverusedVerb",
    "extender.jobEnqueueableVerb",
    "extender.jobEnqueuedVerb",
    "extender.jobReadyVerb",
    "extender.allocateFuncVerb",
    "extender.deallocateFuncVerb",
}
# pkg/scheduler/conf/scheduler_conf.go, PluginOption: the yaml keys of a tier's plugin entry.
PLUGIN_OPTION_KEYS = {
    "name",
    "arguments",
    "enableJobOrder",
    "enableHierarchy",
    "enableJobReady",
    "enableJobPipelined",
    "enableTaskOrder",
    "enablePreemptable",
    "enableReclaimable",
    "enablePreemptive",
    "enableQueueOrder",
    "enabledClusterOrder",
    "enablePredicate",
    "enableBestNode",
    "enableNodeOrder",
    "enableTargetJob",
    "enableReservedNodes",
    "enableJobEnqueued",
    "enabledVictim",
    "enableJobStarving",
    "enabledOverused",
    "enabledAllocatable",
    "enabledHyperNodeOrder",
    "enabledSubJobReady",
    "enabledSubJobPipelined",
    "enabledSubJobOrder",
    "enabledHyperNodeGradient",
}
# The flags that gate the extender's hooks (framework/session_plugins.go). enableJobEnqueued gates both
# JobEnqueueable and JobEnqueued; onSessionOpen/Close and the allocate/deallocate event handlers have none.
EXTENDER_HOOK_FLAGS = {
    "enablePredicate": "predicate",
    "enableNodeOrder": "prioritize",
    "enablePreemptable": "preemptable",
    "enableReclaimable": "reclaimable",
    "enabledOverused": "queueOverused",
    "enableJobEnqueued": "jobEnqueueable",
    "enableJobReady": "jobReady",
}
# pkg/scheduler/plugins/factory.go: the registered plugin names (an unknown one is skipped with an error log).
VOLCANO_PLUGINS = {
    "drf",
    "gang",
    "deviceshare",
    "predicates",
    "priority",
    "nodeorder",
    "conformance",
    "binpack",
    "resource-strategy-fit",
    "tdm",
    "overcommit",
    "sla",
    "task-topology",
    "numa-aware",
    "cdp",
    "rescheduling",
    "usage",
    "pdb",
    "nodegroup",
    "network-topology-aware",
    "proportion",
    "capacity",
    "extender",
    "resourcequota",
}
# pkg/scheduler/actions/factory.go.
VOLCANO_ACTIONS = {"enqueue", "allocate", "preempt", "reclaim", "backfill", "shuffle", "gangpreempt", "gangreclaim"}
# The plugins that register victim functions (AddPreemptableFn / AddReclaimableFn), with the flag that gates them.
VICTIM_VOTERS = {
    "preemptable": ({"priority", "gang", "conformance", "drf", "pdb", "tdm", "cdp"}, "enablePreemptable"),
    "reclaimable": ({"gang", "conformance", "pdb", "cdp", "proportion", "capacity"}, "enableReclaimable"),
}
# Volcano's queue-quota plugins, a second quota model beside kilter's ClusterQueues.
QUEUE_QUOTA_PLUGINS = {"proportion", "capacity"}


# ---------------------------------------------------------------------------- helpers


def _kilter_verb(argument: str) -> str:
    """The verb an ``extender.<verb>Verb`` argument names (``extender.jobReadyVerb`` -> ``jobReady``)."""
    return argument.removeprefix("extender.").removesuffix("Verb")


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


def _selects(selector: Obj, labels: dict[str, str]) -> bool:
    return not selector.get("matchExpressions") and selector["matchLabels"].items() <= labels.items()


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def conf_docs() -> list[Obj]:
    return documents(CONF_FILE)


@pytest.fixture(scope="module")
def conf(conf_docs: list[Obj]) -> Obj:
    configmap = one(conf_docs, "ConfigMap", CONF_CONFIGMAP)
    parsed = yaml.safe_load(configmap["data"][CONF_KEY])
    assert isinstance(parsed, dict), f"{CONF_KEY} must be a YAML mapping"
    return parsed


@pytest.fixture(scope="module")
def tiers(conf: Obj) -> list[list[Obj]]:
    return [tier["plugins"] for tier in conf["tiers"]]


@pytest.fixture(scope="module")
def extender_tier(tiers: list[list[Obj]]) -> int:
    found = [i for i, plugins in enumerate(tiers) for p in plugins if p["name"] == "extender"]
    assert len(found) == 1, "exactly one extender plugin entry"
    return found[0]


@pytest.fixture(scope="module")
def extender(tiers: list[list[Obj]], extender_tier: int) -> Obj:
    entry: Obj = next(p for p in tiers[extender_tier] if p["name"] == "extender")
    return entry


@pytest.fixture(scope="module")
def arguments(extender: Obj) -> Obj:
    args: Obj = extender["arguments"]
    return args


@pytest.fixture(scope="module")
def kilter_docs() -> list[Obj]:
    return component("volcano")


@pytest.fixture(scope="module")
def deployment(kilter_docs: list[Obj]) -> Obj:
    return one(kilter_docs, "Deployment", "kilter-volcano")


@pytest.fixture(scope="module")
def pod_spec(deployment: Obj) -> Obj:
    spec: Obj = deployment["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def pod_labels(deployment: Obj) -> dict[str, str]:
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


@pytest.fixture(scope="module")
def kilter_argv(pod_spec: Obj) -> list[str]:
    argv = container_argv(container(pod_spec, "kilter"))
    assert argv[:1] == ["kilter"], "the kilter container runs the kilter command"
    return argv[1:]


@pytest.fixture(scope="module")
def kilter_args(kilter_argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(kilter_argv)


@pytest.fixture(scope="module")
def service(kilter_docs: list[Obj]) -> Obj:
    return one(kilter_docs, "Service", "kilter-volcano")


@pytest.fixture(scope="module")
def queue_objects(kilter_docs: list[Obj]) -> list[Any]:
    text = one(kilter_docs, "ConfigMap", "kilter-queues")["data"]["queues.yaml"]
    return snapshot.parse_documents(text, source="queues.yaml")


# ---------------------------------------------------------------------------- volcano-scheduler.conf.yaml


def test_the_configmap_is_the_one_volcano_scheduler_mounts(conf_docs: list[Obj]) -> None:
    assert len(conf_docs) == 1
    configmap = one(conf_docs, "ConfigMap", CONF_CONFIGMAP)
    assert configmap["metadata"]["namespace"] == NAMESPACE
    assert list(configmap["data"]) == [CONF_KEY]


def test_actions_are_volcanos_and_use_the_hooks_kilter_serves(conf: Obj) -> None:
    actions = [a.strip() for a in conf["actions"].split(",")]
    assert actions == ["enqueue", "allocate", "preempt", "reclaim", "backfill"]
    assert set(actions) <= VOLCANO_ACTIONS
    # gangpreempt/gangreclaim choose victims through UnifiedEvictableFn, which the extender does not register.
    assert not {"gangpreempt", "gangreclaim"} & set(actions)


def test_every_plugin_is_registered_in_volcano(tiers: list[list[Obj]]) -> None:
    names = [p["name"] for plugins in tiers for p in plugins]
    assert set(names) <= VOLCANO_PLUGINS, f"unknown plugins (Volcano would skip them): {set(names) - VOLCANO_PLUGINS}"
    assert len(names) == len(set(names)), "a plugin listed twice registers its hooks twice"
    assert {"priority", "gang", "conformance"} <= {p["name"] for p in tiers[0]}
    assert {"predicates", "nodeorder"} <= set(names)


def test_plugin_options_are_real_flags(tiers: list[list[Obj]]) -> None:
    # yaml.v2 drops unknown keys silently: "enableOverused: false" would leave the hook on.
    for plugin in (p for plugins in tiers for p in plugins):
        unknown = set(plugin) - PLUGIN_OPTION_KEYS
        assert not unknown, f"{plugin['name']}: not PluginOption keys {unknown}"
        for key, value in plugin.items():
            if key not in ("name", "arguments"):
                assert isinstance(value, bool), f"{plugin['name']}.{key} must be a bool"


def test_extender_is_in_tier_one_with_its_hooks_enabled(extender: Obj, extender_tier: int, arguments: Obj) -> None:
    # Preemptable, Reclaimable and JobEnqueueable stop at the first tier that decides: only in tier 1 is kilter's
    # answer part of every decision.
    assert extender_tier == 0
    for flag, verb in EXTENDER_HOOK_FLAGS.items():
        if arguments.get(f"extender.{verb}Verb"):
            assert extender.get(flag, True) is True, f"{flag}: false would switch off {verb}"


def test_no_later_tier_picks_victims_kilter_refused(tiers: list[list[Obj]], extender_tier: int) -> None:
    # An empty answer from kilter's tier moves the walk to the next tier: no plugin there may pick victims.
    for hook, (voters, flag) in VICTIM_VOTERS.items():
        for plugin in (p for plugins in tiers[extender_tier + 1 :] for p in plugins):
            if plugin["name"] in voters:
                assert plugin.get(flag, True) is False, f"{plugin['name']} would pick {hook} victims in tier 2"


def test_no_second_queue_quota_model(tiers: list[list[Obj]]) -> None:
    plugins = [p for ps in tiers for p in ps]
    assert not {p["name"] for p in plugins} & QUEUE_QUOTA_PLUGINS, "kilter's ClusterQueues are the queue quota"
    assert all(not p.get("enableHierarchy", False) for p in plugins if p["name"] == "drf")


def test_extender_arguments_are_ones_the_plugin_reads(arguments: Obj) -> None:
    unknown = set(arguments) - EXTENDER_ARGUMENTS
    assert not unknown, f"the extender plugin ignores {unknown}"


def test_every_verb_is_set_to_kilters_name_for_it(arguments: Obj) -> None:
    verbs = {_kilter_verb(k): v for k, v in arguments.items() if k.endswith("Verb")}
    for hook, verb in verbs.items():
        assert verb == hook, f"extender.{hook}Verb must be {hook!r}, kilter's /volcano/{hook}"
    missing = set(VOLCANO_VERBS) - OPTIONAL_VERBS - set(verbs)
    assert not missing, f"hooks kilter serves but Volcano would not call: {missing}"


def test_the_configured_verbs_are_the_ones_kilter_serves(arguments: Obj) -> None:
    assert len(VOLCANO_VERBS) == len(set(VOLCANO_VERBS)) == 12
    configured = {v for k, v in arguments.items() if k.endswith("Verb")}
    assert configured | OPTIONAL_VERBS == set(VOLCANO_VERBS)


def test_managed_resources_is_a_list_of_the_catalogs_gpu_resources(arguments: Obj) -> None:
    # mapstructure decodes it into []string; a comma-separated string makes framework.Get call klog.Fatalf.
    names = arguments["extender.managedResources"]
    assert isinstance(names, list), "a YAML list: a string crashes volcano-scheduler"
    assert all(isinstance(n, str) and "," not in n for n in names)
    assert len(names) == len(set(names))
    assert set(names) == {"nvidia.com/gpu", "amd.com/gpu"}
    assert set(names) == set(Catalog(BUILTIN).device_resources)


def test_http_timeout_is_a_go_duration_within_the_default(arguments: Obj) -> None:
    raw = arguments["extender.httpTimeout"]
    assert isinstance(raw, str), "an unparsable or non-string value silently becomes 1s"
    assert 0 < go_duration_s(raw) <= DEFAULT_HTTP_TIMEOUT_S


def test_ignorable_is_an_explicit_bool(arguments: Obj) -> None:
    assert isinstance(arguments.get("extender.ignorable"), bool)


def test_url_prefix_reaches_kilters_volcano_verbs_through_the_service(
    arguments: Obj, service: Obj, pod_spec: Obj, kilter_args: argparse.Namespace
) -> None:
    url = urlsplit(arguments["extender.urlPrefix"])
    assert url.scheme == "http", "the extender plugin has no TLS settings"
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    assert url.hostname in (f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local")
    assert url.path.rstrip("/") == "/volcano"
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == url.port]
    container_ports = {p.get("name"): p["containerPort"] for p in container(pod_spec, "kilter")["ports"]}
    target = port["targetPort"]
    target = container_ports[target] if isinstance(target, str) else target
    assert target == kilter_args.http_port
    assert kilter_args.http_port in container_ports.values()
    assert not kilter_args.http_tls


# ---------------------------------------------------------------------------- kilter.yaml


def test_kilter_command_parses(kilter_args: argparse.Namespace) -> None:
    assert kilter_args.command == "serve"
    assert kilter_args.in_cluster, "PodGroup annotations and events go through the API"
    assert kilter_args.http_port == 8888


def test_queues_are_a_mounted_configmap_and_the_cluster_is_the_state(
    kilter_args: argparse.Namespace, pod_spec: Obj, kilter_docs: list[Obj]
) -> None:
    assert kilter_args.snapshot is None and kilter_args.in_cluster, "the cluster itself is the state (list/watch)"
    kilter = container(pod_spec, "kilter")
    assert kilter_args.queues is not None
    name, key = _configmap_file(pod_spec, kilter, str(kilter_args.queues))
    assert name == "kilter-queues"
    assert key in one(kilter_docs, "ConfigMap", name)["data"]


def test_kilter_listens_where_the_service_and_probes_reach(kilter_args: argparse.Namespace, pod_spec: Obj) -> None:
    assert not ipaddress.ip_address(kilter_args.address).is_loopback
    kilter = container(pod_spec, "kilter")
    probes = {kind: kilter[kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe", "startupProbe")}
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert probes["readinessProbe"]["path"] == "/readyz"
    assert probes["startupProbe"]["path"] == "/healthz"
    container_ports = {p.get("name"): p["containerPort"] for p in kilter["ports"]}
    for probe in probes.values():
        port = probe["port"]
        assert (container_ports[port] if isinstance(port, str) else port) == kilter_args.http_port
        assert probe.get("scheme", "HTTP") == "HTTP"


def test_kilter_trusts_the_pod_network_and_loopback_and_nothing_beyond_private_addresses(
    kilter_args: argparse.Namespace,
) -> None:
    # volcano-scheduler calls from its pod IP over plain HTTP (the plugin has no TLS settings: no client
    # certificate to check), so the verbs are held to the pod network by kilter's trust rule, NetworkPolicy or not.
    config = ServeConfig.from_args(kilter_args)
    assert config.http_client_ca is None and not config.http_tls
    networks = [ipaddress.ip_network(n) for n in config.trusted_networks]
    assert any(n.is_loopback for n in networks), "kubectl port-forward (/debug/volcano) arrives on loopback"
    pod_networks = [n for n in networks if not n.is_loopback]
    assert pod_networks, "volcano-scheduler's pod address must be trusted"
    for network in pod_networks:
        assert network.is_private and network.prefixlen >= 8, f"{network} reaches beyond a cluster's pod network"
    pod_ip = str(next(pod_networks[0].hosts()))
    assert config.trust_rule({"client": (pod_ip, 40000)})
    assert not config.trust_rule({"client": ("203.0.113.9", 40000)}), "an address outside the cluster"


def test_the_pods_loopback_is_its_own(pod_spec: Obj) -> None:
    # With hostNetwork the trusted loopback would be the node's: every process on the node would be trusted.
    assert not pod_spec.get("hostNetwork", False)


def test_readme_shows_the_trusted_networks_of_the_manifest(kilter_args: argparse.Namespace) -> None:
    text = README_FILE.read_text(encoding="utf-8")
    assert f"| kilter `--trusted-networks` | `{kilter_args.trusted_networks}` |" in text


def test_the_volcano_body_limit_fits_a_5000_node_session(kilter_args: argparse.Namespace) -> None:
    # onSessionOpen of 5,004 nodes is ~110 MB (bench/results/volcano.json).
    assert ServeConfig.from_args(kilter_args).volcano_max_body_bytes > 110_000_000


def test_service_selects_the_pod(service: Obj, pod_labels: dict[str, str]) -> None:
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"].get("type", "ClusterIP") == "ClusterIP"


def test_network_policy_admits_only_volcano_scheduler_to_the_http_port(
    kilter_docs: list[Obj], pod_labels: dict[str, str], kilter_args: argparse.Namespace
) -> None:
    policy = one(kilter_docs, "NetworkPolicy")
    assert _selects(policy["spec"]["podSelector"], pod_labels)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    # A podSelector without namespaceSelector: pods of the policy's own namespace, where volcano-scheduler runs.
    assert rule["from"] == [{"podSelector": {"matchLabels": SCHEDULER_LABELS}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": kilter_args.http_port}]
    assert policy["metadata"]["namespace"] == NAMESPACE


def test_the_pod_runs_unprivileged_and_outside_volcano(pod_spec: Obj) -> None:
    assert pod_spec.get("schedulerName", "default-scheduler") == "default-scheduler"
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for each in pod_spec["containers"]:
        context = each["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"]["drop"] == ["ALL"]
        assert {"cpu", "memory"} <= each["resources"]["requests"].keys()
        assert "memory" in each["resources"]["limits"]


def test_rbac_grants_exactly_what_kilter_needs(kilter_docs: list[Obj], deployment: Obj) -> None:
    kilter_docs = [*kilter_docs, *component("base")]  # kilter-read, the live reads every kilter binds
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    one(kilter_docs, "ServiceAccount", account)
    subject = {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    roles = {
        b["roleRef"]["name"]
        for b in kilter_docs
        if b.get("kind") == "ClusterRoleBinding" and subject in b["subjects"] and b["roleRef"]["kind"] == "ClusterRole"
    }
    granted = {
        (group, resource, verb)
        for d in kilter_docs
        if d.get("kind") == "ClusterRole" and d["metadata"]["name"] in roles
        for rule in d["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    wanted = {
        ("", "events", "create"),  # core v1 Events on PodGroups (kilter.extenders.volcano.events)
        *((r.group, r.plural, v) for r in default_resources(Catalog(BUILTIN)) for v in ("list", "watch")),
        ("scheduling.volcano.sh", "podgroups", "patch"),  # the plan's HyperNode annotation
    }
    assert granted == wanted


def test_kilter_keeps_its_plan_keys_in_a_secret_of_its_namespace_that_its_account_may_keep(
    kilter_docs: list[Obj], pod_spec: Obj, kilter_args: argparse.Namespace
) -> None:
    assert kilter_args.plan_key_secret == f"{NAMESPACE}/kilter-plan-keys" and kilter_args.plan_key_file is None
    assert ServeConfig.from_args(kilter_args).has_cluster, "--plan-key-secret needs a cluster"
    subject = {"kind": "ServiceAccount", "name": pod_spec["serviceAccountName"], "namespace": NAMESPACE}
    may_keep_plan_keys_in(kilter_docs, subject, NAMESPACE)


def test_namespaced_objects_live_in_volcano_system(kilter_docs: list[Obj]) -> None:
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "Queue"}
    for doc in kilter_docs:
        if doc["kind"] not in cluster_scoped:
            assert doc["metadata"]["namespace"] == NAMESPACE, f"{doc['kind']} {doc['metadata']['name']}"
        else:
            assert "namespace" not in doc["metadata"], f"{doc['kind']} is cluster-scoped"


def test_example_queues_form_one_cohort_with_gpu_limits(queue_objects: list[Any]) -> None:
    kinds = {(o["apiVersion"], o["kind"]) for o in queue_objects}
    assert kinds == {("kueue.x-k8s.io/v1beta2", "ClusterQueue"), ("kueue.x-k8s.io/v1beta2", "Cohort")}
    cqs = [codec.convert(o, ClusterQueue) for o in queue_objects if o["kind"] == "ClusterQueue"]
    cohorts = [codec.convert(o, Cohort) for o in queue_objects if o["kind"] == "Cohort"]
    # kilter's own tree builder applies Kueue's rules (lendingLimit <= nominalQuota, limits only with a cohort).
    tree = build_tree(cqs, cohorts)
    assert not tree.problems, [str(p) for p in tree.problems]
    assert len(tree.cluster_queues) == 2 and len(cohorts) == 1
    (cohort,) = tree.cohorts.values()
    assert [cq.name for cq in cohort.child_cqs] == sorted(tree.cluster_queues)
    for node in tree.cluster_queues.values():
        gpu = [q for (_, resource), q in node.quotas.items() if resource == "nvidia.com/gpu"]
        assert len(gpu) == 1, f"{node.name}: one nvidia.com/gpu quota"
        (quota,) = gpu
        assert quota.nominal > 0
        assert quota.borrowing_limit is not None and quota.lending_limit is not None
        assert 0 <= quota.lending_limit <= quota.nominal


def test_example_volcano_queue_names_an_example_cluster_queue(queue_objects: list[Any]) -> None:
    queue = one(documents(EXAMPLE_QUEUE_FILE), "Queue")
    assert queue["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    cluster_queues = {o["metadata"]["name"] for o in queue_objects if o["kind"] == "ClusterQueue"}
    assert queue["metadata"]["annotations"][CLUSTER_QUEUE_ANNOTATION] in cluster_queues
    # The reclaim action never offers a non-reclaimable Queue's pods as victims.
    assert queue["spec"].get("reclaimable", True) is True


# ---------------------------------------------------------------------------- README.md


def _choices_table() -> dict[str, str]:
    text = README_FILE.read_text(encoding="utf-8")
    section = text.split("## Choices", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        key = re.fullmatch(r"`([^`]+)`|(\w+)", cells[0]) if len(cells) >= 3 else None
        if key is not None and not set(cells[0]) <= {"-", " "}:
            rows[key.group(1) or key.group(2)] = cells[1].strip("`")
    return rows


def test_readme_choices_match_the_configuration(arguments: Obj, extender_tier: int, conf: Obj) -> None:
    rows = _choices_table()
    assert rows["extender.ignorable"] == str(arguments["extender.ignorable"]).lower()
    assert rows["extender.httpTimeout"] == arguments["extender.httpTimeout"]
    assert rows["extender.managedResources"] == "[" + ", ".join(arguments["extender.managedResources"]) + "]"
    assert rows["tier"] == str(extender_tier + 1)
    assert rows["actions"] == conf["actions"]
    assert rows["proportion"] == "(not set)"
