"""``hexfuse merge A.onnx B.onnx -o AB.onnx``: two requests in one graph (graph_passes.merge.requests).

Writes AB.onnx and AB.merge.json (original input/output names -> merged names, per request), both or
neither (io.write_files); never over A, B, their external data or the files beside them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.io import refuse_overwrite, write_files


def mapping_path(model_path: Path) -> Path:
    return model_path.with_suffix(".merge.json")


def register(subparsers: argparse._SubParsersAction) -> None:
    sub = subparsers.add_parser("merge", help="merge two models (e.g. prefill and decode) into one graph of two requests")
    sub.add_argument("model_a", help="first ONNX model (never modified)")
    sub.add_argument("model_b", help="second ONNX model, or the same file again (never modified)")
    sub.add_argument("-o", "--output", required=True, help="merged model path; the name mapping goes beside it (.merge.json)")
    sub.add_argument("--names", nargs=2, metavar=("NAME_A", "NAME_B"),
                     help="request names, used as prefixes NAME/ (default: the file stems, or a and b)")
    sub.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hexfuse.graph_passes.merge.requests import merge_models

    out = Path(args.output)
    for source in (args.model_a, args.model_b):
        if out.exists() and Path(source).exists() and out.resolve() == Path(source).resolve():
            raise HexfuseError(f"{out}: refusing to overwrite an input model")
    if out.is_dir():
        raise HexfuseError(f"{out}: is a directory, expected an output .onnx path")
    merged = merge_models(args.model_a, args.model_b, tuple(args.names) if args.names else None)
    from hexfuse.graph_passes.pipeline import protected_files

    mapping = {"model": out.name, **merged.mapping, "shared_initializers": merged.shared_initializers,
               "shared_bytes": merged.shared_bytes}
    files = [(out, merged.model.SerializeToString()),
             (mapping_path(out), (json.dumps(mapping, indent=1, sort_keys=True) + "\n").encode())]
    refuse_overwrite([path for path, _ in files], [kept for loaded in merged.inputs for kept in protected_files(loaded)])
    write_files(files)
    names = " and ".join(f"{r['model']} ({r['name']}/)" for r in merged.mapping["requests"])
    print(f"hexfuse: merged {names} into {out}: {len(merged.model.graph.node)} nodes, "
          f"{merged.shared_initializers} initializers stored once ({merged.shared_bytes / 1024:.0f} KiB saved); "
          f"names in {mapping_path(out).name}", file=sys.stderr)
    return 0
