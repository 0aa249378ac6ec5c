"""Least privilege, proven: every API call kilter made in the live-mode tests against what the overlays grant.

Each request ``kilter serve``'s code sends (User-Agent ``kilter/<version>``) to the list/watch test server is
recorded (``tests.listwatch.KILTER_CALLS``) while the live-mode tests run: the reflectors, bindings, evictions,
plan records and their keys' Secret, Events, the AdmissionCheck controller, Lease following. Turned into what
the apiserver authorizes (group, resource/subresource, verb), that set must equal what kilter's ClusterRoles
and Roles grant in the overlays: nothing kilter calls is missing, nothing granted goes unused. kube-scheduler's
own rights (the built-in roles it is bound to, and the update of its Lease) are its, not kilter's.

This test runs after every other one (``after_live``). When the session is not the whole suite (a path, ``-k``,
``-m``), it runs the whole suite itself in a child pytest (minutes), and reads what that recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kilter.kube.api import CERTS_AGENT, SERVER_AGENT
from tests.config.test_rbac_manifests import attributes
from tests.config.yamldocs import ROOT, Obj, overlay
from tests.conftest import RECORD_ENV
from tests.listwatch import KILTER_CALLS

pytestmark = pytest.mark.after_live

Grant = tuple[str, str, str]  # (API group, resource[/subresource], verb)

# kube-scheduler's, in the pod it shares with kilter: bound to, never kilter's to justify.
SCHEDULER_ROLES = {"system:kube-scheduler", "system:volume-scheduler", "extension-apiserver-authentication-reader"}
SCHEDULER_LEASE = ("coordination.k8s.io", "leases", "update")  # kube-scheduler renews its Lease; kilter only reads it


def _whole_suite(config: pytest.Config) -> bool:
    """Whether this session runs every test (``make test``, plain ``pytest``): no paths but the test root, no
    selection; then the recording is complete when this test, ordered last, reads it."""
    paths = [Path(a.split("::")[0]).resolve() for a in config.args]  # PYTEST_ADDOPTS' paths included
    option = config.option
    narrowed = (
        option.keyword,
        option.markexpr,
        option.deselect,
        option.ignore,
        option.ignore_glob,
        getattr(option, "lf", False),
        getattr(option, "stepwise", False),
    )
    return all(p in (ROOT, ROOT / "tests") for p in paths) and not any(narrowed)


@pytest.fixture(scope="module")
def calls(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str, str]]:
    if _whole_suite(request.config):
        return list(KILTER_CALLS)
    record = tmp_path_factory.mktemp("rbac") / "calls.json"
    env = {**os.environ, RECORD_ENV: str(record)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--ignore={__file__}", "tests"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    recorded: list[tuple[str, str, str]] = [tuple(c) for c in json.loads(record.read_text(encoding="utf-8"))]
    return recorded


def _called(calls: list[tuple[str, str, str]], agent: str = SERVER_AGENT) -> set[Grant]:
    """What the calls of ``agent`` (kilter serve's, or kilter certs') ask the apiserver to authorize."""
    out: set[Grant] = set()
    for who, method, url in calls:
        if who != agent:
            continue
        a = attributes(method, url)
        if a is not None:  # discovery: system:discovery's, granted to everyone
            out.add((a.group, a.resource, a.verb))
    return out


def _granted(objs: list[Obj], account: str) -> set[Grant]:
    """What the roles bound to ``account`` (namespace/name) grant, kube-scheduler's own left out."""
    namespace, name = account.split("/")
    subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    refs = {
        (b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in objs
        if b["kind"] in ("RoleBinding", "ClusterRoleBinding") and subject in b["subjects"]
    }
    grants = {
        (group, resource, verb)
        for role in objs
        if (role["kind"], role["metadata"]["name"]) in refs and role["metadata"]["name"] not in SCHEDULER_ROLES
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    return grants - {SCHEDULER_LEASE} if name == "kilter-scheduler" else grants


@pytest.fixture(scope="module")
def grants() -> dict[str, set[Grant]]:
    return {
        "kube-system/kilter-scheduler": _granted(overlay("all"), "kube-system/kilter-scheduler"),
        "volcano-system/kilter-volcano": _granted(overlay("volcano"), "volcano-system/kilter-volcano"),
        "kube-system/kilter-certs": _granted(overlay("self-signed"), "kube-system/kilter-certs"),
    }


AGENTS = {"kube-system/kilter-certs": CERTS_AGENT}  # the others run kilter serve

# Creates kilter's code makes only when an object is absent, which the overlays ship instead (a create cannot be held
# to a name): each is excused only while the overlay really ships the object.
SHIPPED: dict[str, dict[Grant, tuple[str, str, str]]] = {
    "kube-system/kilter-scheduler": {("", "secrets", "create"): ("Secret", "kube-system", "kilter-plan-keys")},
    "kube-system/kilter-certs": {
        ("", "secrets", "create"): ("Secret", "kube-system", "kilter-webhooks-tls"),
        ("coordination.k8s.io", "leases", "create"): ("Lease", "kube-system", "kilter-certs"),
    },
}
OVERLAY_OF = {"kube-system/kilter-scheduler": "all", "kube-system/kilter-certs": "self-signed"}


def _excused(account: str) -> set[Grant]:
    built = overlay(OVERLAY_OF[account])
    return {
        grant
        for grant, (kind, namespace, name) in SHIPPED[account].items()
        if any(
            (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) == (kind, namespace, name) for o in built
        )
    }


def test_the_live_mode_tests_made_kilter_call_the_api(calls: list[tuple[str, str, str]]) -> None:
    assert len(_called(calls)) >= 10, "the recording caught kilter serve's calls"
    assert len(_called(calls, CERTS_AGENT)) >= 4, "and kilter certs'"


def test_nothing_kilter_calls_is_missing(calls: list[tuple[str, str, str]], grants: dict[str, set[Grant]]) -> None:
    # kilter beside kube-scheduler is the whole of kilter serve: every call of any kilter serve must be granted it.
    missing = _called(calls) - grants["kube-system/kilter-scheduler"] - _excused("kube-system/kilter-scheduler")
    assert not missing, f"kilter serve calls these, the overlays do not grant them: {sorted(missing)}"
    missing = _called(calls, CERTS_AGENT) - grants["kube-system/kilter-certs"] - _excused("kube-system/kilter-certs")
    assert not missing, f"kilter certs calls these, the self-signed overlay does not grant them: {sorted(missing)}"


def test_nothing_granted_goes_unused(calls: list[tuple[str, str, str]], grants: dict[str, set[Grant]]) -> None:
    for account, granted in grants.items():
        unused = granted - _called(calls, AGENTS.get(account, SERVER_AGENT))
        assert not unused, f"{account} is granted what kilter never calls: {sorted(unused)}"
