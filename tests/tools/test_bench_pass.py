"""tools/bench/bench_pass.py's floor: the parts of the pass no pass code can shorten, measured on the whole model."""

from __future__ import annotations

import json

import onnx

from hexfuse.tools.bench import bench_pass
from hexfuse.tools.synthetic import stacked_lm


def test_the_floor_walks_every_node_and_every_inferred_type(tmp_path, capsys):
    model = stacked_lm(3, hidden=16)
    path = tmp_path / "lm.onnx"
    onnx.save(model, path)
    bench_pass._inside("floor", str(path))
    measured = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    assert measured["nodes"] == len(model.graph.node) > 0
    assert measured["types"] == len(inferred.graph.value_info) > 0
    assert measured["cpu"] > 0
