"""`hexfuse bundle ORIGINAL FUSED -o DIR --target sm8650`: one folder to copy to a Snapdragon device.

    DIR/
      README.md                 what to copy where and which commands to run (Android, Linux, Windows)
      bundle.json               manifest: runs (baselines 2, 3, 4), libraries per platform, tolerances
      run_ab.py                 the A/B with onnxruntime + the QNN EP only (tools/device/run_script.py)
      build.sh                  exact commands for what this folder lacks (HTP/ARM/x86 builds, contexts)
      inputs.npz                fixed inputs (byte-identical for the same models and seed)
      provider_options.json     QNN EP options of the target's preset (soc_model, htp_arch, ...)
      models/                   original.onnx, fused_serial0.onnx, fused_serial1.onnx, fused.hexfuse.json
      contexts/                 <run>.ctx.onnx prepared on x86 for the target (when QNN_SDK_ROOT is set), and
                                <run>_schematic.bin, that prepare's optrace schematic (decodes the device's optrace)
      package/                  the op package sources; package/build/<arch>/libQnn<Pkg>.so once built

Everything is built in a folder beside DIR and swapped in at the end. Without an SDK (or with
--no-build) the folder is deterministic: the same inputs give the same bytes.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import time
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.io import file_sha256, staging_folder, write_atomic
from hexfuse.tools.ab import models, qnn_session
from hexfuse.tools.ab.inputs import load_npz, random_inputs
from hexfuse.tools.ab.options import AbOptions
from hexfuse.tools.ab.presets import load_preset

from .targets import DeviceTarget, device_target

MARKER = ".hexfuse-bundle"
SCHEMA = "hexfuse-bundle/1"
RUN_SCRIPT = Path(__file__).with_name("run_script.py")
X86_BUILD = "build/x86_64-linux-clang"
ARM_BUILD = "build/aarch64-android"
_AB = AbOptions("", "")  # the tolerances and run counts `hexfuse ab` uses by default


@dataclass(frozen=True)
class BundleOptions:
    original: str
    fused: str
    output: str
    target: str
    package_name: str = "HexFuse"
    inputs: str | None = None
    seed: int = 0
    build: bool = True  # build htp_x86 and prepare the contexts when QNN_SDK_ROOT is set


@dataclass(frozen=True)
class Run:
    key: str
    label: str
    role: str
    model: str      # bundle-relative ONNX model
    package: bool
    serial: int | None = None
    only_without_package: bool = False

    @property
    def context(self) -> str:
        return f"contexts/{self.key}.ctx.onnx"

    @property
    def schematic(self) -> str:
        """The prepare's optrace schematic: QNN's profile viewer needs it to turn the device's optrace log
        of this context into a per-thread timeline (tools/ab/device_overlap.py)."""
        return f"contexts/{self.key}_schematic.bin"


RUNS = (
    Run("b2_original_best", "(2) original, QNN's own scheduling", "original", "models/original.onnx", False),
    Run("b3_fused_serial", "(3) fused, op package, internal serial (serial=1)", "fused", "models/fused_serial1.onnx",
        True, 1),
    Run("b4_fused_concurrent", "(4) fused, op package, internal concurrent (serial=0)", "fused",
        "models/fused_serial0.onnx", True, 0),
    Run("fused_inlined", "fused (inlined by ORT; functional check, not baseline 3/4)", "fused",
        "models/fused_serial0.onnx", False, only_without_package=True),
)
UNAVAILABLE = [{"key": "b1_original_seq", "label": "(1) original, serial",
                "reason": "QNN EP exposes no switch to serialize HTP's own scheduling; the profile's sum of per-node "
                          "cycles stands in for it (cycles section)"}]


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An .npz numpy reads, with fixed zip timestamps (np.savez stamps the current time)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name in sorted(arrays):
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            data = io.BytesIO()
            np.lib.format.write_array(data, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            z.writestr(info, data.getvalue())
    return out.getvalue()


def _copy_model(src: Path, dst: Path) -> None:
    """Byte copy, unless tensors live in external files: then load them and save one self-contained copy."""
    proto = onnx.load(str(src), load_external_data=False)
    if not any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        shutil.copyfile(src, dst)
        return
    proto = onnx.load(str(src))
    big = proto.ByteSize() > 1_500_000_000
    onnx.save(proto, str(dst), save_as_external_data=big, location=dst.name + ".data" if big else None)


def _check_output(out: Path, inputs: list[Path]) -> None:
    if out.exists():
        if not out.is_dir():
            raise HexfuseError(f"bundle output {out} exists and is not a directory")
        if any(out.iterdir()) and not (out / MARKER).is_file():
            raise HexfuseError(f"refusing to replace {out}: it is not empty and not a bundle hexfuse wrote "
                               f"(no {MARKER}); choose a new or empty directory")
    for p in inputs:
        if out.resolve() == p.resolve() or out.resolve() in p.resolve().parents:
            raise HexfuseError(f"bundle output {out} would replace the input {p}")


def _swap_in(stage: Path, out: Path) -> None:
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old.{os.getpid()}"
        os.replace(out, old)
    os.replace(stage, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def libraries(target: DeviceTarget, package: str) -> dict[str, list[dict]]:
    """Package builds per platform key (run_script.platform_key), and which run form needs each.
    A device registers the HTP build (target HTP); Android also the ARM build (target CPU), which the
    HTP backend's on-device prepare uses, as in the QNN SDK's op package tutorial."""
    lib = f"libQnn{package}.so"
    htp = {"path": f"package/{target.build_dir}/{lib}", "target": "HTP", "needed_for": ["context", "onnx"]}
    return {
        "x86_64-linux": [{"path": f"package/{X86_BUILD}/{lib}", "target": "CPU", "needed_for": ["context", "onnx"]}],
        "android-aarch64": [{"path": f"package/{ARM_BUILD}/{lib}", "target": "CPU", "needed_for": ["onnx"]}, htp],
        "linux-aarch64": [htp],
        "windows-arm64": [htp],
    }


def manifest(o: BundleOptions, target: DeviceTarget, preset_name: str, fused_count: dict[str, int],
             original_sha: str, fused_sha: str) -> dict:
    runs = []
    for run in RUNS:
        entry = {"key": run.key, "label": run.label, "role": run.role, "model": run.model, "context": run.context,
                 "schematic": run.schematic, "package": run.package, "serial": run.serial}
        if run.package:
            entry["claims"] = dict(sorted(fused_count.items()))
        if run.only_without_package:
            entry["only_without_package"] = True
        runs.append(entry)
    return {
        "schema": SCHEMA,
        "target": {"name": target.name, "hexagon": target.hexagon, "preset": preset_name,
                   "description": target.description},
        "original": {"model": "models/original.onnx", "source": Path(o.original).name, "sha256": original_sha},
        "fused": {"model": "models/fused_serial0.onnx", "source": Path(o.fused).name, "sha256": fused_sha,
                  "spec": "models/fused.hexfuse.json", "fused_nodes": sum(fused_count.values())},
        "package": {"name": o.package_name, "op_types": sorted(fused_count), "sources": "package",
                    "libraries": libraries(target, o.package_name)},
        "inputs": "inputs.npz",
        "provider_options": "provider_options.json",
        "reference": "b2_original_best",
        "runs": runs,
        "unavailable": UNAVAILABLE,
        "tolerances": {"atol": _AB.atol, "rtol": _AB.rtol, "min_cosine": _AB.min_cosine},
        "defaults": {"iters": _AB.iters, "warmup": _AB.warmup, "profile_runs": _AB.profile_runs},
    }


def build_script(target: DeviceTarget, package: str) -> str:
    t = target.name
    lines = [
        "#!/bin/sh",
        "# Builds what this bundle lacks, on an x86-64 Linux workstation (written by `hexfuse bundle`).",
        "#   QNN_SDK_ROOT      the QNN / QAIRT SDK of the runtime's release (onnxruntime-qnn 2.7.0 carries QNN 2.51)",
        "#   HEXAGON_SDK_ROOT  the Hexagon SDK (hexagon-clang++; libnative for the x86 build, or X86_LIBNATIVE_DIR)",
        "#   ANDROID_NDK_ROOT  the Android NDK (step 2 only)",
        "#   hexfuse and onnxruntime-qnn installed (step 3 only)",
        "set -eu",
        'cd "$(dirname "$0")"',
        f"# 1. the HTP build for {target.description}",
        f"make -C package {target.make_target}          # -> package/{target.build_dir}/libQnn{package}.so",
        "# 2. the Android ARM64 build, registered on the CPU side beside the HTP build (on-device prepare)",
        f"make -C package htp_aarch64      # -> package/{ARM_BUILD}/libQnn{package}.so",
        "# 3. the x86 build (HTP simulator) and the context binaries prepared with it for the device",
        f"make -C package htp_x86          # -> package/{X86_BUILD}/libQnn{package}.so",
        "mkdir -p contexts",
    ]
    for run in RUNS:
        pkg = " --package package" if run.package else (" --inline" if run.role == "fused" else "")
        lines.append(f"hexfuse compile {run.model}{pkg} -o {run.context} --target {t} --schematic {run.schematic}")
    return "\n".join(lines) + "\n"


def readme(target: DeviceTarget, package: str, has_contexts: bool) -> str:
    ctx = ("contexts/ holds the context binaries prepared on x86 for this target" if has_contexts else
           "contexts/ is empty: this bundle was made without a QNN SDK; `sh build.sh` on a workstation fills it")
    return f"""# hexfuse device bundle: {target.description}

