"""Orchestrates one A/B run: check inputs, build sessions, check equivalence, time, profile, report."""
from __future__ import annotations

import gc
import os
import platform
import tempfile
import time
from collections import Counter
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError

from . import baselines, compare, cpu_package, guards, latency, models, profile, qnn_session, report, timeline
from .inputs import load_npz, random_inputs
from .libkind import require_qnn_package
from .options import AbOptions, check_options
from .presets import load_preset
from .sessions import RunConfig, make_session, run_checked

__all__ = ["AbOptions", "run_ab"]


def _platform(ep: str) -> dict:
    import onnxruntime as ort
    info = {"system": platform.system(), "machine": platform.machine(), "python": platform.python_version(),
            "onnxruntime": ort.__version__, "cpu_count": os.cpu_count()}
    if ep == "qnn":
        from importlib.metadata import PackageNotFoundError, version
        try:
            info["onnxruntime_qnn"] = version("onnxruntime-qnn")
        except PackageNotFoundError:
            info["onnxruntime_qnn"] = "unknown"
    return info


def _profile_run(cfg: RunConfig, feeds: dict, out_dir: Path, runs: int, level: str) -> tuple[dict, list[dict]]:
    """An extra pass with profiling on; returns a summary and the per-node rows for the timeline."""
    tag = cfg.key
    if cfg.ep == "qnn":
        csv_path = out_dir / f"qnn_profile_{tag}.csv"
        for stale in (csv_path, csv_path.with_name(csv_path.stem + "_qnn.log")):
            stale.unlink(missing_ok=True)  # the EP appends to an existing file
        sess = make_session(cfg, qnn_profile_csv=str(csv_path), profiling_level=level)
        for _ in range(runs):
            run_checked(cfg, sess, None, feeds)
        del sess
        gc.collect()  # the CSV is flushed when the session is released
        return profile.qnn_profile_summary(csv_path)
    prefix = str(out_dir / f"ort_profile_{tag}")
    sess = make_session(cfg, profile_prefix=prefix)
    for _ in range(runs):
        run_checked(cfg, sess, None, feeds)
    path = Path(sess.end_profiling())
    del sess
    final = out_dir / f"ort_profile_{tag}.json"
    os.replace(path, final)
    parsed = profile.parse_ort_profile(final)
    summary = {"format": "ort_json", "file": final.name, "unit": "us", "runs": parsed["runs"],
               "executors": parsed["executors"], "nodes": parsed["nodes"]}
    return summary, parsed["nodes"]


def _open_sessions(pl: baselines.Plan, prog: latency.Progress) -> tuple[dict, dict]:
    """Create every run's session and refuse any that does not run where it was asked to."""
    sessions, assign = {}, {}
    for i, cfg in enumerate(pl.runs, start=1):
        start = time.perf_counter()
        # QNN sessions compile the graph (a minute and more in the simulator): always say so
        with prog.step(f"creating session {i}/{len(pl.runs)}: {cfg.label} on {cfg.ep}", force=cfg.ep == "qnn"):
            sessions[cfg.key] = make_session(cfg)
        assign[cfg.key] = qnn_session.read_assignment(sessions[cfg.key])
        guards.check_providers(cfg, sessions[cfg.key].get_providers())
        if cfg.claims:  # first: it names the package when it took nothing
            guards.check_claims(cfg, assign[cfg.key], cfg.claims,
                                qnn_session.QNN_EP if cfg.ep == "qnn" else guards.CPU_EP)
        if cfg.ep == "qnn":
            guards.check_ran_on_qnn(cfg, assign[cfg.key])
            if cfg.role == "fused":  # (on the CPU EP everything is CPU; the custom op is checked above)
                guards.check_placement(cfg, assign[cfg.key], assign[pl.reference])
        if time.perf_counter() - start > 2.0:
            prog(f"session {i}/{len(pl.runs)} ready ({time.perf_counter() - start:.0f} s)", force=True)
    return sessions, assign


