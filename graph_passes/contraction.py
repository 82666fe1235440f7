"""The unit graph with the chosen groups contracted, grown one group at a time without a cycle.

Contracting two groups that are each convex can still close a cycle between them:

    a1 ──> a2        G1 = {a1, b2}, G2 = {a2, b1}:  G1 ─(a1→a2)─> G2 ─(b1→b2)─> G1
    b1 ──> b2

While the contracted graph is acyclic, adding a group G closes a cycle exactly when one member of G
reaches another through it. The search for that path stays local: an edge always goes up in the
topological order and only a jump inside a contracted group goes down, by less than the widest
group's span; so nothing past max(G) + span can lead back into G.
"""

from __future__ import annotations

from collections.abc import Sequence


class Contraction:
    def __init__(self, successors: Sequence[Sequence[int]]) -> None:
        self._successors = successors
        self._group_of: dict[int, int] = {}  # unit position -> contracted group
        self._members: list[tuple[int, ...]] = []
        self._widest = 0  # largest (last - first) unit position of any contracted group

    def closes_cycle(self, units: Sequence[int]) -> bool:
        """Would contracting ``units`` (on top of the groups added so far) close a cycle?"""
        inside = set(units)
        limit = max(units) + self._widest
        successors, group_of, members = self._successors, self._group_of, self._members
        seen = set(inside)
        stack = [s for u in units for s in successors[u] if s not in inside and s <= limit]
        while stack:
            unit = stack.pop()
            if unit in seen:
                continue
            group = group_of.get(unit)
            for member in members[group] if group is not None else (unit,):
                seen.add(member)
                for succ in successors[member]:
                    if succ in inside:
                        return True
                    if succ <= limit and succ not in seen:
                        stack.append(succ)
        return False

    def add(self, units: Sequence[int]) -> None:
        members = tuple(sorted(units))
        for unit in members:
            self._group_of[unit] = len(self._members)
        self._members.append(members)
        self._widest = max(self._widest, members[-1] - members[0])
