"""Build ORT sessions for one run configuration on the CPU EP or the QNN EP."""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from hexfuse.graph_passes.errors import HexfuseError

from . import qnn_session as qs


@dataclass
class RunConfig:
    """One thing we time: a model file plus how the session is set up."""
    key: str            # b1_original_seq, b2_original_best, b3_fused_serial, b4_fused_concurrent, fused_inlined
    label: str
    model_path: str
    role: str           # "original" or "fused"
    ep: str             # cpu | qnn
    parallel: bool = False
    provider_options: dict[str, str] = field(default_factory=dict)
    disable_cpu_fallback: bool = False
    custom_ops_library: str | None = None  # ORT custom-op library that runs the fused nodes (CPU b3/b4)
    claims: dict[str, int] = field(default_factory=dict)  # op type -> nodes the package must run as themselves


def _first_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__


def make_session(cfg: RunConfig, profile_prefix: str | None = None, qnn_profile_csv: str | None = None,
                 profiling_level: str = "detailed", threads: int | None = None):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    # Idle sessions must not burn cores: runs are interleaved across sessions, and a thread pool that
    # spins after its own run steals the CPU from the next session's run (2-core hosts: 10x and more).
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if cfg.custom_ops_library:
        so.register_custom_ops_library(cfg.custom_ops_library)
    if cfg.ep == "cpu":
        # One thread per op everywhere: baseline 1 is then truly serial, baseline 2 adds only inter-op
        # concurrency, and the executor's lanes (3, 4) compete with no intra-op pool.
        so.intra_op_num_threads = 1
    if cfg.parallel:
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        so.inter_op_num_threads = threads or max(2, os.cpu_count() or 2)
    else:
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
        # Basic optimizations only: layout (NCHWc) and fusion passes rename nodes, and the timeline
        # has to map profile rows back to the ONNX graph's nodes and edges.
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    if cfg.ep == "qnn":
        devs = qs.register_qnn()
        if cfg.disable_cpu_fallback:
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        opts = qs.qnn_provider_options(cfg.provider_options, qnn_profile_csv, profiling_level)
        so.add_provider_for_devices(devs, opts)
        providers = None
    else:
        providers = ["CPUExecutionProvider"]
    try:
        # enable_fallback=0: ORT's Python wrapper would otherwise retry a failing session (at creation or
        # on an EP failure during run) on the CPU EP alone and time that instead.
        return ort.InferenceSession(cfg.model_path, so, providers=providers, enable_fallback=0)
    except Exception as e:
        raise HexfuseError(f"cannot create {cfg.ep} session for {cfg.label} ({cfg.model_path}): "
                           f"{_first_line(e)}") from None


@functools.cache
def _quiet_run():
    """Run options that keep ORT from logging a failed CPU run: its status (our one line) says the same."""
    import onnxruntime as ort

    options = ort.RunOptions()
    options.log_severity_level = 4
    return options


def run_checked(cfg: RunConfig, session, output_names: list[str], feeds: dict) -> list:
    """One run; an EP failure is an error, never a silent retry elsewhere. (QNN runs keep ORT's error
    log: the EP may log there what its status leaves out.)"""
    try:
        return session.run(output_names, feeds, _quiet_run() if cfg.ep == "cpu" else None)
    except Exception as e:
        raise HexfuseError(f"{cfg.label} failed on the {cfg.ep} EP ({cfg.model_path}): {_first_line(e)}") from None
