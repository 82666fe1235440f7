"""`hexfuse ab --import RESULTS`: report a device run like a normal `hexfuse ab --ep qnn` run.

RESULTS is the folder `run_ab.py` of a `hexfuse bundle` wrote (on a device, or on x86 against the HTP
simulator): results.json (schema "hexfuse-device-results/1"), outputs/<run>.npz, profiles/<level>/<run>/.
The models come from the bundle RESULTS sits in (RESULTS/../bundle.json, checked by digest), or from
ORIGINAL FUSED given on the command line (checked against the digests of the files the bundle was made
from). Equivalence, speedups, cycles and engine timelines are computed here with the harness's own code,
the same checks refuse runs that did not run where asked, and the detailed profiles are copied into the
report folder as qnn_profile_<run>.csv (what `hexfuse calibrate` reads).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.io import file_sha256

from . import baselines, compare, device_overlap, guards, latency, models, profile, qnn_session, report, timeline
from .options import AbOptions
from .sessions import RunConfig

SCHEMA = "hexfuse-device-results/1"
_FIELDS = ("bundle", "runs", "reference", "unavailable", "output_names", "latency_ms", "iters", "warmup", "platform",
           "form", "provider_options", "disable_cpu_ep_fallback", "op_packages")
_RUN_FIELDS = ("key", "label", "role", "source", "package", "outputs", "session_seconds")


def load_results(folder: Path) -> dict:
    path = folder / "results.json"
    if not folder.is_dir():
        raise HexfuseError(f"results folder {folder} not found")
    if not path.is_file():
        raise HexfuseError(f"{folder} holds no results.json (is it the folder run_ab.py wrote?)")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise HexfuseError(f"{path} is not valid JSON: {e}".replace("\n", " ")) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else None
        raise HexfuseError(f"{path}: schema {got!r} is not {SCHEMA} (results of another tool or version)")
    missing = [k for k in _FIELDS if k not in data]
    if not missing:
        runs = data["runs"] if isinstance(data["runs"], list) else [None]
        missing = [f"runs[{i}].{k}" for i, run in enumerate(runs) for k in _RUN_FIELDS
                   if not isinstance(run, dict) or k not in run]
        missing += [k for k, kind in (("latency_ms", dict), ("iters", int)) if not isinstance(data[k], kind)]
    if missing:
        raise HexfuseError(f"{path}: not a complete {SCHEMA} file (missing or malformed: {', '.join(missing)})")
    return data


def _model_paths(folder: Path, res: dict, original: str | None, fused: str | None) -> tuple[Path, Path]:
    if original or fused:
        if not (original and fused):
            raise HexfuseError("give both ORIGINAL and FUSED with --import, or neither (the bundle's are used)")
        pairs = ((Path(original), res["bundle"]["original_sha256"], "ORIGINAL"),
                 (Path(fused), res["bundle"]["fused_sha256"], "FUSED"))
        for path, digest, what in pairs:
            if not path.is_file():
                raise HexfuseError(f"model file not found: {path}")
            if file_sha256(path) != digest:
                raise HexfuseError(f"{what} {path} is not the model the bundle of {folder} was made from (sha256 differs)")
        return Path(original), Path(fused)
    bundle = folder.resolve().parent
    manifest = bundle / "bundle.json"
    if not manifest.is_file():
        raise HexfuseError(f"no bundle.json beside {folder}: put the results folder back into its bundle, or give "
                           "ORIGINAL FUSED (the files the bundle was made from)")
    if file_sha256(manifest) != res["bundle"]["manifest_sha256"]:
        raise HexfuseError(f"{folder} was written by another bundle than {bundle} (bundle.json digest differs)")
    data = json.loads(manifest.read_text())
    for side in ("original", "fused"):
        if res["bundle"].get(f"{side}_sha256") != data[side]["sha256"]:
            raise HexfuseError(f"{folder}: results.json names another {side} model than {manifest} (sha256 differs)")
    accounted = {r["key"] for r in res["runs"]} | {u.get("key") for u in res["unavailable"] if isinstance(u, dict)}
    dropped = [r["key"] for r in data["runs"] if r["key"] not in accounted and not r.get("only_without_package")]
    if dropped:
        raise HexfuseError(f"{folder}: runs {dropped} of {manifest} are neither measured nor listed as unavailable")
    return bundle / data["original"]["model"], bundle / data["fused"]["model"]


def _check_recorded(folder: Path, res: dict, output_names: list[str]) -> dict[str, np.ndarray]:
    """What results.json says was run and measured, checked before any figure is made of it; the
    latencies per run key."""
    names = res["output_names"]
    if not isinstance(names, list) or sorted(names) != sorted(output_names):
        raise HexfuseError(f"{folder}: output_names {names!r} are not the model's outputs {output_names}")
    keys = [r["key"] for r in res["runs"]]
    if any(r["role"] != "original" for r in res["runs"] if r["key"] == res["reference"]):
        raise HexfuseError(f"{folder}: the reference run {res['reference']} is not a run of the original model")
    from hexfuse.tools.device.bundle import RUNS  # the runs a bundle defines (its manifest is made from them)

    switch = {r.key: r.serial for r in RUNS if r.package}  # the package's barrier switch each must have run with
    for run in res["runs"]:
        serial = switch.get(run["key"])
        if serial is not None and (not run.get("package") or run.get("serial") != serial):
            raise HexfuseError(f"{folder}: run {run['key']} was recorded with package={run.get('package')} "
                               f"serial={run.get('serial')}, not with the op package at serial={serial}")
    for key, entry in res.get("profiles", {}).get("detailed", {}).items():
        if not (folder / entry["dir"] / "profile.csv").is_file():
            raise HexfuseError(f"{folder}: the detailed profile of run {key} ({entry['dir']}/profile.csv) is missing")
    times: dict[str, np.ndarray] = {}
    for key in keys:
        samples = res["latency_ms"].get(key)
        try:
            times[key] = np.asarray(samples, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            raise HexfuseError(f"{folder}: the latencies of run {key} are not a list of numbers") from None
        if not times[key].size or not np.all(np.isfinite(times[key]) & (times[key] > 0)):
            raise HexfuseError(f"{folder}: run {key} has no latencies, or one that is not a positive number")
    if len({len(t) for t in times.values()}) > 1 or any(len(t) != res["iters"] for t in times.values()):
        counts = {key: len(t) for key, t in times.items()}
        raise HexfuseError(f"{folder}: every run must have iters={res['iters']} latencies (paired), found {counts}")
    return times


def _outputs(folder: Path, rel: str, n: int) -> list[np.ndarray]:
    path = folder / rel
    try:
        with np.load(path, allow_pickle=False) as z:
            return [z[f"out_{i}"] for i in range(n)]
    except (OSError, KeyError, ValueError) as e:
        raise HexfuseError(f"cannot read outputs {path}: {type(e).__name__}") from None


def _profile(folder: Path, res: dict, key: str, out_dir: Path) -> tuple[dict | None, list[dict]]:
    """The detailed profile of one run, copied into the report folder and summarized as runner does."""
    entry = res.get("profiles", {}).get("detailed", {}).get(key)
    if entry is None:
        return None, []
    csv_path = folder / entry["dir"] / "profile.csv"
    copy = out_dir / f"qnn_profile_{key}.csv"
    shutil.copyfile(csv_path, copy)
    return profile.qnn_profile_summary(copy)


def _check_runs(res: dict, cfgs: dict[str, RunConfig], assign: dict[str, qnn_session.Assignment]) -> None:
    """The harness's guards, on the assignment the device recorded."""
    ref = res["reference"]
    for run in res["runs"]:
        a, cfg = assign[run["key"]], cfgs[run["key"]]
        if not a.nodes:
            continue  # (onnxruntime without assignment info: run_ab.py recorded none)
        guards.check_ran_on_qnn(cfg, a)
        if run["package"] and res["form"] == "onnx":  # a context session shows one EPContext node
            guards.check_claims(cfg, a, run.get("claims") or {}, qnn_session.QNN_EP)
        if run["role"] == "fused" and assign[ref].nodes:
            guards.check_placement(cfg, a, assign[ref])


