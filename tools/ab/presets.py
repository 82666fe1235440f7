"""QNN EP provider-option presets: load by name or path, validate against a whitelist.

The QNN EP silently ignores unknown keys and most bad values (seen with onnxruntime-qnn 2.7.0:
`htp_performance_mode=nonsense` and `bogus=1` are accepted; a bad `soc_model` drops the whole graph to
CPU), so typos must be caught here, before any session exists.
"""
from __future__ import annotations

import importlib.resources
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hexfuse.graph_passes.errors import HexfuseError

PERF_MODES = ("default", "burst", "balanced", "high_performance", "high_power_saver", "low_balanced",
              "low_power_saver", "power_saver", "extreme_power_saver", "sustained_high_performance")
PROFILING_LEVELS = ("off", "basic", "detailed", "optrace")


def _enum(*allowed: str) -> Callable[[str], bool]:
    return lambda v: v in allowed


def _uint(lo: int = 0, hi: int = 1 << 31) -> Callable[[str], bool]:
    return lambda v: bool(re.fullmatch(r"\d+", v)) and lo <= int(v) <= hi


# Option names checked against the strings in libonnxruntime_providers_qnn.so (2.7.0) and the ORT
# QNN EP docs. The harness itself owns profiling_level/profiling_file_path/op_packages.
PROVIDER_OPTIONS: dict[str, tuple[Callable[[str], bool], str]] = {
    "backend_type": (_enum("htp", "gpu", "cpu", "saver", "ir"), "htp|gpu|cpu|saver|ir"),
    "htp_performance_mode": (_enum(*PERF_MODES), "|".join(PERF_MODES)),
    "soc_model": (_uint(0, 10000), "a QNN SoC id such as 43 (SM8550), 57 (SM8650), 69 (SM8750)"),
    "htp_arch": (_enum("0", "68", "69", "73", "75", "79", "81"), "0|68|69|73|75|79|81"),
    "enable_htp_fp16_precision": (_enum("0", "1"), "0|1"),
    "vtcm_mb": (_uint(0, 64), "an integer 0..64"),
    "htp_graph_finalization_optimization_mode": (_enum("0", "1", "2", "3"), "0|1|2|3"),
    "qnn_context_priority": (_enum("low", "normal", "normal_high", "high"), "low|normal|normal_high|high"),
    "rpc_control_latency": (_uint(), "microseconds as an integer"),
    "device_id": (_uint(0, 64), "an integer"),
    "offload_graph_io_quantization": (_enum("0", "1"), "0|1"),
    "enable_htp_spill_fill_buffer": (_enum("0", "1"), "0|1"),
    "enable_htp_shared_memory_allocator": (_enum("0", "1"), "0|1"),
}
TOP_KEYS = {"description", "provider_options", "disable_cpu_ep_fallback", "profiling_level"}


@dataclass
class Preset:
    name: str
    provider_options: dict[str, str]
    disable_cpu_ep_fallback: bool = False
    profiling_level: str = "detailed"
    description: str = ""
    source: str = ""


def presets_dir() -> Path:
    return Path(str(importlib.resources.files("hexfuse.qnn_configs"))) / "presets"


def preset_names() -> list[str]:
    return sorted(p.stem for p in presets_dir().glob("*.json"))


def load_preset(spec: str | None) -> Preset:
    """`spec` is a preset name (htp_sim), or a path to a JSON file; None means htp_sim."""
    spec = spec or "htp_sim"
    path = Path(spec)
    if not (path.suffix == ".json" or path.exists()):
        path = presets_dir() / f"{spec}.json"
        if not path.is_file():
            raise HexfuseError(f"unknown QNN preset '{spec}' (known: {', '.join(preset_names())})")
    elif not path.is_file():
        raise HexfuseError(f"QNN config file not found: {path}")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise HexfuseError(f"QNN config {path} is not valid JSON: {e}".replace("\n", " ")) from None
    return validate_preset(data, name=path.stem, source=str(path))


def validate_preset(data: object, name: str = "inline", source: str = "") -> Preset:
    where = f"QNN config {source or name}"
    if not isinstance(data, dict):
        raise HexfuseError(f"{where}: top level must be a JSON object")
    for key in data:
        if key not in TOP_KEYS:
            raise HexfuseError(f"{where}: unknown key '{key}' (allowed: {', '.join(sorted(TOP_KEYS))})")
    opts = data.get("provider_options", {})
    if not isinstance(opts, dict):
        raise HexfuseError(f"{where}: provider_options must be an object")
    clean: dict[str, str] = {}
    for key, value in opts.items():
        if key not in PROVIDER_OPTIONS:
            raise HexfuseError(f"{where}: unknown provider option '{key}' "
                               f"(allowed: {', '.join(sorted(PROVIDER_OPTIONS))})")
        if isinstance(value, bool):
            value = "1" if value else "0"
        sval = str(value)
        check, expect = PROVIDER_OPTIONS[key]
        if not check(sval):
            raise HexfuseError(f"{where}: bad value '{sval}' for {key} (expected {expect})")
        clean[key] = sval
    clean.setdefault("backend_type", "htp")
    if clean.get("enable_htp_fp16_precision") == "1" and "soc_model" not in clean:
        # DESIGN.md section 4: on 2.7.0 fp16 precision requires soc_model.
        raise HexfuseError(f"{where}: enable_htp_fp16_precision=1 needs soc_model")
    fallback = data.get("disable_cpu_ep_fallback", False)
    if not isinstance(fallback, bool):
        raise HexfuseError(f"{where}: disable_cpu_ep_fallback must be true or false")
    level = data.get("profiling_level", "detailed")
    if level not in PROFILING_LEVELS or level in ("off", "basic"):
        raise HexfuseError(f"{where}: bad value '{level}' for profiling_level (expected detailed|optrace)")
    return Preset(name=name, provider_options=clean, disable_cpu_ep_fallback=fallback,
                  profiling_level=level, description=str(data.get("description", "")), source=source)
