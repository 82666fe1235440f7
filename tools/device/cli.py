"""`hexfuse compile` and `hexfuse bundle`: argparse wiring; the work is in context.py and bundle.py."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError

COMPILE_HELP = """\
Prepare MODEL once on x86 with the QNN EP's HTP backend (the simulator in the onnxruntime-qnn wheel) and
write an EPContext model: the QNN context binary in an ONNX wrapper, as models are shipped to devices.
A fused model needs its op package (--package DIR from `hexfuse oppkg FUSED -o DIR`), registered for
every fused op type; the original model needs none. The written model is loaded back (with the package
registered: a context binary names the package's ops) and its outputs must equal the preparing run's."""

BUNDLE_HELP = """\
Write one folder to copy to a Snapdragon device: both models (and their context binaries when a QNN SDK
is set), the op package sources with its htp_x86 build (or the exact build commands), fixed inputs,
the provider options, and run_ab.py, which performs the A/B with onnxruntime + onnxruntime-qnn only and
writes results that `hexfuse ab --import` reports and `hexfuse calibrate` reads. See docs/device.md."""


def _say(message: str) -> None:
    print(f"hexfuse: {message}", file=sys.stderr, flush=True)


def register(subparsers) -> None:
    c = subparsers.add_parser("compile", help="prepare a model on x86 (HTP) and write its EPContext model",
                              description=COMPILE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("model", metavar="MODEL.onnx", help="fused or original ONNX model (never modified)")
    c.add_argument("-o", "--output", required=True, metavar="OUT.ctx.onnx", help="the EPContext model to write")
    c.add_argument("--package", metavar="DIR", help="op package folder of a fused model (`hexfuse oppkg`); its "
                   "htp_x86 library is built when absent (needs QNN_SDK_ROOT)")
    c.add_argument("--build", action="store_true", help="rebuild the package's htp_x86 library first")
    c.add_argument("--inline", action="store_true", help="prepare a fused model without its package: the QNN EP "
                   "inlines the fused functions (a functional reference, not baselines 3/4)")
    which = c.add_mutually_exclusive_group()
    which.add_argument("--target", metavar="SOC", help="prepare for this device (sm8550, sm8650, sm8750): its QNN "
                       "preset's soc_model/htp_arch (default: the simulator's preset htp_sim)")
    which.add_argument("--qnn-config", metavar="PRESET_OR_FILE", help="QNN EP provider options: a preset name or "
                       "a JSON file (as for `hexfuse ab`)")
    c.add_argument("--embed-mode", type=int, choices=(0, 1), default=1,
                   help="1: the context binary inside the ONNX file; 0: beside it as OUT_qnn.bin (default 1)")
    c.add_argument("--inputs", metavar="NPZ", help="inputs for the check (default: seeded random tensors)")
    c.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    c.add_argument("--schematic", metavar="FILE", help="also keep the HTP prepare schematic (optrace: run lists per "
                   "HVX/HMX/main and the wait gates of the graph as prepared for the target)")
    c.set_defaults(func=run_compile)

    b = subparsers.add_parser("bundle", help="one folder to run the A/B on a Snapdragon device",
                              description=BUNDLE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("original", metavar="ORIGINAL.onnx", help="the model before `hexfuse fuse`")
    b.add_argument("fused", metavar="FUSED.onnx", help="the fused model (its .hexfuse.json spec beside it)")
    b.add_argument("-o", "--output", required=True, metavar="DIR", help="bundle folder (replaced atomically; "
                   "refused when it exists and is not an earlier bundle)")
    b.add_argument("--target", required=True, metavar="SOC", help="device: sm8550, sm8650 or sm8750")
    b.add_argument("--package-name", default="HexFuse", help="op package name (default HexFuse)")
    b.add_argument("--inputs", metavar="NPZ", help="input tensors (default: seeded random tensors)")
    b.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    b.add_argument("--no-build", dest="build", action="store_false", help="write sources and build commands only, even "
                   "when QNN_SDK_ROOT is set (no htp_x86 build, no context binaries)")
    b.set_defaults(func=run_bundle)


def _preset(args: argparse.Namespace):
    from hexfuse.tools.ab.presets import load_preset

    from .targets import device_target

    if args.target:
        return load_preset(device_target(args.target).preset)
    return load_preset(args.qnn_config)


def _feeds(model: Path, inputs: str | None, seed: int) -> dict:
    from hexfuse.tools.ab import models
    from hexfuse.tools.ab.inputs import load_npz, random_inputs

    specs = models.graph_inputs(models.load_model(model))
    return load_npz(inputs, specs) if inputs else random_inputs(specs, seed)


def run_compile(args: argparse.Namespace) -> int:
    from hexfuse.graph_passes.load.io import refuse_overwrite
    from hexfuse.tools.ab import models, qnn_session

    from .context import compile_context
    from .packages import ensure_x86_library, open_package, require_op_types

    model, out = Path(args.model), Path(args.output)
    if args.inline and args.package:
        raise HexfuseError("--inline and --package exclude each other")
    read = [(model, "the input model"), *([(Path(args.inputs), "the inputs file")] if args.inputs else [])]
    refuse_overwrite([out], read)
    if args.schematic:
        refuse_overwrite([Path(args.schematic)], [*read, (out, "the output model")])
    fused_types = models.fused_op_types(models.load_model(model))
    if not qnn_session.qnn_available():
        raise HexfuseError("compile needs the onnxruntime-qnn package (pip install 'hexfuse[qnn]')")
    preset = _preset(args)
    package = library = None
    if args.package:
        package = open_package(args.package)
        if fused_types:  # before any build: a package of another model fails here, not after make
            require_op_types(package, fused_types, str(model))
        library = ensure_x86_library(package, args.build, _say)
    feeds = _feeds(model, args.inputs, args.seed)
    if args.inline and fused_types:  # said before ONNX Runtime's own error lines, which would come unexplained
        _say(f"--inline: the QNN EP has no package for the fused op type(s) {', '.join(sorted(fused_types))}, so "
             "ONNX Runtime may log them as \"Unsupported nodes in QNN EP\" (in red) and then inlines their "
             "functions, whose nodes the QNN EP runs: expected here")
    res = compile_context(model, out, preset.provider_options, feeds, disable_cpu_fallback=preset.disable_cpu_ep_fallback,
                          package=package, library=library, embed=args.embed_mode == 1, allow_inlined=args.inline,
                          schematic=Path(args.schematic) if args.schematic else None,
                          say=lambda msg: _say(f"{msg}, preset {preset.name}"))
    size = sum(p.stat().st_size for p in (res.output, *res.binaries))
    where = "embedded" if not res.binaries else f"beside it in {', '.join(p.name for p in res.binaries)}"
    claimed = f"; {sum(res.claimed.values())} fused nodes claimed by the package" if res.claimed else ""
    outside = f"; outside the context: {res.outside}" if res.outside else ""
    _say(f"wrote {out} (context binary {where}, {size / 1024:.0f} KiB): prepared in {res.prepare_s:.2f} s, loads from "
         f"the context in {res.load_s * 1e3:.0f} ms, outputs identical to the preparing run ({res.outputs} output(s))"
         f"{claimed}{outside}" + (f"; schematic {res.schematic}" if res.schematic else ""))
    return 0


def run_bundle(args: argparse.Namespace) -> int:
    from .bundle import BundleOptions, make_bundle

    make_bundle(BundleOptions(original=args.original, fused=args.fused, output=args.output, target=args.target,
                              package_name=args.package_name, inputs=args.inputs, seed=args.seed, build=args.build),
                _say)
    return 0
