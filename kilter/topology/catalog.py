"""The accelerator platforms kilter knows: one frozen record each.

A record says how many GPUs a node (tray) carries, how many nodes share one
scale-up domain (NVLink, UALink or xGMI), which extended resource counts the
GPUs, how a node is recognised from its labels and which label names its
domain, as the vendors document them (GPU Feature Discovery and AMD device-plugin labels,
rack specifications) and docs/fleet.md "Platforms" lists them. Users add or override
records from YAML (``load_overrides``) without touching code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic.alias_generators import to_camel

from kilter.model.annotations import PLATFORM, SCALE_UP_DOMAIN
from kilter.model.errors import InputError, UnknownPlatform
from kilter.topology.config_file import read_yaml

__all__ = ["BUILTIN", "PLATFORM_LABEL", "Catalog", "Platform", "load_overrides"]

PLATFORM_LABEL = PLATFORM
DOMAIN_LABEL = SCALE_UP_DOMAIN

NVIDIA_PRODUCT = ("nvidia.com/gpu.product",)
AMD_PRODUCT = ("amd.com/gpu.product-name", "beta.amd.com/gpu.product-name")
NVLINK_DOMAIN_KEYS = (
    DOMAIN_LABEL,
    "nvidia.com/gpu.clique",
    "accelerator.topograph.run/domain",
    "network.topology.nvidia.com/accelerator",
    "cloud.google.com/gce-topology-subblock",
    "ds.coreweave.com/nvlink.domain",
    "topology.k8s.aws/ultraserver-id",
    "oci.oraclecloud.com/host.rack_id",
)
UALINK_DOMAIN_KEYS = (DOMAIN_LABEL, "accelerator.topograph.run/domain")


class Platform(pydantic.BaseModel):
    """One accelerator platform. ``nodes_per_domain == 1`` means the node is the domain."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    name: str = pydantic.Field(min_length=1)
    vendor: Literal["nvidia", "amd", "other"]
    description: str = ""
    gpus_per_node: int = pydantic.Field(ge=1, le=4096)
    nodes_per_domain: int = pydantic.Field(ge=1, le=4096)
    device_resource: str = pydantic.Field(min_length=1)
    interconnect: str = ""
    product_label_keys: tuple[str, ...] = ()
    product_patterns: tuple[str, ...] = ()
    domain_label_keys: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    racks_per_domain: int = pydantic.Field(default=1, ge=1)
    provisional: bool = False
    fallback: bool = False
    domain_name_label: str | None = pydantic.Field(default=None, min_length=1)
    """A node label carrying the operator's own name for the node's domain (a rack name from an inventory
    system): views show it and commands take it (``Fleet.domain_name``) where it is unique."""

    @pydantic.field_validator("product_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for p in patterns:
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"pattern {p!r} does not compile: {exc}") from None
        return patterns

    @pydantic.model_validator(mode="after")
    def _multi_node_needs_domain_label(self) -> Platform:
        if self.nodes_per_domain > 1 and not self.domain_label_keys:
            raise ValueError("a platform whose domain spans nodes needs domainLabelKeys")
        return self

    @property
    def gpus_per_domain(self) -> int:
        return self.gpus_per_node * self.nodes_per_domain

    @property
    def is_multi_node(self) -> bool:
        return self.nodes_per_domain > 1

    def unsplit_domains(self, pods: int) -> int:
        """The fewest scale-up domains ``pods`` pods (one a node) fill on whole domains of this platform: the gang
        unsplit, the baseline a split's slowdown counts extra domains from.

        A property of the platform, not of the fleet now: a gang split
        because trays failed runs as slowly as one split by choice (every
        collective crosses the scale-out network either way), and a trace's
        duration is what the job ran unsplit. What waiting could win on the
        fleet as it is now (usable nodes only, failed trays counted) is
        another question, ``split_wait.fewest_domains_idle``'s; on a fleet
        of whole, healthy domains the two agree.
        """
        return max(1, -(-pods // self.nodes_per_domain))

    @cached_property
    def _regexes(self) -> tuple[re.Pattern[str], ...]:
        return tuple(re.compile(p, re.IGNORECASE) for p in self.product_patterns)

    def matches_product(self, labels: Mapping[str, str]) -> bool:
        for key in self.product_label_keys:
            value = labels.get(key)
            if value and any(r.search(value) for r in self._regexes):
                return True
        return False


def _nvl(name: str, description: str, patterns: tuple[str, ...], **extra: Any) -> Platform:
    fields: dict[str, Any] = {
        "name": name,
        "vendor": "nvidia",
        "description": description,
        "gpus_per_node": 4,
        "nodes_per_domain": 18,
        "device_resource": "nvidia.com/gpu",
        "interconnect": "NVLink 5 (NVSwitch)",
        "product_label_keys": NVIDIA_PRODUCT,
        "product_patterns": patterns,
        "domain_label_keys": NVLINK_DOMAIN_KEYS,
    }
    fields.update(extra)
    return Platform(**fields)


def _eight(
    name: str, vendor: Literal["nvidia", "amd"], description: str, patterns: tuple[str, ...], **extra: Any
) -> Platform:
    fields: dict[str, Any] = {
        "name": name,
        "vendor": vendor,
        "description": description,
        "gpus_per_node": 8,
        "nodes_per_domain": 1,
        "device_resource": "nvidia.com/gpu" if vendor == "nvidia" else "amd.com/gpu",
        "interconnect": "NVLink (NVSwitch, in node)" if vendor == "nvidia" else "xGMI / Infinity Fabric (in node)",
        "product_label_keys": NVIDIA_PRODUCT if vendor == "nvidia" else AMD_PRODUCT,
        "product_patterns": patterns,
    }
    fields.update(extra)
    return Platform(**fields)


# Matching order matters: the first record whose product pattern matches wins,
# so specific names (GB300, Rubin Ultra) come before the ones they contain.
BUILTIN: tuple[Platform, ...] = (
    _nvl(
        "GB300-NVL72",
        "Grace Blackwell Ultra: 18 trays x 4 GPUs, one NVLink domain per rack",
        (r"GB300",),
        aliases=("GB300",),
    ),
    _nvl(
        "GB200-NVL72",
        "Grace Blackwell: 18 trays x 4 GPUs, one NVLink domain per rack",
        (r"GB200",),
        aliases=("GB200",),
    ),
    _nvl(
        "GB200-NVL36x2",
        "GB200 in two cabled racks of 9 trays (one 72-GPU domain); pick it with the kilter.dev/platform label",
        (),
        racks_per_domain=2,
        aliases=("GB200-NVL36X2",),
    ),
    _nvl(
        "RUBIN-ULTRA-NVL576",
        "Provisional: Rubin Ultra 'Kyber', 144 GPU packages (576 dies) per NVLink 7 domain, "
        "modelled as 72 blades x 2 packages until the blade shape is public",
        (r"rubin[-_ ]?ultra", r"\bVR300\b", r"\bR300\b"),
        gpus_per_node=2,
        nodes_per_domain=72,
        interconnect="NVLink 7 (provisional)",
        provisional=True,
        aliases=("KYBER", "VR-NVL576", "KYBER-NVL144", "RUBIN-ULTRA-NVL144"),
    ),
    _nvl(
        "VR-NVL72",
        "Vera Rubin: 18 trays x 4 Rubin packages (144 dies, sold as NVL144) per NVLink 6 domain",
        (r"vera[-_ ]?rubin", r"\bVR200\b", r"\bR200\b", r"rubin"),
        interconnect="NVLink 6 (NVSwitch)",
        aliases=("VR-NVL144", "VERA-RUBIN-NVL72", "VERA-RUBIN-NVL144", "VERA-RUBIN", "VR200"),
    ),
    Platform(
        name="MI455X-HELIOS",
        vendor="amd",
        description="AMD Helios rack: 18 trays x 4 MI450-class GPUs over UALink",
        gpus_per_node=4,
        nodes_per_domain=18,
        device_resource="amd.com/gpu",
        interconnect="UALink",
        product_label_keys=AMD_PRODUCT,
        product_patterns=(r"MI45[05]",),
        domain_label_keys=UALINK_DOMAIN_KEYS,
        aliases=("MI450-72", "MI450X-HELIOS", "HELIOS"),
    ),
    _eight(
        "MI355X-8",
        "amd",
        "AMD Instinct MI350-series 8-GPU node; the node is the xGMI domain",
        (r"MI35[05]X",),
        aliases=("MI355X", "MI350X"),
    ),
    _eight(
        "MI325X-8",
        "amd",
        "AMD Instinct MI325X 8-GPU node; the node is the xGMI domain",
        (r"MI325X",),
        aliases=("MI325X",),
    ),
    _eight(
        "MI300X-8",
        "amd",
        "AMD Instinct MI300X 8-GPU node; the node is the xGMI domain",
        (r"MI300X",),
        aliases=("MI300X",),
    ),
    _eight("HGX-B300-8", "nvidia", "HGX/DGX B300: 8 GPUs, NVLink inside the node only", (r"B300",), aliases=("B300",)),
    _eight("HGX-B200-8", "nvidia", "HGX/DGX B200: 8 GPUs, NVLink inside the node only", (r"B200",), aliases=("B200",)),
    _eight("HGX-H200-8", "nvidia", "HGX/DGX H200: 8 GPUs, NVLink inside the node only", (r"H200",), aliases=("H200",)),
    _eight("HGX-H100-8", "nvidia", "HGX/DGX H100: 8 GPUs, NVLink inside the node only", (r"H100",), aliases=("H100",)),
    _eight("NVIDIA-GPU", "nvidia", "Any other NVIDIA GPU node; the node is its own domain", (), fallback=True),
    _eight("AMD-GPU", "amd", "Any other AMD GPU node; the node is its own domain", (), fallback=True),
)


class Catalog:
    """An ordered set of platforms with lookup by name or alias (case-insensitive)."""

    def __init__(self, platforms: Iterable[Platform]) -> None:
        self.platforms: tuple[Platform, ...] = tuple(platforms)
        self.device_resources: frozenset[str] = frozenset(p.device_resource for p in self.platforms)
        self._by_name: dict[str, Platform] = {}
        for p in self.platforms:
            for key in (p.name, *p.aliases):
                self._by_name.setdefault(key.upper(), p)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.platforms]

    def get(self, name: str) -> Platform:
        try:
            return self._by_name[name.upper()]
        except KeyError:
            raise UnknownPlatform(name, self.names) from None

    def index(self, platform: Platform) -> int:
        return self.platforms.index(platform)

    def match(self, labels: Mapping[str, str], devices: Mapping[str, int]) -> Platform | None:
        """The platform a node belongs to: its kilter.dev/platform label, else its product label,
        else the vendor fallback for whatever GPU resource it offers. None for non-GPU nodes.
        """
        explicit = labels.get(PLATFORM_LABEL)
        if explicit:
            return self.get(explicit)
        for p in self.platforms:
            if not p.fallback and devices.get(p.device_resource, 0) > 0 and p.matches_product(labels):
                return p
        for p in self.platforms:
            if p.fallback and devices.get(p.device_resource, 0) > 0:
                return p
        return None

    def with_overrides(self, overrides: Iterable[Mapping[str, Any]]) -> Catalog:
        """A new catalog where each override replaces fields of a known platform or adds one.

        New platforms go before the built-in ones so their product patterns win.
        """
        platforms = list(self.platforms)
        added: list[Platform] = []
        for i, raw in enumerate(overrides):
            path = f"$.platforms[{i}]"
            if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
                raise InputError("each platform needs a name", path=path)
            name = str(raw["name"])
            try:
                current = self._by_name.get(name.upper())
                if current is not None:
                    merged = current.model_dump(by_alias=True)
                    merged.update(raw)
                    new = Platform.model_validate(merged)
                    platforms[platforms.index(current)] = new
                else:
                    added.append(Platform.model_validate(dict(raw)))
            except pydantic.ValidationError as exc:
                err = exc.errors()[0]
                loc = ".".join(str(x) for x in err["loc"])
                raise InputError(f"platform {name}: {err['msg']}", path=f"{path}.{loc}" if loc else path) from None
        return Catalog([*added, *platforms])


def load_overrides(path: Path, base: Catalog | None = None) -> Catalog:
    """Read ``{platforms: [...]}`` YAML and apply it over ``base`` (default: the built-in catalog)."""
    data = read_yaml(path, "platform file")
    if not isinstance(data, dict) or not isinstance(data.get("platforms"), list):
        raise InputError(f"platform file {path} must hold a mapping with a 'platforms' list")
    return (base or Catalog(BUILTIN)).with_overrides(data["platforms"])
