"""Every overlay of config/ as ``kubectl kustomize`` builds it: valid objects that fit together, production-ready.

Each built object is validated against the OpenAPI schema of every supported Kubernetes version (the
``kubernetes-validate`` package, strict: an unknown field is an error), or, for Kueue and cert-manager kinds,
against the strict models of tests/config/crds.py. Then the references between objects are followed (accounts,
roles, volumes, Services, selectors, webhooks, issuers), and each Deployment is held to the production defaults:
two replicas spread over nodes, a PodDisruptionBudget, probes on kilter's /healthz and /readyz, resources, the
Pod Security "restricted" profile, a NetworkPolicy, system-cluster-critical. The kilter command of every
Deployment is parsed by kilter's own parser. Skips, saying why, where kubectl is absent.
"""

from __future__ import annotations

import argparse
import copy
import re
import tomllib
from collections import Counter
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec
import pytest
from kubernetes_validate.utils import ValidationError, validate

from kilter.cli import configuration
from kilter.cli.main import build_parser
from tests.config.crds import MODELS, check
from tests.config.yamldocs import OVERLAYS, Obj, container_argv, kilter_command, overlay

SUPPORTED_KUBERNETES = ("1.33", "1.34", "1.35", "1.36", "1.37")
PART_OF = ("app.kubernetes.io/part-of", "kilter")

# Upstream's roles, present in every cluster: bound to, never created.
BUILT_IN_ROLES = {
    ("ClusterRole", "system:kube-scheduler"),
    ("ClusterRole", "system:volume-scheduler"),
    ("Role", "extension-apiserver-authentication-reader"),
}
# Pod Security "restricted": the volume types it allows, and the one capability a container may add.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
RESTRICTED_CAPABILITIES = {"NET_BIND_SERVICE"}


# ---------------------------------------------------------------------------- helpers


def _objects(name: str) -> list[Obj]:
    built = overlay(name)
    assert built, f"config/overlays/{name} builds nothing"
    return built


def _key(obj: Obj) -> tuple[str, str | None, str]:
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


def _find(objs: list[Obj], kind: str, namespace: str | None, name: str) -> Obj | None:
    return next((o for o in objs if _key(o) == (kind, namespace, name)), None)


def _deployments(objs: list[Obj]) -> list[Obj]:
    return [o for o in objs if o["kind"] == "Deployment"]


def _pod(deployment: Obj) -> Obj:
    spec: Obj = deployment["spec"]["template"]["spec"]
    return spec


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    match = selector.get("matchLabels", selector) if "matchExpressions" not in selector else None
    assert match is not None, "kilter's selectors are matchLabels only"
    return bool(match) and match.items() <= labels.items()


def _kilter(pod: Obj) -> Obj | None:
    return next((c for c in pod["containers"] if c["name"] == "kilter"), None)


def kilter_args(pod: Obj) -> argparse.Namespace:
    return kilter_command(pod)


@pytest.fixture(params=OVERLAYS)
def built(request: pytest.FixtureRequest) -> list[Obj]:
    return _objects(request.param)


# ---------------------------------------------------------------------------- schemas


def test_every_overlay_is_there() -> None:
    wanted = {"scheduler-extender", "volcano", "webhooks", "self-signed", "kueue-admission-check", "all"}
    assert wanted <= set(OVERLAYS)


@pytest.mark.parametrize("version", SUPPORTED_KUBERNETES)
def test_every_object_is_valid_for_every_supported_kubernetes(built: list[Obj], version: str) -> None:
    for obj in built:
        if (obj["apiVersion"], obj["kind"]) in MODELS:
            check(obj)
            continue
        try:
            validate(obj, version, strict=True)
        except ValidationError as e:
            raise AssertionError(f"{_key(obj)} on Kubernetes {version}: {e.message} at {list(e.path)}") from e


def test_the_schema_check_refuses_a_misspelled_field() -> None:
    deployment = copy.deepcopy(_deployments(_objects("scheduler-extender"))[0])
    _pod(deployment)["containers"][0]["resource"] = {}  # resources, misspelled
    with pytest.raises(ValidationError):
        validate(deployment, SUPPORTED_KUBERNETES[-1], strict=True)
    issuer = next(o for o in _objects("webhooks") if o["kind"] == "Issuer")
    with pytest.raises(msgspec.ValidationError, match="selfsigned"):
        check({**issuer, "spec": {"selfsigned": {}}})


def test_every_object_is_labelled_and_unique(built: list[Obj]) -> None:
    for obj in built:
        assert obj["metadata"].get("labels", {}).get(PART_OF[0]) == PART_OF[1], _key(obj)
    duplicates = [k for k, n in Counter(_key(o) for o in built).items() if n > 1]
    assert not duplicates


# ---------------------------------------------------------------------------- references


