"""The graph the pass edits, and the facts read off it per node.

    flat.py          FlatGraph: nodes and tensors as integer arrays, built in one walk over the protobuf
    dataflow.py      producers, consumers, types and shapes of a sorted graph
    subgraphs.py     what a node with subgraphs (If / Loop / Scan) reads from the graph around it
    folds.py         epilogues a target folds into a matrix op (no HVX time of their own)
    qdq.py           every DequantizeLinear given exactly one consumer
    qdq_boundary.py  the quantized boundary of a fused node, in the form the QNN EP claims
    work.py          MACs, elements and bytes of a node from static shapes
    ragged.py        ragged (CSR) integer arrays: per-node and per-task lists processed at once
    ports.py         the ports of many nodes grouped into tasks, one row per port (array processing)
"""
