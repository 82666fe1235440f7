#!/usr/bin/env python3
"""run_ab.py: the A/B of one hexfuse device bundle, with onnxruntime + the QNN EP only (no hexfuse).

Copied verbatim into every bundle by `hexfuse bundle`; reads bundle.json beside it. Runs the same way on
a Snapdragon device (Android, Linux, Windows on Snapdragon) and on x86 Linux, where the HTP backend of
onnxruntime-qnn is a simulator (outputs and placement real, times meaningless).

    python run_ab.py [--from context|onnx] [--iters 50 --warmup 5] [--profile-runs 3] [-o results]

Per run of bundle.json (2 original, 3 fused serial=1, 4 fused serial=0; "fused_inlined" only when this
platform has no package build): one session (from the context binary prepared on x86, or prepared here
from the ONNX model), a first run whose outputs are saved and compared with the original's, timed runs
interleaved in rotating order, then profiling passes at `detailed` and `optrace` (each run in its own
folder: QNN writes optrace files into the working folder). Everything lands in one results folder,
written beside and swapped in whole:

    results/results.json                       what ran where, latencies, checks (schema below)
    results/outputs/<run>.npz                  first-run outputs (arrays out_0, out_1, ...)
    results/profiles/<level>/<run>/profile.csv QNN EP profile (+ whatever QNN wrote beside it)
    results/profiles/optrace/<run>/            for the engine overlap (`hexfuse ab --import` reads it first):
        *_qnn.log           the QNN EP's binary profile log of the optrace runs
        *_schematic.bin     the prepare's schematic (copied from contexts/ for context binaries)
        chrometrace.json    per-hardware-thread timeline, when QNN's profile viewer is here (QNN_SDK_ROOT);
                            else the workstation's SDK makes it from the two files above on import
        ort_profile_*.json  ONNX Runtime's own profile of the same runs (host threads)

Exit 0 when every run ran on the QNN EP as asked and matched the original within the bundle's tolerances;
1 with one line `run_ab: error: ...` otherwise (results are still written when the runs completed).
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

SCHEMA = "hexfuse-device-results/1"
INLINED = "fused_inlined"  # the fused model without its op package: ORT inlines each fused node's function
INLINED_NOTE = ("expected next: the QNN EP logs 'Unsupported nodes in QNN EP' (in red) for the fused nodes of this "
                "run; without the op package ONNX Runtime inlines their functions, whose nodes the QNN EP then runs")
BUNDLE_SCHEMA = "hexfuse-bundle/1"
QNN_EP = "QNNExecutionProvider"
OPTION_LIMIT = 8192  # ONNX Runtime refuses longer session config values


class RunError(Exception):
    pass


def say(msg: str, quiet: bool = False) -> None:
    if not quiet:
        print(f"run_ab: {msg}", file=sys.stderr, flush=True)


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def platform_key() -> str:
    """Which package builds this machine can load: the keys of bundle.json's package.libraries."""
    machine = platform.machine().lower()
    system = platform.system().lower()
    if machine in ("x86_64", "amd64"):
        return "x86_64-windows" if system == "windows" else "x86_64-linux"
    if machine in ("aarch64", "arm64"):
        if system == "windows":
            return "windows-arm64"
        if hasattr(sys, "getandroidapilevel") or "ANDROID_ROOT" in os.environ:
            return "android-aarch64"
        return "linux-aarch64"
    return f"{system}-{machine}"


# --- the QNN EP -----------------------------------------------------------------------------------

