"""One map from QNN profile rows to model nodes and engines, shared by `hexfuse ab` and `calibrate`."""

from __future__ import annotations

import pytest

from hexfuse.graph_passes.cost import profile_rows as pr

# googlenet_qdq on the HTP simulator: QDQ units renamed with _token_<n>, QNN's own rows, and nodes of a
# fused function ORT inlined.
NODES = {"node_conv2d_3": ("Conv", ""), "node_max_pool2d_1": ("MaxPool", ""), "node_cat": ("Concat", ""),
         "node_view": ("Reshape", ""), "node_linear": ("Gemm", ""), "node_mean": ("ReduceMean", ""),
         "hexfuse/HexFuse_0_a": ("HexFuse_0_a", "hexfuse")}


@pytest.mark.parametrize("identifier,name", [
    ("node_conv2d_3_token_51:OpId_353 (cycles)", "node_conv2d_3_token_51"),
    ("Input OpId_2 (cycles)", "Input"),
    ("Accelerator (execute) time (cycles)", None),
])
def test_row_name(identifier, name):
    assert pr.row_name(identifier) == name


@pytest.mark.parametrize("row,node,engine", [
    ("node_conv2d_3_token_51", "node_conv2d_3", "matrix"),
    ("node_max_pool2d_1_token_21", "node_max_pool2d_1", "vector"),
    ("node_cat", "node_cat", "vector"),  # QNN moves data with HVX kernels: never DMA by name
    ("node_view", "node_view", "vector"),  # a view with a row of its own copied data on HVX
    ("node_linear", "node_linear", "matrix"),
    ("node_mean", "node_mean", "vector"),
    ("_inlfunc_HexFuse_0_a34abc_node_conv2d_3_token_43", "node_conv2d_3", "matrix"),
    ("hexfuse/HexFuse_0_a", "hexfuse/HexFuse_0_a", "fused"),
    ("Transpose_token_108", None, "vector"),
    ("Input", None, "dma"),
    ("Conv2d_17", None, "matrix"),
    ("Frobnicate_3", None, "other"),
])
def test_row_engine(row, node, engine):
    assert pr.row_engine(row, NODES) == (node, engine)


def test_token_suffix_is_only_stripped_at_the_end():
    nodes = {"a_token_1x": 1, "b": 2}
    assert pr.match_node("a_token_1x", nodes) == 1
    assert pr.match_node("b_token_7", nodes) == 2
    assert pr.match_node("b_token_7_c", nodes) is None