Fused vs original model, A/B on the device's HTP. {ctx}; package/ holds the op package sources
(`sh build.sh` builds the HTP {target.hexagon}, Android ARM64 and x86 libraries). Full runbook: docs/device.md
in the hexfuse repository.

## Run
Needs Python 3.9+ with numpy and onnxruntime with the QNN EP (the onnxruntime-qnn wheel where one exists).

    python run_ab.py                  # context binaries when present, else prepare the ONNX models here
    python run_ab.py --from onnx      # prepare on this machine instead (slow on a phone; needs the ARM build)
    python run_ab.py --iters 200 --profile-runs 5

Android (adb): copy this folder to /data/local/tmp/hexfuse, then in `adb shell`:

    cd /data/local/tmp/hexfuse
    export LD_LIBRARY_PATH=$PWD/package/{ARM_BUILD}:<folder with libQnnHtp.so, libQnnHtpV{target.hexagon[1:]}Stub.so>
    export ADSP_LIBRARY_PATH="$PWD/package/{target.build_dir};<folder with libQnnHtpV{target.hexagon[1:]}Skel.so>"
    python run_ab.py

Windows on Snapdragon: `pip install onnxruntime-qnn` and run `python run_ab.py` (the HTP build of the package
for that PC's Hexagon version goes where bundle.json's `windows-arm64` entry says).

