"""Options of one A/B run, their defaults (the CLI's help prints these) and their checks.

Every bad value is one ``HexfuseError`` line before any model is read or session created: a huge
``--iters`` would otherwise die in numpy with a traceback, a negative seed in the RNG.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.io import same_file

MAX_ITERS = 1_000_000      # ~ days of runs at 0.1 s each; beyond is a typo
MAX_PROFILE_RUNS = 10_000
MAX_SEED = 2**63 - 1       # numpy's SeedSequence takes any non-negative int; keep it a C long
# What a run writes into its report directory (report.py, runner.py's profiles).
_WRITES = re.compile(r"report\.(?:json|md)|trace\.json|latency\.png|(?:qnn|ort)_profile_.*")


@dataclass
class AbOptions:
    original: str
    fused: str
    ep: str = "cpu"
    qnn_config: str | None = None
    op_package: str | None = None
    op_package_name: str = "HexFuse"
    iters: int = 50
    warmup: int = 5
    inputs: str | None = None
    seed: int = 0
    report_dir: str | None = None
    atol: float = 1e-4
    rtol: float = 1e-3
    min_cosine: float = 0.9999
    profile_runs: int = 3
    quiet: bool = False
    cpu_package: bool = True  # --ep cpu without --op-package: build the ORT custom-op library from the spec


def int_in(flag: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise HexfuseError(f"{flag} must be in [{lo}, {hi}], got {value}")


def _tolerance(flag: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise HexfuseError(f"{flag} must be a finite number >= 0, got {value}")


def check_options(o: AbOptions) -> Path:
    """Validate ``o``; return the report directory it names (default ``<fused stem>_ab/`` in the working
    folder: where the user stands, never beside the models, which may be a repository's or read-only)."""
    if o.ep not in ("cpu", "qnn"):
        raise HexfuseError(f"unknown --ep '{o.ep}' (cpu or qnn)")
    int_in("--iters", o.iters, 2, MAX_ITERS)
    int_in("--warmup", o.warmup, 0, MAX_ITERS)
    int_in("--profile-runs", o.profile_runs, 1, MAX_PROFILE_RUNS)
    int_in("--seed", o.seed, 0, MAX_SEED)
    _tolerance("--atol", o.atol)
    _tolerance("--rtol", o.rtol)
    if not (math.isfinite(o.min_cosine) and -1.0 <= o.min_cosine <= 1.0):
        raise HexfuseError(f"--min-cosine must be in [-1, 1], got {o.min_cosine}")
    if o.qnn_config and o.ep != "qnn":
        raise HexfuseError("--qnn-config needs --ep qnn")
    out = Path(o.report_dir or f"{Path(o.fused).stem}_ab")
    if out.exists() and not out.is_dir():
        raise HexfuseError(f"report directory {out} exists and is not a directory")
    for model in (o.original, o.fused):
        if out.resolve() == Path(model).resolve():
            raise HexfuseError(f"report directory {out} is one of the input models")
    spec = str(Path(o.fused).with_suffix(".hexfuse.json"))
    for given in (o.original, o.fused, spec, o.inputs, o.op_package, o.qnn_config):
        if given and _WRITES.fullmatch(Path(given).name) and same_file(out / Path(given).name, Path(given)):
            raise HexfuseError(f"report directory {out} would overwrite {given}, which this run reads")
    return out
