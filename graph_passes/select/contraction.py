"""The unit graph with the chosen groups contracted, grown one group at a time without a cycle.

Contracting two groups that are each convex can still close a cycle between them:

    a1 ──> a2        G1 = {a1, b2}, G2 = {a2, b1}:  G1 ─(a1→a2)─> G2 ─(b1→b2)─> G1
    b1 ──> b2

While the contracted graph is acyclic, adding a group G closes a cycle exactly when one member of G
reaches another through it. The search stays local because the contracted graph keeps a topological
order ``order`` (every edge goes up; a group's members share one value): a path from one member of G
to another only visits nodes ordered between min and max of G's order. After a contraction, the nodes
between them are renumbered the Pearce-Kelly way (what reaches G, then G, then what G reaches), so
the order stays valid and the next search stays local. (Bounding by unit positions instead misses
paths that climb past the bound and come back through several contracted groups.)
"""

from __future__ import annotations

from collections.abc import Sequence


class Contraction:
    def __init__(self, successors: Sequence[Sequence[int]], predecessors: Sequence[Sequence[int]]) -> None:
        self._successors, self._predecessors = successors, predecessors
        self._group_of: dict[int, int] = {}  # unit position -> contracted group
        self._members: list[tuple[int, ...]] = []
        self._order = list(range(len(successors)))  # topological order of each unit's node
        self._last: tuple[tuple[int, ...], list[tuple[int, ...]]] | None = None  # last query and its forward set

    def _nodes_between(self, units: Sequence[int], bound: int, forward: bool, inside: set[int]) -> tuple[bool, list[tuple[int, ...]]]:
        """(reached a unit of ``inside``, the other nodes reached), walking successors (forward, only
        nodes ordered below ``bound``) or predecessors (backward, only nodes ordered above it)."""
        edges, order, group_of, members = (self._successors if forward else self._predecessors), self._order, \
            self._group_of, self._members
        seen = set(inside)
        found: list[tuple[int, ...]] = []
        stack = [s for u in units for s in edges[u] if s not in seen]
        while stack:
            unit = stack.pop()
            if unit in seen:
                continue
            if (order[unit] >= bound) if forward else (order[unit] <= bound):
                continue  # ordered past every member of the group: it cannot lead back into it
            group = group_of.get(unit)
            node = members[group] if group is not None else (unit,)
            seen.update(node)
            found.append(node)
            for member in node:
                for nxt in edges[member]:
                    if nxt in inside:
                        return True, found
                    if nxt not in seen:
                        stack.append(nxt)
        return False, found

    def closes_cycle(self, units: Sequence[int]) -> bool:
        """Would contracting ``units`` (on top of the groups added so far) close a cycle?"""
        inside = set(units)
        bound = max(self._order[u] for u in units)
        cycle, forward = self._nodes_between(units, bound, True, inside)
        self._last = None if cycle else (tuple(units), forward)
        return cycle

    def add(self, units: Sequence[int]) -> None:
        """Contract ``units`` (closes_cycle must have said no) and renumber the nodes between its members."""
        key = tuple(units)
        if self._last is None or self._last[0] != key:
            if self.closes_cycle(units):
                raise ValueError("contracting these units closes a cycle")
        forward = self._last[1]
        inside = set(units)
        low = min(self._order[u] for u in units)
        _, backward = self._nodes_between(units, low, False, inside)
        order = self._order
        backward.sort(key=lambda node: order[node[0]])
        forward.sort(key=lambda node: order[node[0]])
        pool = sorted([order[node[0]] for node in (*backward, *forward)] + [order[u] for u in units])
        values = iter(pool)
        for node in backward:  # what reaches the group, then the group, then what it reaches
            value = next(values)
            for unit in node:
                order[unit] = value
        value = next(values)
        for unit in units:
            order[unit] = value
        for node in forward:
            value = next(values)
            for unit in node:
                order[unit] = value
        members = tuple(sorted(units))
        for unit in members:
            self._group_of[unit] = len(self._members)
        self._members.append(members)
        self._last = None