class Qnn:
    """The QNN EP through onnxruntime-qnn's plugin library (pip wheels 2.x), or built into onnxruntime.
    (With the plugin wheel, providers=["QNNExecutionProvider"] silently runs on the CPU: never used.)"""

    def __init__(self) -> None:
        import onnxruntime as ort
        self.ort = ort
        self.devices = None
        try:
            import onnxruntime_qnn
        except ImportError:
            onnxruntime_qnn = None
        if onnxruntime_qnn is not None:
            try:
                ort.register_execution_provider_library(QNN_EP, onnxruntime_qnn.get_library_path())
            except Exception as e:  # noqa: BLE001 (registered earlier in this process is fine)
                if "already registered" not in str(e):
                    raise RunError(f"cannot register the QNN EP plugin: {first_line(e)}")
            self.devices = [d for d in ort.get_ep_devices() if d.ep_name == QNN_EP]
            if not self.devices:
                raise RunError("the QNN EP plugin is registered but offers no device")
            self.kind = "plugin"
        elif QNN_EP in ort.get_available_providers():
            self.kind = "builtin"
        else:
            raise RunError("no QNN EP: install onnxruntime-qnn (pip) or use an onnxruntime build with the QNN EP")

    def session(self, path: str, options: dict, disable_cpu_fallback: bool, ort_profile: str | None = None):
        ort = self.ort
        so = ort.SessionOptions()
        so.log_severity_level = 3
        if ort_profile:  # ONNX Runtime's own profile: the host's timeline of the same runs
            so.enable_profiling = True
            so.profile_file_prefix = ort_profile
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.add_session_config_entry("session.inter_op.allow_spinning", "0")
        if disable_cpu_fallback:
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        try:
            if self.kind == "plugin":
                so.add_provider_for_devices(self.devices, options)
                return ort.InferenceSession(path, so, enable_fallback=0)
            return ort.InferenceSession(path, so, providers=[(QNN_EP, options)], enable_fallback=0)
        except Exception as e:  # noqa: BLE001
            raise RunError(f"cannot create a QNN EP session for {path}: {first_line(e)}")


def first_line(e: Exception) -> str:
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    return lines[0] if lines else type(e).__name__


def assignment(session) -> list | None:
    """Which EP ran each node (onnxruntime >= 1.23 with record_ep_graph_assignment_info), else None."""
    try:
        subgraphs = session.get_provider_graph_assignment_info()
    except Exception:  # noqa: BLE001 (older onnxruntime: not recorded)
        return None
    nodes = []
    for i, sg in enumerate(subgraphs):
        for n in sg.get_nodes():
            nodes.append({"ep": sg.ep_name, "name": n.name, "op_type": n.op_type, "domain": n.domain, "subgraph": i})
    return nodes


# --- bundle ---------------------------------------------------------------------------------------

