"""Which engine runs what: rules by op type, measured engine maps, and QNN's own schedule.

    classify.py      Engine per op (MATRIX / VECTOR / DMA), from the map where it has the node
    engine_map.py    engine maps: QNN's kernels per ONNX node on one target (data, one file per model)
    qnn_schedule.py  QNN's schedule as a happens-before graph (run lists + checkpoint gates)
"""
