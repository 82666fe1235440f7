"""The ONNX Runtime custom-op library that runs baselines 3 and 4 on the CPU EP.

Given ``--op-package LIB`` it must be one (exports RegisterCustomOps). Otherwise it is built from the
fusion spec beside the fused model (``FUSED.hexfuse.json``) and cached by content; when that cannot be
done (no spec, no ONNX Runtime headers) baselines 3 and 4 are reported unavailable with the reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec.check import check_spec_describes
from hexfuse.graph_passes.spec.model import FusionSpec, load_spec

from .libkind import require_ort_library
from .per_node import split_spec


@dataclass(frozen=True)
class CpuLibrary:
    path: str | None
    note: str  # where it came from, or why there is none
    spec: FusionSpec | None = None
    per_node_path: str | None = None  # the same ops split one node per entry (baseline 1k), see per_node.py
    per_node_note: str = "needs the fusion spec beside the fused model"


def spec_beside(fused: str) -> Path:
    return Path(fused).with_suffix(".hexfuse.json")


def resolve(fused: str, fused_types: list[str], given: str | None, package: str, build: bool,
            say: Callable[[str], None]) -> CpuLibrary:
    if given:
        require_ort_library(given)
        return CpuLibrary(given, "given with --op-package", per_node_note="--op-package given: the per-node "
                          "library is built only from a spec, without --op-package")
    if not fused_types:
        return CpuLibrary(None, "the fused model has no fused (hexfuse) node")
    if not build:
        return CpuLibrary(None, "not asked for (--no-cpu-package)")
    spec_file = spec_beside(fused)
    if not spec_file.is_file():
        return CpuLibrary(None, f"no fusion spec {spec_file.name} beside the fused model: run `hexfuse fuse`, "
                                "or pass --op-package lib<Pkg>Ort.so")
    from hexfuse.op_package import ort_headers
    from hexfuse.op_package.ort_build import cached_ort_library

    if ort_headers.find_headers() is None:
        return CpuLibrary(None, f"ONNX Runtime C API headers not found: {ort_headers.FETCH_HINT}")
    spec = load_spec(str(spec_file))
    try:
        fused_bytes = Path(fused).read_bytes()
    except OSError as exc:
        raise HexfuseError(f"cannot read {fused}: {exc.strerror}") from None
    check_spec_describes(Path(fused), fused_bytes, spec, spec_file)  # same run: its hash, its fused nodes
    described = sorted({op.op_type for op in spec.fused_ops})
    if described != sorted(fused_types):
        raise HexfuseError(f"{spec_file} describes fused op types {described[:3]}..., the fused model holds "
                           f"{sorted(fused_types)[:3]}...: regenerate both with `hexfuse fuse`")
    say(f"building the CPU custom-op libraries from {spec_file.name} ({len(spec.fused_ops)} fused ops, and one op "
        "per node for baseline 1k; cached)")
    fused_lib = cached_ort_library(spec, package)
    split_lib = cached_ort_library(split_spec(spec), package)
    note = f"built from {spec_file.name}"
    return CpuLibrary(str(fused_lib), note, spec, str(split_lib), note)
