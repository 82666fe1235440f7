"""`hexfuse oppkg FUSED.onnx -o DIR`: generate (and optionally build) the op package of a fused model.

The spec beside the model (FUSED.hexfuse.json) drives generation; the model is opened only to check
that it really holds the spec's fused op types.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec import FusionSpec, load_spec
from hexfuse.op_package.render import DEFAULT_PACKAGE, render_package
from hexfuse.op_package.writer import write_tree


def register(subparsers: argparse._SubParsersAction) -> None:
    sub = subparsers.add_parser("oppkg", help="generate the QNN HTP op package of a fused model")
    sub.add_argument("model", help="fused ONNX model written by `hexfuse fuse` (its .hexfuse.json beside it)")
    sub.add_argument("-o", "--output", required=True, help="output directory (replaced atomically)")
    sub.add_argument("--package-name", default=DEFAULT_PACKAGE, help=f"package name (default {DEFAULT_PACKAGE})")
    sub.add_argument("--build", choices=("host", "ort", "htp_x86", "none"), default="none",
                     help="also build: host (g++, no SDK), ort (ONNX Runtime custom-op library for the CPU EP; needs "
                     "ORT's C API headers) or htp_x86 (needs QNN_SDK_ROOT) (default none)")
    sub.set_defaults(func=run)


def check_model_matches(model: Path, spec: FusionSpec) -> None:
    """The fused model's fused nodes must be exactly the spec's instances, each calling its op type."""
    import onnx  # only here: the generator itself never touches ONNX objects

    try:
        proto = onnx.load(str(model), load_external_data=False)
    except Exception as exc:  # onnx raises several types for unreadable files
        raise HexfuseError(f"cannot read fused model {model}: {exc}") from None
    present = {n.name: n.op_type for n in proto.graph.node if n.domain == spec.domain}
    described = {name: op.op_type for op in spec.fused_ops for name in (op.instances or (op.node_name,))}
    missing = [name for name, op_type in described.items() if present.get(name) != op_type]
    if missing:
        raise HexfuseError(f"{model} has no fused node {missing[0]!r} of op type {described[missing[0]]} described by "
                           f"its spec ({len(missing)} missing): regenerate the spec with `hexfuse fuse`")
    unknown = sorted(set(present) - set(described))
    if unknown:
        raise HexfuseError(f"{model} has fused node {unknown[0]!r} that its spec does not describe "
                           f"({len(unknown)} such): regenerate the spec with `hexfuse fuse`")


def spec_path(model: Path) -> Path:
    return model.with_suffix(".hexfuse.json")


def run(args: argparse.Namespace) -> int:
    model = Path(args.model)
    if not model.is_file():
        raise HexfuseError(f"fused model {model} not found")
    path = spec_path(model)
    if not path.is_file():
        raise HexfuseError(f"no fusion spec {path} beside {model}: run `hexfuse fuse` first")
    spec = load_spec(str(path))
    check_model_matches(model, spec)
    files = render_package(spec, args.package_name)
    out = write_tree(files, args.output)
    print(f"hexfuse: wrote op package {args.package_name} ({len(spec.fused_ops)} ops, {len(files)} files) to {out}",
          file=sys.stderr)
    if args.build == "host":
        from hexfuse.op_package.build import build_host
        print(f"hexfuse: built {build_host(out)}", file=sys.stderr)
    elif args.build == "ort":
        from hexfuse.op_package.ort_build import build_ort
        print(f"hexfuse: built {build_ort(out, spec)}", file=sys.stderr)
    elif args.build == "htp_x86":
        from hexfuse.op_package.build import build_htp_x86
        print(f"hexfuse: built {build_htp_x86(out)}", file=sys.stderr)
    return 0