class Bundle:
    def __init__(self, folder: str) -> None:
        self.dir = os.path.abspath(folder)
        path = os.path.join(self.dir, "bundle.json")
        if not os.path.isfile(path):
            raise RunError(f"no bundle.json in {self.dir}")
        with open(path) as f:
            self.manifest = json.load(f)
        if self.manifest.get("schema") != BUNDLE_SCHEMA:
            raise RunError(f"{path}: unknown bundle schema {self.manifest.get('schema')!r} (this script reads {BUNDLE_SCHEMA})")
        self.manifest_sha256 = sha256(path)
        with open(self.path(self.manifest["provider_options"])) as f:
            self.options = json.load(f)

    def path(self, rel: str) -> str:
        return os.path.join(self.dir, *rel.split("/"))

    def exists(self, rel: str | None) -> bool:
        return bool(rel) and os.path.isfile(self.path(rel))

    def inputs(self) -> dict:
        with np.load(self.path(self.manifest["inputs"]), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    def op_packages(self, key: str, form: str) -> tuple[str | None, str]:
        """(op_packages option or None, reason when None) for platform ``key`` and run form."""
        pkg = self.manifest["package"]
        libs = pkg["libraries"].get(key)
        if not libs:
            return None, f"the bundle has no op package build for this platform ({key})"
        entries = []
        for lib in libs:
            present = self.exists(lib["path"])
            if not present and form in lib["needed_for"]:
                return None, f"op package build {lib['path']} is missing (build.sh builds it)"
            if present:  # one entry per op type: the EP claims custom nodes by op type
                entries += [f"{t}:{self.path(lib['path'])}:{pkg['name']}InterfaceProvider:{lib['target']}"
                            for t in pkg["op_types"]]
        option = ",".join(entries)
        if len(option) > OPTION_LIMIT:
            return None, (f"the op_packages option is {len(option)} characters, over ONNX Runtime's {OPTION_LIMIT}: "
                          "put the bundle at a shorter path")
        return option, ""


# --- the A/B --------------------------------------------------------------------------------------

def plan(bundle: Bundle, key: str, form: str) -> tuple[list, list, str]:
    """(runs to make, unavailable runs, op_packages option)."""
    option, why = bundle.op_packages(key, form)
    runs, unavailable = [], list(bundle.manifest["unavailable"])
    for run in bundle.manifest["runs"]:
        if run["package"] and option is None:
            unavailable.append({"key": run["key"], "label": run["label"], "reason": why})
            continue
        if run.get("only_without_package") and option is not None:
            continue
        source = run["context"] if form == "context" else run["model"]
        if not bundle.exists(source):
            hint = " (the bundle was made without a QNN SDK: build.sh compiles them)" if form == "context" else ""
            raise RunError(f"{source} is missing{hint}; use --from onnx to prepare on this machine")
        runs.append(dict(run, source=source))
    return runs, unavailable, option or ""


def check_ran(run: dict, nodes: list | None, form: str) -> None:
    if nodes is None:
        return
    if not any(n["ep"] == QNN_EP for n in nodes):
        raise RunError(f"{run['label']}: the QNN EP ran no node (everything fell back to the CPU)")
    if run["package"] and form == "onnx":  # (a context session shows one EPContext node: checked when compiled)
        got = {}
        for n in nodes:
            if n["ep"] == QNN_EP and n["op_type"] in run["claims"]:
                got[n["op_type"]] = got.get(n["op_type"], 0) + 1
        short = sorted(t for t, want in run["claims"].items() if got.get(t, 0) < want)
        if short:
            raise RunError(f"{run['label']}: the op package did not claim fused op(s) {short}; the function was inlined")


def compare(ref: list, got: list, tol: dict) -> dict:
    """Quick on-device check (the workstation recomputes it on import, tools/ab/compare.py's rules):
    integers equal, NaN and infinities in the same places, the finite rest within the tolerances."""
    worst, passed = 0.0, True
    for a, b in zip(ref, got):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return {"passed": False, "max_abs_err": None, "reason": f"shape {a.shape} vs {b.shape}"}
        if not a.size:
            continue
        if a.dtype.kind in "iub" or b.dtype.kind in "iub":
            passed = passed and bool(np.array_equal(a, b))
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        fin = np.isfinite(a64)
        same = np.array_equal(np.isnan(a64), np.isnan(b64)) and np.array_equal(a64[~fin & ~np.isnan(a64)],
                                                                                b64[~fin & ~np.isnan(a64)])
        diff = np.abs(a64[fin] - b64[fin])
        worst = max(worst, float(diff.max()) if diff.size else 0.0)
        na, nb = float(np.linalg.norm(a64[fin])), float(np.linalg.norm(b64[fin]))
        cos = 1.0 if na == nb == 0.0 else (0.0 if 0.0 in (na, nb) else float(np.dot(a64[fin], b64[fin]) / (na * nb)))
        ok = bool(np.all(diff <= tol["atol"] + tol["rtol"] * np.abs(a64[fin]))) and (cos >= tol["min_cosine"] or na == 0.0)
        passed = passed and ok and bool(same) and bool(np.isfinite(b64[fin]).all())
    return {"passed": passed, "max_abs_err": worst}


def save_outputs(path: str, arrays: list) -> None:
    with open(path, "wb") as f:
        np.savez(f, **{f"out_{i}": np.asarray(a) for i, a in enumerate(arrays)})


def time_interleaved(runners: dict, iters: int, warmup: int, quiet: bool) -> dict:
    """Every run once per iteration, order rotating (drift hits all runs alike; iterations pair up)."""
    keys = list(runners)
    for _ in range(warmup):
        for k in keys:
            runners[k]()
    times = {k: [] for k in keys}
    last = time.monotonic()
    for i in range(iters):
        shift = i % len(keys)
        for k in keys[shift:] + keys[:shift]:
            t0 = time.perf_counter()
            runners[k]()
            times[k].append((time.perf_counter() - t0) * 1e3)
        if time.monotonic() - last > 5:
            say(f"timing {i + 1}/{iters}", quiet)
            last = time.monotonic()
    return times


def profile(qnn: Qnn, run: dict, options: dict, fallback: bool, feeds: dict, level: str, folder: str,
            runs: int) -> dict:
    os.makedirs(folder, exist_ok=True)
    opts = dict(options, profiling_level=level, profiling_file_path=os.path.join(folder, "profile.csv"))
    here = os.getcwd()
    os.chdir(folder)  # optrace files land in the working folder
    try:
        ort_profile = os.path.join(folder, "ort_profile") if level == "optrace" else None
        sess = qnn.session(run["abs_source"], opts, fallback, ort_profile)
        for _ in range(runs):
            sess.run(None, feeds)
        if ort_profile:
            sess.end_profiling()
        del sess
        gc.collect()  # the CSV is written when the session is released
    finally:
        os.chdir(here)
    return {"files": sorted(os.listdir(folder))}


# --- what the engine-overlap reading needs (tools/ab/device_overlap.py) ----------------------------
# Per optrace run: the QNN EP's binary profile log (<profile>_qnn.log), the prepare's schematic
# (<graph>_schematic.bin: written here by an on-device prepare, shipped in contexts/ for context
# binaries), and from the two QNN's profile viewer with its optrace reader writes chrometrace.json, the
# per-hardware-thread timeline (start, duration, thread per op). ONNX Runtime's profile rides along.
VIEWER_CONFIG = {"htp_json": False, "runtrace": False, "memory_info": False,
                 "enable_input_output_flow_events": False, "enable_sequencer_flow_events": False}
SDK_ARCHS = ("aarch64-android", "aarch64-oe-linux-gcc11.2", "aarch64-ubuntu-gcc9.4", "aarch64-windows-msvc",
             "x86_64-linux-clang", "x86_64-windows-msvc")


def profile_viewer() -> tuple[str, str] | None:
    """QNN's profile viewer and optrace reader on this machine (QNN_SDK_ROOT), if any."""
    root = os.environ.get("QNN_SDK_ROOT")
    for arch in SDK_ARCHS if root else ():
        exe = ".exe" if "windows" in arch else ""
        lib = "QnnHtpOptraceProfilingReader.dll" if "windows" in arch else "libQnnHtpOptraceProfilingReader.so"
        viewer = os.path.join(root, "bin", arch, "qnn-profile-viewer" + exe)
        reader = os.path.join(root, "lib", arch, lib)
        if os.path.isfile(viewer) and os.path.isfile(reader):
            return viewer, reader
    return None


def collect_trace(bundle: Bundle, run: dict, form: str, folder: str, viewer) -> dict:
    """What this run's optrace folder holds for the per-thread timeline, completed where it can be."""
    names = sorted(os.listdir(folder))
    log = next((n for n in names if n.endswith("_qnn.log")), None)
    schematic = next((n for n in names if n.endswith("_schematic.bin")), None)
    if schematic is None and form == "context" and bundle.exists(run.get("schematic")):
        schematic = os.path.basename(run["schematic"])
        shutil.copyfile(bundle.path(run["schematic"]), os.path.join(folder, schematic))
    timeline = "chrometrace.json" if "chrometrace.json" in names else None
    if timeline is None and log and schematic and viewer:
        config = os.path.join(folder, "viewer_config.json")
        with open(config, "w") as f:
            json.dump(VIEWER_CONFIG, f)
        env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join([os.path.dirname(viewer[1]),
                                                                os.environ.get("LD_LIBRARY_PATH", "")]))
        done = subprocess.run([viewer[0], "--config", config, "--reader", viewer[1], "--input_log",
                               os.path.join(folder, log), "--schematic", os.path.join(folder, schematic), "--output",
                               os.path.join(folder, "chrometrace.json")], capture_output=True, text=True, env=env)
        if done.returncode == 0 and os.path.isfile(os.path.join(folder, "chrometrace.json")):
            timeline = "chrometrace.json"
    ort_profile = next((n for n in sorted(os.listdir(folder)) if n.startswith("ort_profile") and n.endswith(".json")),
                       None)
    if timeline:
        missing = ""
    elif not log:
        missing = "the QNN EP wrote no binary profile log (*_qnn.log): no per-thread timeline can be made"
    elif not schematic:
        missing = ("no prepare schematic: the context binaries were compiled without one (rerun build.sh, or "
                   "use --from onnx)")
    else:
        missing = ("QNN's profile viewer is not on this machine (QNN_SDK_ROOT): `hexfuse ab --import` decodes the "
                   "log with the workstation's SDK")
    return {"qnn_log": log, "schematic": schematic, "chrometrace": timeline, "ort_profile": ort_profile,
            "missing": missing}


