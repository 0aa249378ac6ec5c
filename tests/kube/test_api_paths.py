"""Object paths: namespaces and names are checked as kube-apiserver checks them, then escaped whole."""

from __future__ import annotations

import pytest

from kilter.kube.api import object_path
from kilter.model.errors import InputError


@pytest.mark.parametrize(
    ("namespace", "name", "path"),
    [
        pytest.param("ml", "p", "/api/v1/namespaces/ml/pods/p", id="plain names"),
        pytest.param("ml", "p.v1-0", "/api/v1/namespaces/ml/pods/p.v1-0", id="a subdomain name with dots"),
        pytest.param("a" * 63, "b" * 253, f"/api/v1/namespaces/{'a' * 63}/pods/{'b' * 253}", id="longest names"),
    ],
)
def test_a_valid_object_path_is_built_as_given(namespace: str, name: str, path: str) -> None:
    assert object_path("/api/v1", "pods", name, namespace=namespace) == path


@pytest.mark.parametrize(
    ("namespace", "name"),
    [
        pytest.param("a/../../../apis/foo", "p", id="a namespace that walks the path"),
        pytest.param("ml", "p/binding", id="a name with a slash"),
        pytest.param("ml", "..", id="a name of dots"),
        pytest.param("ml", "p?watch=1", id="a name with a query"),
        pytest.param("ml", "p%2Fq", id="a name with an escaped slash"),
        pytest.param("a.b", "p", id="a namespace with a dot (a label, not a subdomain)"),
        pytest.param("a" * 64, "p", id="a namespace of 64 characters"),
        pytest.param("ml", "b" * 254, id="a name of 254 characters"),
        pytest.param("", "p", id="an empty namespace"),
        pytest.param("ml", "Pod", id="an upper-case name"),
    ],
)
def test_a_name_the_api_server_would_refuse_never_reaches_a_path(namespace: str, name: str) -> None:
    with pytest.raises(InputError, match="is not a DNS-1123"):
        object_path("/api/v1", "pods", name, namespace=namespace, subresource="binding")
