"""``hexfuse merge A.onnx B.onnx [C.onnx ...] -o AB.onnx``: requests in one graph (graph_passes.merge.requests).

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
    sub = subparsers.add_parser("merge", help="merge models (e.g. a prefill and decodes) into one graph of requests")
    sub.add_argument("models", nargs="+", metavar="MODEL",
                     help="two or more ONNX models, the same file more than once for several requests (never modified)")
    sub.add_argument("-o", "--output", required=True, help="merged model path; the name mapping goes beside it (.merge.json)")
    sub.add_argument("--names", nargs="+", metavar="NAME",
                     help="one request name per model, used as prefixes NAME/ (default: the file stems, or a, b, ...)")
    sub.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hexfuse.graph_passes.merge.requests import merge_requests

    out = Path(args.output)
    if len(args.models) < 2:
        raise HexfuseError("merge needs two or more models")
    for source in args.models:
        if out.exists() and Path(source).exists() and out.resolve() == Path(source).resolve():
            raise HexfuseError(f"{out}: refusing to overwrite an input model")
    if out.is_dir():
        raise HexfuseError(f"{out}: is a directory, expected an output .onnx path")
    merged = merge_requests(args.models, tuple(args.names) if args.names else None)
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