def _libraries(o: AbOptions, fused_types: list[str],
               prog: latency.Progress) -> tuple[str | None, cpu_package.CpuLibrary | None]:
    """(QNN op package, CPU custom-op library) after checking what kind of library --op-package names."""
    lib = qnn_session.check_op_package_lib(o.op_package)  # before any session exists
    if lib and not fused_types:
        raise HexfuseError(f"--op-package given but {o.fused} has no fused (hexfuse) node")
    if o.ep == "qnn":
        if lib:
            require_qnn_package(lib, o.op_package_name)
        return lib, None
    return None, cpu_package.resolve(o.fused, fused_types, lib, o.op_package_name, o.cpu_package,
                                     lambda msg: prog(msg, force=True))


def run_ab(o: AbOptions) -> dict:
    prog = latency.Progress(o.quiet)
    out_dir = check_options(o)
    orig_m, fused_m = models.load_model(o.original), models.load_model(o.fused)
    models.check_compatible(orig_m, fused_m, o.original, o.fused)
    fused_types = models.fused_op_types(fused_m)
    fused_count = dict(Counter(n.op_type for n in models.fused_nodes(fused_m)))
    preset = None
    if o.ep == "qnn":
        if not qnn_session.qnn_available():
            raise HexfuseError("--ep qnn needs the onnxruntime-qnn package (pip install 'hexfuse[qnn]')")
        preset = load_preset(o.qnn_config)
    lib, cpu_lib = _libraries(o, fused_types, prog)
    specs = models.graph_inputs(orig_m)
    feeds = load_npz(o.inputs, specs) if o.inputs else random_inputs(specs, o.seed)

    with tempfile.TemporaryDirectory(prefix="hexfuse_ab_") as work:
        pl = baselines.plan(o.ep, o.original, o.fused, fused_count, Path(work), preset, lib, o.op_package_name,
                            cpu_lib)
        sessions, assign = _open_sessions(pl, prog)
        out_names = [x.name for x in sessions[pl.reference].get_outputs()]
        cfg_of = {cfg.key: cfg for cfg in pl.runs}
        with prog.step("first run of every session (outputs compared against the original)", force=o.ep == "qnn"):
            outs = {k: run_checked(cfg_of[k], s, out_names, feeds) for k, s in sessions.items()}
        equiv = {k: compare.compare_outputs(out_names, outs[pl.reference], outs[k], o.atol, o.rtol, o.min_cosine)
                 for k in sessions if k != pl.reference}
        runners = {k: (lambda s=s, c=cfg_of[k]: run_checked(c, s, out_names, feeds)) for k, s in sessions.items()}
        times = latency.time_interleaved(runners, o.iters, o.warmup, prog)
        del runners, sessions
        gc.collect()
        out_dir.mkdir(parents=True, exist_ok=True)  # only once every run ran as asked
        profiles, timelines = {}, {}
        level = preset.profiling_level if preset else "detailed"
        for i, cfg in enumerate(pl.runs, start=1):
            with prog.step(f"profiling {i}/{len(pl.runs)}: {cfg.key} ({o.profile_runs} runs)", force=o.ep == "qnn"):
                summary, rows = _profile_run(cfg, feeds, out_dir, o.profile_runs, level)
            profiles[cfg.key] = summary
            model = orig_m if cfg.role == "original" else fused_m
            timelines[cfg.key] = timeline.build(rows, model, summary["unit"])

    base_rows = [{"key": c.key, "label": c.label, "available": True, "reason": None, "model": c.model_path,
                  "role": c.role, "ep": c.ep, "latency": latency.stats(times[c.key])} for c in pl.runs]
    base_rows += pl.unavailable
    rep = {
        "models": {"original": os.path.abspath(o.original), "fused": os.path.abspath(o.fused),
                   "fused_op_types": fused_types, "fused_node_count": sum(fused_count.values())},
        "ep": o.ep, "platform": _platform(o.ep),
        "simulator": o.ep == "qnn" and platform.machine().lower() in ("x86_64", "amd64"),
        "qnn_preset": None if preset is None else {"name": preset.name, "source": preset.source,
                                                   "provider_options": preset.provider_options,
                                                   "disable_cpu_ep_fallback": preset.disable_cpu_ep_fallback},
        "op_package": None if lib is None else {"library": lib, "package": o.op_package_name,
                                                "op_types": fused_types},
        "cpu_custom_op_library": None if cpu_lib is None else {"library": cpu_lib.path, "note": cpu_lib.note},
        "inputs": {"source": o.inputs or f"random(seed={o.seed})",
                   "tensors": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in feeds.items()}},
        "iters": o.iters, "warmup": o.warmup,
        **measured_sections(pl, o.ep, times, o.seed, base_rows, equiv, assign, profiles, timelines, out_dir),
    }
    report.write_all(out_dir, rep, timelines, times)
    prog(f"report written to {out_dir}", force=True)
    return rep


