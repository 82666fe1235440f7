"""The four baselines of DESIGN.md section 7, as run configs or as 'not available' with a reason."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from . import per_node
from .cpu_package import CpuLibrary
from .models import write_serial_variant
from .presets import Preset
from .qnn_session import op_packages_option
from .sessions import RunConfig


@dataclass
class Plan:
    runs: list[RunConfig] = field(default_factory=list)
    unavailable: list[dict] = field(default_factory=list)   # key, label, reason
    reference: str = ""     # key of the original run that outputs are checked against
    primary_fused: str = ""  # key of the fused run in the headline A/B


def _na(key: str, label: str, reason: str) -> dict:
    return {"key": key, "label": label, "available": False, "reason": reason}


def _cpu_package_runs(p: Plan, fused: str, workdir: Path, cpu_lib: CpuLibrary | None,
                      fused_count: dict[str, int]) -> None:
    """Baselines 3 and 4 (and 1k, the original ops one entry each on the same kernels) on the CPU EP."""
    if cpu_lib is None or not cpu_lib.path:
        why = cpu_lib.note if cpu_lib is not None else "no custom-op library"
        p.unavailable += [_na("b3_fused_serial", "(3) fused, host executor in ORT, internal serial", why),
                          _na("b4_fused_concurrent", "(4) fused, host executor in ORT, internal concurrent", why)]
        return
    # Functions dropped: a fused node runs through the custom op or the session fails.
    for key, serial, label in (("b3_fused_serial", 1, "(3) fused, host executor in ORT, internal serial (serial=1)"),
                               ("b4_fused_concurrent", 0, "(4) fused, host executor in ORT, internal concurrent "
                                "(serial=0)")):
        variant = write_serial_variant(fused, serial, workdir / f"fused_cpu_serial{serial}.onnx", True)
        p.runs.append(RunConfig(key, label, str(variant), "fused", "cpu", custom_ops_library=cpu_lib.path,
                                claims=fused_count))
    p.primary_fused = "b4_fused_concurrent"
    if cpu_lib.per_node_path and cpu_lib.spec is not None:
        model, claims = per_node.write_split_model(fused, cpu_lib.spec, workdir / "fused_cpu_per_node.onnx")
        p.runs.append(RunConfig("b1k_original_host_kernels", "(1k) original ops, one entry each, on the host "
                                "executor's kernels (like-for-like reference of 3)", str(model), "fused", "cpu",
                                custom_ops_library=cpu_lib.per_node_path, claims=claims))
    else:
        p.unavailable.append(_na("b1k_original_host_kernels", "(1k) original ops, one entry each, host kernels",
                                 cpu_lib.per_node_note))


def plan(ep: str, original: str, fused: str, fused_count: dict[str, int], workdir: Path,
         preset: Preset | None, op_lib: str | None, pkg_name: str, cpu_lib: CpuLibrary | None = None) -> Plan:
    p = Plan()
    fused_types = sorted(fused_count)
    threads = max(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2)
    if ep == "cpu":
        p.runs.append(RunConfig("b1_original_seq", "(1) original, ORT_SEQUENTIAL", original, "original", "cpu"))
        p.runs.append(RunConfig("b2_original_best", f"(2) original, ORT_PARALLEL ({threads} inter-op threads)",
                                original, "original", "cpu", parallel=True))
        p.runs.append(RunConfig("fused_inlined", "fused (inlined by ORT; functional check, not baseline 3/4)",
                                fused, "fused", "cpu"))
        p.reference, p.primary_fused = "b1_original_seq", "fused_inlined"
        _cpu_package_runs(p, fused, workdir, cpu_lib, fused_count)
        return p
    assert preset is not None
    base = dict(preset.provider_options)
    fb = preset.disable_cpu_ep_fallback
    p.unavailable.append(_na(
        "b1_original_seq", "(1) original, serial",
        "QNN EP exposes no switch to serialize HTP's own scheduling; the profile's sum of per-node "
        "cycles is reported instead (cycles section)"))
    p.runs.append(RunConfig("b2_original_best", "(2) original, QNN's own scheduling", original, "original",
                            "qnn", provider_options=base, disable_cpu_fallback=fb))
    p.reference = "b2_original_best"
    if op_lib:
        pkg_opts = dict(base, op_packages=op_packages_option(fused_types, op_lib, pkg_name))
        serial = write_serial_variant(fused, 1, workdir / "fused_serial1.onnx")
        conc = write_serial_variant(fused, 0, workdir / "fused_serial0.onnx")
        p.runs.append(RunConfig("b3_fused_serial", "(3) fused, op package, internal serial (serial=1)",
                                str(serial), "fused", "qnn", provider_options=pkg_opts, disable_cpu_fallback=fb,
                                claims=fused_count))
        p.runs.append(RunConfig("b4_fused_concurrent", "(4) fused, op package, internal concurrent (serial=0)",
                                str(conc), "fused", "qnn", provider_options=pkg_opts, disable_cpu_fallback=fb,
                                claims=fused_count))
        p.primary_fused = "b4_fused_concurrent"
    else:
        why = "not available: no op package (--op-package); the QNN EP inlines the fused function"
        p.unavailable += [_na("b3_fused_serial", "(3) fused, op package, internal serial", why),
                          _na("b4_fused_concurrent", "(4) fused, op package, internal concurrent", why)]
        p.runs.append(RunConfig("fused_inlined", "fused (inlined by ORT; functional check, not baseline 3/4)",
                                fused, "fused", "qnn", provider_options=base, disable_cpu_fallback=fb))
        p.primary_fused = "fused_inlined"
    return p


def gain_pairs(measured: set[str]) -> list[tuple[str, str, str]]:
    """(name, reference key, candidate key) for every speedup we can report from measured runs."""
    pairs = [("entry_merge_gain_1_to_3", "b1_original_seq", "b3_fused_serial"),
             ("entry_merge_gain_same_kernels_1k_to_3", "b1k_original_host_kernels", "b3_fused_serial"),
             ("overlap_gain_3_to_4", "b3_fused_serial", "b4_fused_concurrent"),
             ("existing_concurrency_gain_1_to_2", "b1_original_seq", "b2_original_best"),
             ("fusion_vs_best_existing_2_to_4", "b2_original_best", "b4_fused_concurrent"),
             ("fusion_vs_original_1_to_4", "b1_original_seq", "b4_fused_concurrent"),
             ("inlined_fused_vs_original_1", "b1_original_seq", "fused_inlined"),
             ("inlined_fused_vs_original_2", "b2_original_best", "fused_inlined")]
    return [x for x in pairs if x[1] in measured and x[2] in measured]


_EXECUTOR_RUNS = {"b1k_original_host_kernels", "b3_fused_serial", "b4_fused_concurrent"}


def pair_note(ep: str, reference: str, candidate: str) -> str:
    """What a speedup mixes besides fusion. On CPU, runs 1k, 3 and 4 use hexfuse's portable host kernels
    and the others ONNX Runtime's own (MLAS): 1k -> 3 and 3 -> 4 compare like with like."""
    if ep == "cpu" and (reference in _EXECUTOR_RUNS) != (candidate in _EXECUTOR_RUNS):
        return "kernels differ: ONNX Runtime's vs hexfuse's portable host kernels (not only the entry merge)"
    return ""
