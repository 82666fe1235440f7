"""Device targets: which QNN preset prepares for a phone or PC, and which HTP build runs on it.

The cost targets (qnn_configs/targets) describe speed; the presets (qnn_configs/presets) hold the QNN EP
provider options that make the x86 HTP backend prepare a context binary for one SoC (soc_model,
htp_arch). A target here ties the two together with the op package's Makefile target for that HTP.
"""
from __future__ import annotations

from dataclasses import dataclass

from hexfuse.graph_passes.errors import HexfuseError


@dataclass(frozen=True)
class DeviceTarget:
    name: str          # cost-target name (qnn_configs/targets/<name>.json)
    preset: str        # QNN EP provider options for preparing and running (qnn_configs/presets/<preset>.json)
    hexagon: str       # HTP architecture, as the package Makefile names it: htp_<hexagon>
    description: str

    @property
    def make_target(self) -> str:
        return f"htp_{self.hexagon}"

    @property
    def build_dir(self) -> str:
        """Where `make htp_vNN` puts the library inside the package tree."""
        return f"build/hexagon-{self.hexagon}"


# soc_model / htp_arch live in the presets (their sources are cited there). X Elite has no preset yet:
# its QNN soc_model is not recorded in this repository, so preparing for it would be a guess.
TARGETS: dict[str, DeviceTarget] = {t.name: t for t in (
    DeviceTarget("sm8550", "htp_v73_burst", "v73", "Snapdragon 8 Gen 2 (SM8550), Hexagon HTP v73"),
    DeviceTarget("sm8650", "htp_v75_burst", "v75", "Snapdragon 8 Gen 3 (SM8650), Hexagon HTP v75"),
    DeviceTarget("sm8750", "htp_v79_burst", "v79", "Snapdragon 8 Elite (SM8750), Hexagon HTP v79"),
)}


def device_target(name: str) -> DeviceTarget:
    if name not in TARGETS:
        raise HexfuseError(f"no device target '{name}' (known: {', '.join(sorted(TARGETS))}); for another SoC give "
                           "--qnn-config with its soc_model and htp_arch")
    return TARGETS[name]
