"""The platform catalog: every platform the fleet runs, recognised from labels, overridable from YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from kilter.model.errors import InputError, UnknownPlatform
from kilter.topology.catalog import BUILTIN, Catalog, load_overrides

CATALOG = Catalog(BUILTIN)


@pytest.mark.parametrize(
    ("name", "gpus_per_node", "nodes_per_domain", "resource"),
    [
        ("GB200-NVL72", 4, 18, "nvidia.com/gpu"),
        ("GB300-NVL72", 4, 18, "nvidia.com/gpu"),
        ("GB200-NVL36x2", 4, 18, "nvidia.com/gpu"),
        ("VR-NVL72", 4, 18, "nvidia.com/gpu"),
        ("VR-NVL144", 4, 18, "nvidia.com/gpu"),
        ("MI300X", 8, 1, "amd.com/gpu"),
        ("MI325X", 8, 1, "amd.com/gpu"),
        ("MI355X", 8, 1, "amd.com/gpu"),
        ("MI455X-HELIOS", 4, 18, "amd.com/gpu"),
        ("MI450-72", 4, 18, "amd.com/gpu"),
        ("HGX-H100-8", 8, 1, "nvidia.com/gpu"),
        ("HGX-H200-8", 8, 1, "nvidia.com/gpu"),
        ("HGX-B200-8", 8, 1, "nvidia.com/gpu"),
        ("HGX-B300-8", 8, 1, "nvidia.com/gpu"),
    ],
)
def test_the_catalog_knows_every_platform_of_the_fleet(
    name: str, gpus_per_node: int, nodes_per_domain: int, resource: str
) -> None:
    p = CATALOG.get(name)
    assert (p.gpus_per_node, p.nodes_per_domain, p.device_resource) == (
        gpus_per_node,
        nodes_per_domain,
        resource,
    )


def test_rubin_ultra_is_marked_provisional() -> None:
    p = CATALOG.get("Kyber")
    assert p.provisional and p.gpus_per_domain == 144


@pytest.mark.parametrize(
    ("labels", "devices", "expected"),
    [
        ({"nvidia.com/gpu.product": "NVIDIA-GB200"}, {"nvidia.com/gpu": 4}, "GB200-NVL72"),
        ({"nvidia.com/gpu.product": "NVIDIA-GB300"}, {"nvidia.com/gpu": 4}, "GB300-NVL72"),
        ({"nvidia.com/gpu.product": "NVIDIA-B200"}, {"nvidia.com/gpu": 8}, "HGX-B200-8"),
        ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu": 8}, "HGX-H100-8"),
        ({"nvidia.com/gpu.product": "NVIDIA-Vera-Rubin"}, {"nvidia.com/gpu": 4}, "VR-NVL72"),
        ({"nvidia.com/gpu.product": "NVIDIA-Rubin-Ultra"}, {"nvidia.com/gpu": 2}, "RUBIN-ULTRA-NVL576"),
        ({"amd.com/gpu.product-name": "AMD_Instinct_MI355X"}, {"amd.com/gpu": 8}, "MI355X-8"),
        ({"beta.amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}, {"amd.com/gpu": 8}, "MI300X-8"),
        ({"amd.com/gpu.product-name": "AMD_Instinct_MI455X"}, {"amd.com/gpu": 4}, "MI455X-HELIOS"),
        ({"nvidia.com/gpu.product": "Tesla-T4"}, {"nvidia.com/gpu": 1}, "NVIDIA-GPU"),
        (
            {"nvidia.com/gpu.product": "NVIDIA-GB200", "kilter.dev/platform": "GB200-NVL36x2"},
            {"nvidia.com/gpu": 4},
            "GB200-NVL36x2",
        ),
    ],
)
def test_nodes_are_recognised_from_their_labels(labels: dict[str, str], devices: dict[str, int], expected: str) -> None:
    match = CATALOG.match(labels, devices)
    assert match is not None and match.name == expected


def test_a_node_without_gpus_belongs_to_no_platform() -> None:
    assert CATALOG.match({"nvidia.com/gpu.product": "NVIDIA-GB200"}, {}) is None


def test_an_unknown_platform_label_names_the_known_ones() -> None:
    with pytest.raises(UnknownPlatform, match="GB200-NVL72"):
        CATALOG.match({"kilter.dev/platform": "TPU-v7"}, {"nvidia.com/gpu": 4})


def test_overrides_change_a_known_platform_and_add_new_ones_first(tmp_path: Path) -> None:
    path = tmp_path / "platforms.yaml"
    path.write_text(
        "platforms:\n"
        "- name: GB200-NVL72\n  nodesPerDomain: 16\n"
        "- name: ACME-X1\n  vendor: nvidia\n  gpusPerNode: 8\n  nodesPerDomain: 4\n"
        "  deviceResource: nvidia.com/gpu\n  productLabelKeys: [nvidia.com/gpu.product]\n"
        "  productPatterns: ['GB200-ACME']\n  domainLabelKeys: [acme.example/pod]\n"
    )
    catalog = load_overrides(path)
    assert catalog.get("GB200-NVL72").nodes_per_domain == 16
    acme = catalog.match({"nvidia.com/gpu.product": "NVIDIA-GB200-ACME"}, {"nvidia.com/gpu": 8})
    assert acme is not None and acme.name == "ACME-X1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "platforms:\n- name: GB200-NVL72\n  gpusPerNode: 0\n",
            "greater than or equal to 1",
            id="zero GPUs",
        ),
        pytest.param("platforms:\n- name: GB200-NVL72\n  colour: green\n", "Extra inputs", id="unknown field"),
        pytest.param(
            "platforms:\n- name: NEW\n  vendor: nvidia\n  gpusPerNode: 4\n  nodesPerDomain: 9\n"
            "  deviceResource: nvidia.com/gpu\n",
            "domainLabelKeys",
            id="multi-node without a domain label",
        ),
        pytest.param(
            "platforms:\n- name: X\n  productPatterns: ['(']\n  vendor: nvidia\n  gpusPerNode: 1\n"
            "  nodesPerDomain: 1\n  deviceResource: r\n",
            "does not compile",
            id="bad regex",
        ),
        pytest.param("platforms: [\n", "not valid YAML", id="malformed YAML"),
        pytest.param("- just a list\n", "'platforms' list", id="wrong top level"),
    ],
)
def test_bad_platform_files_are_input_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_overrides(path)


def test_a_platform_file_that_is_not_utf8_or_yaml_is_refused_in_one_line(tmp_path: Path) -> None:
    binary = tmp_path / "platforms.yaml"
    binary.write_bytes(b"platforms: [\xff\xfe]\n")
    with pytest.raises(InputError, match=r"platform file .* is not UTF-8 text"):
        load_overrides(binary)
    broken = tmp_path / "broken.yaml"
    broken.write_text("platforms: [\n  - {name: x\n")
    with pytest.raises(InputError) as err:
        load_overrides(broken)
    assert "is not valid YAML" in str(err.value) and "\n" not in str(err.value)


def test_a_gang_unsplit_fills_whole_domains_one_node_a_pod() -> None:
    catalog = Catalog(BUILTIN)
    nvl72, h100 = catalog.get("GB200-NVL72"), catalog.get("HGX-H100-8")  # 18 trays a rack; one node a domain
    assert [nvl72.unsplit_domains(p) for p in (0, 1, 18, 19, 36, 37)] == [1, 1, 1, 2, 2, 3]
    assert [h100.unsplit_domains(p) for p in (1, 2, 9)] == [1, 2, 9]