def import_results(results_dir: str, o: AbOptions, original: str | None = None, fused: str | None = None) -> dict:
    from .runner import measured_sections

    folder = Path(results_dir)
    res = load_results(folder)
    orig_path, fused_path = _model_paths(folder, res, original, fused)
    orig_m, fused_m = models.load_model(orig_path), models.load_model(fused_path)
    fused_types = models.fused_op_types(fused_m)
    ref = res["reference"]
    keys = [r["key"] for r in res["runs"]]
    if ref not in keys:
        raise HexfuseError(f"{folder}: the reference run {ref} is missing")
    cfgs = {r["key"]: RunConfig(r["key"], r["label"], r["source"], r["role"], "qnn") for r in res["runs"]}
    assign = {r["key"]: qnn_session.Assignment(list(r.get("assignment") or [])) for r in res["runs"]}
    _check_runs(res, cfgs, assign)
    times = _check_recorded(folder, res, [o.name for o in orig_m.graph.output])
    names = res["output_names"]
    outs = {k: _outputs(folder, r["outputs"], len(names)) for k, r in zip(keys, res["runs"])}
    equiv = {k: compare.compare_outputs(names, outs[ref], outs[k], o.atol, o.rtol, o.min_cosine)
             for k in keys if k != ref}
    out_dir = Path(o.report_dir or f"{folder.resolve()}_ab")
    if out_dir.exists() and not out_dir.is_dir():
        raise HexfuseError(f"report directory {out_dir} exists and is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    profiles, timelines = {}, {}
    for r in res["runs"]:
        summary, rows = _profile(folder, res, r["key"], out_dir)
        if summary is not None:
            profiles[r["key"]] = summary
            timelines[r["key"]] = timeline.build(rows, orig_m if r["role"] == "original" else fused_m, "cycles")
    primary = "b4_fused_concurrent" if "b4_fused_concurrent" in keys else next((k for k in keys if k != ref), "")
    plan = baselines.Plan(reference=ref, primary_fused=primary)
    base_rows = [{"key": r["key"], "label": r["label"], "available": True, "reason": None, "model": r["source"],
                  "role": r["role"], "ep": "qnn", "latency": latency.stats(times[r["key"]])} for r in res["runs"]]
    base_rows += [dict(u, available=False) for u in res["unavailable"]]
    plat = dict(res["platform"])
    rep = {
        "models": {"original": str(orig_path.resolve()), "fused": str(fused_path.resolve()),
                   "fused_op_types": fused_types, "fused_node_count": len(models.fused_nodes(fused_m))},
        "ep": "qnn", "platform": plat, "simulator": bool(plat.get("simulator")),
        "qnn_preset": {"name": res["bundle"]["target"]["preset"], "source": "bundle provider_options.json",
                       "provider_options": res["provider_options"],
                       "disable_cpu_ep_fallback": res["disable_cpu_ep_fallback"]},
        "op_package": {"library": sorted({e.split(":")[1] for e in res["op_packages"].split(",") if e.count(":") >= 2}),
                       "package": res["op_packages"].split(":")[2].removesuffix("InterfaceProvider"),
                       "op_types": fused_types} if res["op_packages"] else None,
        "cpu_custom_op_library": None,
        "inputs": {"source": "bundle inputs.npz", "tensors": {}},
        "iters": res["iters"], "warmup": res["warmup"],
        **measured_sections(plan, "qnn", times, o.seed, base_rows, equiv, assign, profiles, timelines, out_dir),
        "imported": {"results": str(folder.resolve()), "form": res["form"], "target": res["bundle"]["target"],
                     "session_seconds": {r["key"]: r["session_seconds"] for r in res["runs"]},
                     "profile_levels": res.get("levels", []),
                     "optrace_files": {k: [f"{v['dir']}/{f}" for f in v["files"]]
                                       for k, v in res.get("profiles", {}).get("optrace", {}).items()}},
    }
    # what the design asks of the device, first (docs/device.md: reading the engine overlap)
    rep["device_overlap"] = device_overlap.collect(folder, res, fused_m, out_dir)
    report.write_all(out_dir, rep, timelines, times)
    return rep
