"""Choosing the groups to fuse and naming them.

    groups.py       select_groups: best groups first, convex and without a cycle between them
    balance.py      the Scorer interface the selection calls (the cost model implements it)
    contraction.py  the unit graph with chosen groups contracted, grown without a cycle
    names.py        fresh names that never collide with the model's
"""
