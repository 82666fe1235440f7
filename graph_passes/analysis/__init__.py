"""What can run side by side: units, reachability, tasks, hazards and candidate groups.

    facts.py       Analysis: everything the pass knows about one model, computed once
    units.py       node units: the smallest pieces the pass moves, each tagged with its engine
    reach.py       reachability between units: windowed bitsets over the topological order
    tasks.py       tasks: convex, connected regions of units that run on one engine
    hazards.py     RAW / WAR / WAW and aliasing on the buffers of two tasks
    candidates.py  independent pairs of tasks of different engines, or why not
    structure.py   structure keys: which tasks and groups are the same up to renaming
    sources.py     where a group's tasks came from: branches, micro-batches, requests
"""
