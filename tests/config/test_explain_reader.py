"""config/components/volcano/explain-reader.yaml grants exactly what ``kubectl kilter --kilter-service`` calls:
create (the verb of its POST) on services/proxy of kilter's Service, in its namespace, and names a Service and port
the component defines."""

from __future__ import annotations

from kilter.cli.kubectl.remote import parse_service, proxy_path
from tests.config.yamldocs import COMPONENTS, documents


def test_the_role_grants_create_on_the_proxy_of_kilters_service_only() -> None:
    docs = documents(COMPONENTS / "volcano" / "explain-reader.yaml")
    role = next(d for d in docs if d["kind"] == "Role")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["services/proxy"], "resourceNames": ["kilter-volcano"], "verbs": ["create"]}
    ]
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"]
    service = next(d for d in documents(COMPONENTS / "volcano" / "kilter.yaml") if d["kind"] == "Service")
    ns, name = service["metadata"]["namespace"], service["metadata"]["name"]
    port = service["spec"]["ports"][0]["name"]
    path = proxy_path(parse_service(f"{ns}/{name}:{port}"))
    # what the API server authorizes: namespace, resource services, subresource proxy, name
    assert path.startswith(f"/api/v1/namespaces/{role['metadata']['namespace']}/services/{name}:{port}/proxy/")
