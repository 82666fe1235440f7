"""`hexfuse engines MODEL --target sm8650`: engines from what QNN schedules (tools/qnn_engines.py).

    hexfuse engines model.onnx --target sm8650              prepare on the QNN EP (HTP simulator), cache the map
    hexfuse engines model.onnx --target sm8650 --beside     write models/engines/model.sm8650.json (to ship it)
    hexfuse engines model.onnx --schematic X_schematic.bin  from a schematic made earlier (no QNN run)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from hexfuse.graph_passes.engines.classify import Engine, engine_of
from hexfuse.graph_passes.engines.engine_map import EngineMap, beside_path, cache_path

DESCRIPTION = """\
Prepare the ORIGINAL model on the QNN EP's HTP backend with profiling_level=optrace, read the schematic
and record, per ONNX node, the kernels QNN runs for it and their resources (HMX convolutions, HVX
kernels, DMA moves, main-thread ops): the engine map. `hexfuse analyze/fuse --target T` use it for the
same model file and target (beside the model in engines/, or in the cache), with op-type rules where
there is none. Needs onnxruntime-qnn (the x86 wheel runs HTP as a simulator: kernels and run lists are
QNN's, times are not)."""
if TYPE_CHECKING:
    import onnx

_RULE_RESOURCE = {Engine.MATRIX: "hmx", Engine.VECTOR: "hvx", Engine.DMA: "dma", Engine.FREE: "none",
                  Engine.OPAQUE: "none"}


def register(subparsers) -> None:
    p = subparsers.add_parser("engines", help="engine map of a model: QNN's kernels and resources per ONNX node",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="the original ONNX model (not a fused one)")
    p.add_argument("--target", default="sm8550", help="cost-model target the map is for (default sm8550)")
    p.add_argument("--preset", help="QNN EP preset to prepare with (default: the target's, e.g. htp_v75_burst)")
    p.add_argument("--schematic", metavar="FILE", help="read this optrace schematic instead of running QNN")
    p.add_argument("--keep", metavar="DIR", help="leave the schematic in DIR")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-o", "--output", metavar="MAP.json", help="write the map here (default: the user cache)")
    where.add_argument("--beside", action="store_true", help="write it beside the model: <folder>/engines/<stem>.<target>.json")
    p.add_argument("--json", action="store_true", help="print the comparison with the op-type rules as JSON")
    p.set_defaults(func=run)


def differences(engine_map: EngineMap, model: onnx.ModelProto) -> list[dict]:
    """Nodes where QNN runs the work elsewhere than the op-type rules put it, grouped by op type and change."""
    ops = {node.name: (node.op_type, node.domain) for node in model.graph.node if node.name}
    groups: dict[tuple[str, str, str], list[str]] = {}
    for name, facts in sorted(engine_map.nodes.items()):
        if name not in ops:
            continue
        rule = _RULE_RESOURCE[engine_of(*ops[name])]
        seen = "folded into a matrix node" if facts.folded_into and not facts.kernels else facts.resource
        if rule != seen:
            groups.setdefault((ops[name][0], rule, seen), []).append(name)
    return [{"op_type": op, "rules": rule, "qnn": seen, "nodes": len(names), "example": names[0],
             "kernels": engine_map.nodes[names[0]].describe()}
            for (op, rule, seen), names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def summary(engine_map: EngineMap, model: onnx.ModelProto) -> dict:
    by = Counter(f"{n.engine} on {n.resource}" for n in engine_map.nodes.values() if n.kernels)
    return {"model": engine_map.model, "target": engine_map.target, "nodes_with_ops": sum(by.values()),
            "by_engine": dict(sorted(by.items())), "absent": len(engine_map.absent),
            "folded": sorted(name for name, n in engine_map.nodes.items() if n.folded_into),
            "unattributed": {name: len(ks) for name, ks in sorted(engine_map.unattributed.items())},
            "differs_from_rules": differences(engine_map, model)}


def run(args: argparse.Namespace) -> int:
    import onnx  # (not at import: `hexfuse engines --help` stays fast)

    from hexfuse.graph_passes.cost.target import load_target
    from hexfuse.graph_passes.errors import HexfuseError
    from hexfuse.graph_passes.load.io import refuse_overwrite
    from hexfuse.tools.qnn_engines import build_engine_map, provider_options, qnn_installed

    target = load_target(args.target).name
    model = Path(args.model)
    if not model.is_file():
        raise HexfuseError(f"model {model} not found")
    out = Path(args.output) if args.output else beside_path(model, target) if args.beside else None
    if out is not None:
        read = [(model, "the model"), *([(Path(args.schematic), "the schematic")] if args.schematic else [])]
        refuse_overwrite([out], read)
    if args.schematic is None:
        preset, _ = provider_options(target, args.preset)  # an unknown target fails before anything runs
        if not qnn_installed():
            raise HexfuseError("engines prepares the model on the QNN EP (its HTP simulator), which needs the "
                               "onnxruntime-qnn package: pip install 'hexfuse[qnn]' (or read a schematic made "
                               "elsewhere with --schematic FILE)")
        print(f"hexfuse: preparing {model.name} on the QNN EP (HTP, preset {preset}) with optrace for {target}",
              file=sys.stderr)
    engine_map = build_engine_map(model, target, args.preset, args.schematic, args.keep)
    strangers = [label for label in engine_map.unattributed if not label.startswith("<")]  # ("<graph input>": no name)
    if args.schematic is not None and len(strangers) > len(engine_map.nodes):
        # Another model's schematic matches few node names; its map would be stamped with this model's hash.
        raise HexfuseError(f"{args.schematic}: not a schematic of {model.name}: {len(strangers)} of its QNN nodes "
                           f"name no node of the model, {len(engine_map.nodes)} do")
    out = out or cache_path(engine_map.model_sha256, target)
    engine_map.write(out)
    data = summary(engine_map, onnx.load(str(model), load_external_data=False))
    if args.json:
        print(json.dumps(data, sort_keys=True))
    else:
        print(f"engine map of {data['model']} for {target}: {data['nodes_with_ops']} nodes with ops ("
              + ", ".join(f"{k} {v}" for k, v in data["by_engine"].items()) + f"), {data['absent']} without "
              f"(part of a QDQ unit, folded or removed by QNN), {len(data['folded'])} folded into a matrix node")
        diffs = data["differs_from_rules"]
        print(f"QNN runs {sum(d['nodes'] for d in diffs)} nodes elsewhere than the op-type rules say:")
        for d in diffs:
            print(f"  {d['nodes']:4d} {d['op_type']}: rules {d['rules']}, QNN {d['qnn']} (e.g. {d['example']}: {d['kernels']})")
    print(f"hexfuse: wrote {out}", file=sys.stderr)
    return 0
