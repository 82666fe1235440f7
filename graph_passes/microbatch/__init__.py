"""Micro-batches: split a model along a row-independent axis so slices can be fused with each other.

    axes.py    per op: where the split axis goes, or why the op couples the slices
    split.py   plan_split (prove it or say why not) and split_model (write the split graph)
    decide.py  ``--micro-batches N``: fuse the split and the unsplit model, keep what the cost model prefers
"""
