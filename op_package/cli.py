"""`hexfuse oppkg FUSED.onnx -o DIR`: generate (and optionally build) the op package of a fused model.

The spec beside the model (FUSED.hexfuse.json) drives generation; the model is opened only to check
that the spec was written for it (its hash, its fused nodes: graph_passes/spec/check.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec.check import check_spec_describes
from hexfuse.graph_passes.spec.model import FusionSpec, load_spec
from hexfuse.op_package.writer import DEFAULT_PACKAGE, write_tree


def register(subparsers: argparse._SubParsersAction) -> None:
    sub = subparsers.add_parser("oppkg", help="generate the QNN HTP op package of a fused model")
    sub.add_argument("model", help="fused ONNX model written by `hexfuse fuse` (its .hexfuse.json beside it)")
    sub.add_argument("-o", "--output", required=True, help="output directory (replaced atomically)")
    sub.add_argument("--package-name", default=DEFAULT_PACKAGE, help=f"package name (default {DEFAULT_PACKAGE})")
    sub.add_argument("--build", choices=("host", "ort", "htp_x86", "none"), default="none",
                     help="also build: host (g++, no SDK), ort (ONNX Runtime custom-op library for the CPU EP; needs "
                     "ORT's C API headers) or htp_x86 (needs QNN_SDK_ROOT) (default none)")
    sub.set_defaults(func=run)


def spec_path(model: Path) -> Path:
    return model.with_suffix(".hexfuse.json")


def check_model_matches(model: Path, spec: FusionSpec) -> None:
    """The fused model is the one the spec was written for (graph_passes/spec/check.py)."""
    check_spec_describes(model, _read(model), spec, spec_path(model))


def _read(model: Path) -> bytes:
    try:
        return model.read_bytes()
    except OSError as exc:
        raise HexfuseError(f"cannot read fused model {model}: {exc.strerror}") from None


def _refuse_output_holding(out: Path, inputs: list[Path]) -> None:
    """Replacing DIR replaces everything under it: never a folder that holds what this run reads."""
    target = out.resolve()
    for path in inputs:
        if target == path.resolve() or target in path.resolve().parents:
            raise HexfuseError(f"refusing to write the op package to {out}: it holds {path}, which this run reads")


def _builder(kind: str, spec: FusionSpec) -> Callable[[Path], Path] | None:
    """The build ``--build`` asks for: package folder -> the library it built (None: no build)."""
    if kind == "host":
        from hexfuse.op_package.build import build_host
        return build_host
    if kind == "ort":
        from hexfuse.op_package.ort_build import build_ort
        return lambda root: build_ort(root, spec)
    if kind == "htp_x86":
        from hexfuse.op_package.build import build_htp_x86
        return build_htp_x86
    return None


def run(args: argparse.Namespace) -> int:
    from hexfuse.op_package.render import render_package

    model = Path(args.model)
    if not model.is_file():
        raise HexfuseError(f"fused model {model} not found")
    path = spec_path(model)
    if not path.is_file():
        raise HexfuseError(f"no fusion spec {path} beside {model}: run `hexfuse fuse` first")
    spec = load_spec(str(path))
    check_spec_describes(model, _read(model), spec, path)
    _refuse_output_holding(Path(args.output), [model, path])
    if args.build == "htp_x86":  # the environment first, before anything is generated
        from hexfuse.op_package.build import check_htp_x86_tools
        check_htp_x86_tools()
    elif args.build in ("host", "ort"):
        from hexfuse.op_package.build import compiler
        compiler()
        if args.build == "ort":
            from hexfuse.op_package import ort_headers
            ort_headers.check_runtime(ort_headers.require_headers())
    files = render_package(spec, args.package_name)
    out = Path(args.output).resolve()
    build = _builder(args.build, spec)
    built: list[Path] = []  # the library, relative to the package folder

    def build_staged(stage: Path) -> None:
        """Build in the staged tree, before it replaces DIR: a failed build must leave DIR as it was."""
        try:
            built.append(build(stage).relative_to(stage.resolve()))
        except HexfuseError as exc:  # name DIR, not the staged tree that is about to be removed
            raise HexfuseError(f"{str(exc).replace(str(stage.resolve()), str(out))}; {out} left as it was") from None

    write_tree(files, out, build_staged if build else None)
    print(f"hexfuse: wrote op package {args.package_name} ({len(spec.fused_ops)} ops, {len(files)} files) to {out}",
          file=sys.stderr)
    if built:
        print(f"hexfuse: built {out / built[0]}", file=sys.stderr)
    return 0