def test_every_role_a_binding_names_exists_and_every_account_it_binds(built: list[Obj]) -> None:
    for binding in (o for o in built if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = binding["roleRef"]
        if (ref["kind"], ref["name"]) in BUILT_IN_ROLES:
            continue
        namespace = binding["metadata"]["namespace"] if ref["kind"] == "Role" else None
        assert _find(built, ref["kind"], namespace, ref["name"]), f"{_key(binding)} binds missing {ref}"
        for subject in binding["subjects"]:
            if subject["kind"] == "ServiceAccount":
                assert _find(built, "ServiceAccount", subject["namespace"], subject["name"]), _key(binding)


def _certs_args(built: list[Obj]) -> list[argparse.Namespace]:
    """The command lines of the overlay's ``kilter certs`` Deployments."""
    return [a for d in _deployments(built) if (a := kilter_args(_pod(d))).command == "certs"]


def test_every_pod_runs_as_an_account_with_its_volumes_there(built: list[Obj]) -> None:
    certificates = {(o["metadata"]["namespace"], o["spec"]["secretName"]) for o in built if o["kind"] == "Certificate"}
    certificates |= {(a.secret.split("/")[0], a.secret.split("/")[1]) for a in _certs_args(built)}
    for deployment in _deployments(built):
        namespace, pod = deployment["metadata"]["namespace"], _pod(deployment)
        assert _find(built, "ServiceAccount", namespace, pod["serviceAccountName"]), _key(deployment)
        for volume in pod.get("volumes", []):
            if "configMap" in volume:
                assert _find(built, "ConfigMap", namespace, volume["configMap"]["name"]), volume
            if "secret" in volume:
                assert (namespace, volume["secret"]["secretName"]) in certificates, f"nothing makes {volume}"
        mounted = {m["name"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
        assert mounted == {v["name"] for v in pod.get("volumes", [])}, "every volume mounted, every mount a volume"


def test_every_service_reaches_a_port_kilter_listens_on(built: list[Obj]) -> None:
    for service in (o for o in built if o["kind"] == "Service"):
        namespace = service["metadata"]["namespace"]
        pods = [
            _pod(d)
            for d in _deployments(built)
            if d["metadata"]["namespace"] == namespace
            and _selects(service["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])
        ]
        assert len(pods) == 1, f"{_key(service)} selects {len(pods)} Deployments"
        args = kilter_args(pods[0])
        listening = {args.http_port, args.grpc_port} | ({args.webhook_port} if args.tls_cert_file else set())
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in listening, f"{_key(service)} -> {port['targetPort']}, kilter: {listening}"


def test_every_webhook_calls_a_service_of_the_overlay_and_something_gives_it_the_ca(built: list[Obj]) -> None:
    kept = {
        f"{kind.removesuffix('WebhookConfiguration').lower()}/{name}"
        for a in _certs_args(built)
        for ref in a.webhook_configuration
        for kind, name in [ref.split("/")]
    }
    for config in (o for o in built if o["kind"].endswith("WebhookConfiguration")):
        ref = f"{config['kind'].removesuffix('WebhookConfiguration').lower()}/{config['metadata']['name']}"
        injected = config["metadata"].get("annotations", {}).get("cert-manager.io/inject-ca-from")
        assert bool(injected) != (ref in kept), f"{ref}: cert-manager or kilter certs gives the apiserver the CA"
        for webhook in config["webhooks"]:
            service_ref = webhook["clientConfig"]["service"]
            service = _find(built, "Service", service_ref["namespace"], service_ref["name"])
            assert service is not None, webhook["name"]
            assert service_ref.get("port", 443) in {p["port"] for p in service["spec"]["ports"]}
    for a in _certs_args(built):  # kilter certs names the Service the webhooks call
        assert _find(built, "Service", *a.service.split("/")) is not None


def test_every_certificate_names_an_issuer_of_the_overlay(built: list[Obj]) -> None:
    for cert in (o for o in built if o["kind"] == "Certificate"):
        ref = cert["spec"]["issuerRef"]
        assert _find(built, ref.get("kind", "Issuer"), cert["metadata"]["namespace"], ref["name"]), _key(cert)


# ---------------------------------------------------------------------------- production defaults


def test_every_deployment_has_two_spread_replicas_and_a_budget(built: list[Obj]) -> None:
    assert _deployments(built)
    for deployment in _deployments(built):
        namespace, labels = deployment["metadata"]["namespace"], deployment["spec"]["template"]["metadata"]["labels"]
        replicas = deployment["spec"]["replicas"]
        assert replicas >= 2, _key(deployment)
        keys = {c["topologyKey"] for c in _pod(deployment).get("topologySpreadConstraints", [])}
        assert "kubernetes.io/hostname" in keys and "topology.kubernetes.io/zone" in keys
        budgets = [
            b
            for b in built
            if b["kind"] == "PodDisruptionBudget"
            and b["metadata"]["namespace"] == namespace
            and _selects(b["spec"]["selector"], labels)
        ]
        assert len(budgets) == 1, _key(deployment)
        assert 1 <= budgets[0]["spec"]["minAvailable"] < replicas, "a drain may take one, never all"


def test_every_deployment_is_critical_probed_and_sized(built: list[Obj]) -> None:
    for deployment in _deployments(built):
        pod = _pod(deployment)
        assert pod["priorityClassName"] == "system-cluster-critical", "a scheduler's helper must not be evicted first"
        for container in pod["containers"]:
            resources = container["resources"]
            assert {"cpu", "memory"} <= resources["requests"].keys() and "memory" in resources["limits"]
            assert "livenessProbe" in container, container["name"]
        kilter = _kilter(pod)
        assert kilter is not None
        args = kilter_args(pod)
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
            get = kilter[probe]["httpGet"]
            assert (get["path"], get["port"]) == (path, args.http_port), probe


def test_every_pod_meets_pod_security_restricted(built: list[Obj]) -> None:
    for deployment in _deployments(built):
        pod = _pod(deployment)
        for key in ("hostNetwork", "hostPID", "hostIPC", "hostUsers"):
            assert pod.get(key, key == "hostUsers") is (key == "hostUsers"), key
        pod_security = pod.get("securityContext", {})
        assert not pod_security.get("sysctls")
        for volume in pod.get("volumes", []):
            assert set(volume) - {"name"} <= RESTRICTED_VOLUMES, volume
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False and not security.get("privileged", False)
            assert security["capabilities"]["drop"] == ["ALL"]
            assert set(security["capabilities"].get("add", [])) <= RESTRICTED_CAPABILITIES
            assert security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) is True
            assert security.get("runAsUser", pod_security.get("runAsUser", 1)) != 0
            seccomp = security.get("seccompProfile", pod_security.get("seccompProfile", {}))
            assert seccomp.get("type") in ("RuntimeDefault", "Localhost"), container["name"]
            assert security.get("readOnlyRootFilesystem") is True, container["name"]
            assert not any(p.get("hostPort") for p in container.get("ports", []))


def test_every_pod_is_behind_a_network_policy(built: list[Obj]) -> None:
    for deployment in _deployments(built):
        namespace, labels = deployment["metadata"]["namespace"], deployment["spec"]["template"]["metadata"]["labels"]
        policies = [
            p
            for p in built
            if p["kind"] == "NetworkPolicy"
            and p["metadata"]["namespace"] == namespace
            and _selects(p["spec"]["podSelector"], labels)
        ]
        assert len(policies) == 1 and "Ingress" in policies[0]["spec"]["policyTypes"], _key(deployment)


def test_every_kilter_command_parses(built: list[Obj]) -> None:
    for deployment in _deployments(built):
        args = kilter_args(_pod(deployment))
        assert args.command in ("serve", "certs") and args.in_cluster
        assert args.command != "serve" or args.snapshot is None


def test_every_kilter_runs_the_image_make_image_builds_and_no_registry_nothing_publishes_to(built: list[Obj]) -> None:
    root = Path(__file__).resolve().parents[2]
    version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    made = re.search(r"^IMG \?= kilter:\$\(VERSION\)$", (root / "Makefile").read_text(), re.MULTILINE)
    assert made, "make image names the image kilter:<version>"
    kilter_containers = [c for d in _deployments(built) for c in _pod(d)["containers"] if c["name"] == "kilter"]
    assert kilter_containers and {c["image"] for c in kilter_containers} == {f"kilter:{version}"}


def test_every_kilter_reads_its_policy_from_a_mounted_configmap_that_validates(
    built: list[Obj], tmp_path: Path
) -> None:
    for deployment in _deployments(built):
        namespace, pod = deployment["metadata"]["namespace"], _pod(deployment)
        kilter = _kilter(pod)
        assert kilter is not None
        argv = container_argv(kilter)[1:]
        args = build_parser().parse_args(argv)
        if args.command != "serve":
            continue
        assert args.config is not None, "the policy lives in a ConfigMap, re-read when it changes"
        target = PurePosixPath(str(args.config))
        mount = next(m for m in kilter["volumeMounts"] if PurePosixPath(m["mountPath"]) == target.parent)
        assert "subPath" not in mount, "a subPath mount never sees the ConfigMap change"
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        configmap = _find(built, "ConfigMap", namespace, volume["configMap"]["name"])
        assert configmap is not None and "items" not in volume["configMap"]
        local = tmp_path / f"{namespace}-{target.name}"
        local.write_text(configmap["data"][target.name], encoding="utf-8")
        given = configuration.explicit_flags(args.parser, argv)
        config = configuration.config_of(local, configuration.given_fields(args, given))
        assert config.in_cluster and config.snapshot is None
