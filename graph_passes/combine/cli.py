"""``hexfuse combine MERGED.onnx -o OUT.onnx``: requests that share a model, run as one batch where it pays.

Writes OUT.onnx, OUT.combine.md (report) and OUT.combine.json, all or none (io.write_files), never over
the input, its external data or the files beside it. The combined model keeps the merged model's inputs
and outputs (names, shapes), so a runtime feeds it exactly as it fed the merged one (merge's
``.merge.json`` still maps them to the requests).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError

DESCRIPTION = """\
Combine requests that share a model (a `hexfuse merge` of a prefill and decodes, or any graph whose parts
share nothing but weights): where every request applies the same op to the same weights on its own rows,
run it once on the rows of all, so each weight is read once. Attention and whatever else couples rows
inside a request stays per request; the report says why for every node kept apart. The combined model is
checked on ONNX Runtime (CPU EP) against the merged one, request by request."""


def report_paths(out: Path) -> tuple[Path, Path]:
    return out.with_suffix(".combine.md"), out.with_suffix(".combine.json")


def register(subparsers: argparse._SubParsersAction) -> None:
    sub = subparsers.add_parser("combine", help="run requests that share a model as one batch (weights read once)",
                                description=DESCRIPTION)
    sub.add_argument("model", help="merged ONNX model (never modified)")
    sub.add_argument("-o", "--output", required=True, help="combined model path; the report goes beside it")
    sub.add_argument("--target", default=None, help="target whose figures price each chain (default: sm8650)")
    sub.add_argument("--requantize", action="store_true",
                     help="where requests quantize a tensor differently, give it one encoding covering both ranges")
    sub.add_argument("--all", dest="everything", action="store_true",
                     help="combine every chain that can be, whatever the estimate says")
    sub.add_argument("--no-verify", action="store_true", help="skip the check on ONNX Runtime")
    sub.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hexfuse.graph_passes.combine.plan import ENCODINGS_DIFFER
    from hexfuse.graph_passes.combine.report import to_json_text, to_markdown
    from hexfuse.graph_passes.combine.run import DEFAULT_TARGET, combine_requests
    from hexfuse.graph_passes.load.io import refuse_overwrite, write_files
    from hexfuse.graph_passes.pipeline import protected_files

    out = Path(args.output)
    if out.is_dir():
        raise HexfuseError(f"{out}: is a directory, expected an output .onnx path")
    result = combine_requests(args.model, args.target or DEFAULT_TARGET, args.requantize, args.everything,
                              not args.no_verify)
    markdown, json_path = report_paths(out)
    model_bytes = result.model.SerializeToString()
    result.find_replays(out, model_bytes)
    files = [(out, model_bytes), (markdown, to_markdown(result).encode()),
             (json_path, to_json_text(result).encode())]
    refuse_overwrite([path for path, _ in files], protected_files(result.loaded))
    write_files(files)
    encodings = list(dict.fromkeys(reason for _, reason in sorted(result.plan.apart.items())
                                   if reason.startswith(ENCODINGS_DIFFER)))
    if encodings:
        print(f"hexfuse: {len(encodings)} tensors are quantized differently by the requests, each ending a chain; "
              f"the first: {encodings[0]}", file=sys.stderr)
    chosen = result.chosen
    saved = sum(result.prices[i].weight_bytes_apart - result.prices[i].weight_bytes_combined for i in chosen)
    checked = "" if result.verification is None else "; outputs checked request by request on ONNX Runtime"
    print(f"hexfuse: {len(chosen)} of {len(result.plan.chains)} chains combined across "
          f"{len(result.view.names)} requests ({', '.join(result.view.names)}), {saved / 2**20:.2f} MiB fewer weight "
          f"bytes read{checked}; wrote {out}, {markdown}, {json_path}", file=sys.stderr)
    return 0