def measured_sections(pl: baselines.Plan, ep: str, times: dict, seed: int, base_rows: list[dict], equiv: dict,
                      assign: dict, profiles: dict, timelines: dict, out_dir: Path) -> dict:
    """The report's measured part, the same for runs made here and runs imported from a device:
    baselines, equivalence, paired speedups with the headline, placement, profiles, engines, cycles."""
    speedups = {name: dict(latency.paired_speedup(times[a], times[b], seed), reference=a, candidate=b,
                           note=baselines.pair_note(ep, a, b))
                for name, a, b in baselines.gain_pairs(set(times))}
    return {
        "reference": pl.reference, "primary_fused": pl.primary_fused,
        "baselines": base_rows,
        "equivalence": {"passed": all(e["passed"] for e in equiv.values()), "against": pl.reference,
                        "runs": equiv},
        "speedups": speedups,
        "headline": speedups.get(_headline(pl, speedups)),
        "assignment": {k: a.summary() for k, a in assign.items()},
        "profiles": profiles,
        "engines": {k: {kk: v for kk, v in tl.items() if kk != "events"} for k, tl in timelines.items()},
        "cycles": _cycles_section(profiles),
        "report_dir": str(out_dir),
        "raw_latency_ms": {k: [round(float(x), 6) for x in v] for k, v in times.items()},
    }


def _headline(pl: baselines.Plan, speedups: dict) -> str:
    for name, sp in speedups.items():
        if sp["reference"] == pl.reference and sp["candidate"] == pl.primary_fused:
            return name
    return ""


def _cycles_section(profiles: dict) -> dict | None:
    """On QNN: derived serial (sum of per-node cycles) vs what the accelerator took, per run config."""
    rows = {k: {"accelerator_cycles": p.get("accelerator_cycles_median"),
                "serial_sum_cycles": p.get("serial_sum_cycles")}
            for k, p in profiles.items() if p.get("format") == "qnn_csv"}
    if not rows:
        return None
    out: dict = {"per_run": rows, "gains": {}}
    serial1 = rows.get("b2_original_best", {}).get("serial_sum_cycles")
    acc = {k: r["accelerator_cycles"] for k, r in rows.items()}
    if serial1 and acc.get("b3_fused_serial"):
        out["gains"]["entry_merge_gain_1_to_3_derived"] = serial1 / acc["b3_fused_serial"]
    if acc.get("b3_fused_serial") and acc.get("b4_fused_concurrent"):
        out["gains"]["overlap_gain_3_to_4"] = acc["b3_fused_serial"] / acc["b4_fused_concurrent"]
    if serial1 and acc.get("b2_original_best"):
        out["gains"]["qnn_own_overlap_1_to_2_derived"] = serial1 / acc["b2_original_best"]
    return out