def replace_dir(stage: str, out: str) -> None:
    if os.path.exists(out):
        if not os.path.isdir(out) or (os.listdir(out) and not os.path.isfile(os.path.join(out, "results.json"))):
            raise RunError(f"refusing to replace {out}: not an earlier results folder (no results.json)")
        old = f"{out}.old.{os.getpid()}"
        os.replace(out, old)
        os.replace(stage, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(stage, out)


def main(argv: list | None = None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description="hexfuse device A/B (see README.md in the bundle)")
    ap.add_argument("--bundle", default=here, help="bundle folder (default: this script's folder)")
    ap.add_argument("--from", dest="form", choices=("auto", "context", "onnx"), default="auto",
                    help="load context binaries prepared on x86 (context) or prepare the ONNX models here (onnx); "
                    "auto: context when the bundle has them")
    ap.add_argument("--iters", type=int, help="timed iterations per run (default: bundle.json)")
    ap.add_argument("--warmup", type=int, help="untimed iterations first (default: bundle.json)")
    ap.add_argument("--profile-runs", type=int, help="runs per profiling pass (default: bundle.json)")
    ap.add_argument("--levels", default="detailed,optrace", help="profiling levels, comma-separated ('' for none)")
    ap.add_argument("--platform", help="package platform key (default: detected, e.g. android-aarch64)")
    ap.add_argument("-o", "--out", help="results folder (default: <bundle>/results)")
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    try:
        return run(a)
    except RunError as e:
        print(f"run_ab: error: {e}", file=sys.stderr)
        return 1


def run(a: argparse.Namespace) -> int:
    bundle = Bundle(a.bundle)
    m = bundle.manifest
    d = m["defaults"]
    iters, warmup = a.iters or d["iters"], d["warmup"] if a.warmup is None else a.warmup
    profile_runs = a.profile_runs or d["profile_runs"]
    if iters < 2 or warmup < 0 or profile_runs < 1:
        raise RunError("--iters must be >= 2, --warmup >= 0, --profile-runs >= 1")
    levels = [x for x in a.levels.split(",") if x]
    for level in levels:
        if level not in ("basic", "detailed", "optrace"):
            raise RunError(f"unknown profiling level {level!r} (basic, detailed, optrace)")
    key = a.platform or platform_key()
    form = a.form
    if form == "auto":
        form = "context" if all(bundle.exists(r["context"]) for r in m["runs"]) else "onnx"
    out = os.path.abspath(a.out or bundle.path("results"))
    if key.startswith("android") and not os.environ.get("ADSP_LIBRARY_PATH"):
        say("warning: ADSP_LIBRARY_PATH is not set; the HTP loads its skel and the package from there (README.md)")
    qnn = Qnn()
    runs, unavailable, op_packages = plan(bundle, key, form)
    feeds = bundle.inputs()
    base = dict(bundle.options["provider_options"])
    fallback = bool(bundle.options["disable_cpu_ep_fallback"])
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    stage = tempfile.mkdtemp(prefix=".results.", dir=parent)
    try:
        return _run(a, bundle, key, form, qnn, runs, unavailable, op_packages, feeds, base, fallback, stage, out,
                    iters, warmup, profile_runs, levels)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _run(a, bundle, key, form, qnn, runs, unavailable, op_packages, feeds, base, fallback, stage, out,
         iters, warmup, profile_runs, levels) -> int:
    m = bundle.manifest
    sessions, names = {}, None
    for i, run in enumerate(runs, 1):
        run["abs_source"] = bundle.path(run["source"])
        run["options"] = dict(base, op_packages=op_packages) if run["package"] else dict(base)
        say(f"session {i}/{len(runs)}: {run['label']} from {run['source']}", a.quiet)
        if run["key"] == INLINED:
            say(INLINED_NOTE, a.quiet)
        t0 = time.perf_counter()
        sessions[run["key"]] = qnn.session(run["abs_source"], run["options"], fallback)
        run["session_seconds"] = time.perf_counter() - t0
        run["assignment"] = assignment(sessions[run["key"]])
        check_ran(run, run["assignment"], form)
    ref_key = m["reference"]
    names = [o.name for o in sessions[ref_key].get_outputs()]
    os.makedirs(os.path.join(stage, "outputs"))
    outs = {}
    for run in runs:
        try:
            outs[run["key"]] = sessions[run["key"]].run(names, feeds)
        except Exception as e:  # noqa: BLE001
            raise RunError(f"{run['label']} failed on the QNN EP: {first_line(e)}")
        run["outputs"] = f"outputs/{run['key']}.npz"
        save_outputs(os.path.join(stage, *run["outputs"].split("/")), outs[run["key"]])
    checks = {r["key"]: compare(outs[ref_key], outs[r["key"]], m["tolerances"]) for r in runs if r["key"] != ref_key}
    say(f"timing {len(runs)} runs interleaved: {warmup} warmup + {iters} iterations", a.quiet)
    runners = {r["key"]: (lambda s=sessions[r["key"]]: s.run(names, feeds)) for r in runs}
    times = time_interleaved(runners, iters, warmup, a.quiet)
    del runners
    sessions.clear()
    gc.collect()
    profiles, traces = {}, {}
    viewer = profile_viewer()
    for level in levels:
        profiles[level] = {}
        for run in runs:
            say(f"profiling ({level}): {run['key']}", a.quiet)
            folder = os.path.join(stage, "profiles", level, run["key"])
            got = profile(qnn, run, run["options"], fallback, feeds, level, folder, profile_runs)
            if level == "optrace":
                traces[run["key"]] = collect_trace(bundle, run, form, folder, viewer)
                t = traces[run["key"]]
                have = (f"{t['chrometrace']} (per hardware thread)" if t["chrometrace"] else
                        f"QNN log {'yes' if t['qnn_log'] else 'NO'}, schematic {'yes' if t['schematic'] else 'NO'}; "
                        + t["missing"])
                say(f"  engine timeline of {run['key']}: {have}", a.quiet)
                got["files"] = sorted(os.listdir(folder))
            profiles[level][run["key"]] = {"dir": f"profiles/{level}/{run['key']}", "files": got["files"]}
    if not any(level == "optrace" for level in levels):
        say("no optrace pass (--levels): the engine overlap per fused node cannot be read from these results", a.quiet)
    import onnxruntime as ort
    try:
        from importlib.metadata import version
        qnn_version = version("onnxruntime-qnn") if qnn.kind == "plugin" else None
    except Exception:  # noqa: BLE001
        qnn_version = None
    results = {
        "schema": SCHEMA,
        "bundle": {"manifest_sha256": bundle.manifest_sha256, "target": m["target"],
                   "original_sha256": m["original"]["sha256"], "fused_sha256": m["fused"]["sha256"]},
        "platform": {"key": key, "system": platform.system(), "machine": platform.machine(),
                     "python": platform.python_version(), "onnxruntime": ort.__version__,
                     "onnxruntime_qnn": qnn_version, "qnn_ep": qnn.kind,
                     "simulator": platform.machine().lower() in ("x86_64", "amd64")},
        "form": form, "provider_options": base, "disable_cpu_ep_fallback": fallback, "op_packages": op_packages,
        "iters": iters, "warmup": warmup, "profile_runs": profile_runs, "levels": levels,
        "reference": ref_key, "output_names": names,
        "runs": [dict({k: r[k] for k in ("key", "label", "role", "model", "source", "package", "session_seconds",
                                         "assignment", "outputs")}, claims=r.get("claims"), serial=r.get("serial"))
                 for r in runs],
        "unavailable": unavailable,
        "latency_ms": times,
        "device_check": checks,
        "profiles": profiles,
        "engine_timeline": traces,
    }
    with open(os.path.join(stage, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    replace_dir(stage, out)
    bad = sorted(k for k, c in checks.items() if not c["passed"])
    med = {k: float(np.median(v)) for k, v in times.items()}
    say("median ms: " + ", ".join(f"{k} {v:.3f}" for k, v in med.items())
        + (" [x86 HTP simulator: times say nothing about a device]" if results["platform"]["simulator"] else ""),
        a.quiet)
    say(f"results in {out}; copy the folder back and run `hexfuse ab --import {os.path.basename(out)}`", a.quiet)
    if bad:
        raise RunError(f"outputs differ from the original in {', '.join(bad)} (see {out}/results.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