Engine overlap (does a fused node's task op run while HMX works?) is read from the optrace pass: run_ab.py keeps
each run's QNN log, the prepare's schematic and ONNX Runtime's profile in results/profiles/optrace/<run>/, and
writes the per-hardware-thread timeline (chrometrace.json) there when QNN_SDK_ROOT points at an SDK with
qnn-profile-viewer for this machine; otherwise `hexfuse ab --import` makes it with the workstation's SDK.

## Bring the results back

    adb pull /data/local/tmp/hexfuse/results ./results      # into this folder on the workstation
    hexfuse ab --import results                             # the report of a normal `hexfuse ab` run
    hexfuse calibrate results/profiles/detailed/b2_original_best/profile.csv --model models/original.onnx \\
        --target {target.name} -o my_{target.name}.json

On x86 the same script runs against the HTP simulator of onnxruntime-qnn: outputs and node placement are
real, times and cycles are not a device's.
"""


def make_bundle(o: BundleOptions, say: Callable[[str], None]) -> Path:
    from hexfuse.graph_passes.spec.model import load_spec
    from hexfuse.op_package.cli import check_model_matches, spec_path
    from hexfuse.op_package.render import check_package_name, render_package
    from hexfuse.op_package.writer import write_tree

    target = device_target(o.target)
    preset = load_preset(target.preset)
    original, fused, out = Path(o.original), Path(o.fused), Path(o.output)
    check_package_name(o.package_name)
    orig_m, fused_m = models.load_model(original), models.load_model(fused)
    models.check_compatible(orig_m, fused_m, o.original, o.fused)
    fused_count = dict(Counter(n.op_type for n in models.fused_nodes(fused_m)))
    if not fused_count:
        raise HexfuseError(f"{fused} has no fused (hexfuse) node: nothing to bundle (run `hexfuse fuse` first)")
    if models.fused_nodes(orig_m):
        raise HexfuseError(f"{original} holds fused nodes: give the model as it was before `hexfuse fuse`")
    spec_file = spec_path(fused)
    if not spec_file.is_file():
        raise HexfuseError(f"no fusion spec {spec_file} beside {fused}: run `hexfuse fuse` first")
    spec = load_spec(str(spec_file))
    check_model_matches(fused, spec)
    specs = models.graph_inputs(orig_m)
    feeds = load_npz(o.inputs, specs) if o.inputs else random_inputs(specs, o.seed)
    _check_output(out, [original, fused, spec_file] + ([Path(o.inputs)] if o.inputs else []))
    sdk = o.build and bool(os.environ.get("QNN_SDK_ROOT"))
    if sdk and not qnn_session.qnn_available():
        raise HexfuseError("QNN_SDK_ROOT is set but onnxruntime-qnn is missing: contexts cannot be prepared "
                           "(pip install 'hexfuse[qnn]', or --no-build)")
    stage = staging_folder(out)
    try:
        (stage / "models").mkdir()
        (stage / "contexts").mkdir()
        _copy_model(original, stage / "models" / "original.onnx")
        for serial in (0, 1):
            models.write_serial_variant(str(fused), serial, stage / "models" / f"fused_serial{serial}.onnx")
        shutil.copyfile(spec_file, stage / "models" / "fused.hexfuse.json")
        write_atomic(stage / "inputs.npz", npz_bytes(feeds))
        options = {"target": target.name, "preset": preset.name, "description": preset.description,
                   "provider_options": preset.provider_options,
                   "disable_cpu_ep_fallback": preset.disable_cpu_ep_fallback}
        write_atomic(stage / "provider_options.json", (json.dumps(options, indent=1) + "\n").encode())
        write_tree(render_package(spec, o.package_name), stage / "package")
        say(f"wrote the op package sources ({len(fused_count)} op types) and the models into the bundle")
        if sdk:
            _build_and_compile(stage, target, o.package_name, preset, feeds, say)
        else:
            why = "--no-build" if not o.build else "QNN_SDK_ROOT is not set"
            say(f"no htp_x86 build and no context binaries ({why}): build.sh in the bundle has the exact commands")
        build = stage / "build.sh"
        write_atomic(build, build_script(target, o.package_name).encode())
        build.chmod(0o755)
        write_atomic(stage / "run_ab.py", RUN_SCRIPT.read_bytes())
        write_atomic(stage / "README.md", readme(target, o.package_name, sdk).encode())
        data = manifest(o, target, preset.name, fused_count, file_sha256(original), file_sha256(fused))
        write_atomic(stage / "bundle.json", (json.dumps(data, indent=1) + "\n").encode())
        (stage / MARKER).write_text(f"hexfuse bundle for {target.name}\n")
        _swap_in(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    say(f"wrote bundle {out} for {target.name} ({target.description})")
    return out


def _build_and_compile(stage: Path, target: DeviceTarget, package: str, preset, feeds: dict,
                       say: Callable[[str], None]) -> None:
    """htp_x86 build of the package, then every run's context binary prepared for the target."""
    from hexfuse.op_package.build import build_htp_x86

    from .context import compile_context
    from .packages import open_package

    say("building the op package for the HTP simulator (make htp_x86)")
    library = build_htp_x86(stage / "package")
    shutil.rmtree(library.parent / "obj", ignore_errors=True)  # only the library travels
    pkg = open_package(stage / "package")
    facts = {}
    for run in RUNS:
        say(f"preparing {run.context} for {target.name} on x86")
        try:
            res = compile_context(stage / run.model, stage / run.context, preset.provider_options, feeds,
                                  disable_cpu_fallback=preset.disable_cpu_ep_fallback,
                                  package=pkg if run.package else None, library=library if run.package else None,
                                  allow_inlined=not run.package, schematic=stage / run.schematic)
        except HexfuseError as exc:  # name the run: a baseline that cannot be prepared is not shipped
            raise HexfuseError(f"bundle run {run.key} ({run.label}): {exc}") from None
        facts[run.key] = {"context": run.context, "prepare_s": round(res.prepare_s, 4), "load_s": round(res.load_s, 4),
                          "claimed": res.claimed, "outside_context": res.outside,
                          "outputs_identical_to_preparing_run": res.max_abs_diff == 0.0}
    note = {"note": "prepared on x86 (onnxruntime-qnn HTP backend) for the target; times are the workstation's",
            "when": time.strftime("%Y-%m-%dT%H:%M:%S"), "runs": facts}
    write_atomic(stage / "contexts" / "compile.json", (json.dumps(note, indent=1) + "\n").encode())
