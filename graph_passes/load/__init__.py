"""Reading a model in and writing results out.

    model.py     load_model: read, validate, upgrade the opset, sort, infer shapes (one-line errors)
    toposort.py  a deterministic topological order, with a clear error on cycles
    sparse.py    sparse initializers as the dense ones they stand for
    weights.py   onnx's C++ passes (shape inference, the inliner) run without the weights' data
    io.py        write_files: outputs staged and renamed, never a mix of runs, never the input
"""
