"""Writing the fused model and proving it equal to the original.

    groups.py     rewrite_groups: each chosen group becomes one fused node (its body as a function)
    verify.py     every fused node, inlined, is node for node its group; ONNX Runtime agrees
    ort_check.py  ONNX Runtime helpers: seeded inputs, CPU EP sessions, output diffs
"""
