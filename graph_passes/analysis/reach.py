"""Reachability between units: windowed bitsets over the topological order.

A path from unit a to unit b only visits units between them in any topological order, so for
b - a <= WINDOW the answer lives in a bitset of the WINDOW units after a:

    desc[a] bit i  <=>  unit a + 1 + i is reachable from a

built in one reverse sweep, desc[a] = OR over successors s of (bit(s - a - 1) | desc[s] << (s - a)),
cut to WINDOW bits. Time O(E * WINDOW / 64), memory O(N * WINDOW) bits: linear in the graph.
Beyond the window the answer is UNKNOWN, and every caller treats UNKNOWN as "reachable": the pass
may miss a fusion, never make an unsafe one.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

WINDOW = 512


class Reach(enum.Enum):
    NO = 0
    YES = 1
    UNKNOWN = 2


class Reachability:
    def __init__(self, successors: Sequence[Sequence[int]], window: int = WINDOW) -> None:
        self.window = window
        mask = (1 << window) - 1
        desc = [0] * len(successors)
        for unit in range(len(successors) - 1, -1, -1):
            bits = 0
            for succ in successors[unit]:
                distance = succ - unit
                if distance <= window:
                    bits |= (1 << (distance - 1)) | (desc[succ] << distance)
            desc[unit] = bits & mask
        self._desc = desc

    def reaches(self, source: int, target: int) -> Reach:
        distance = target - source
        if distance <= 0:
            return Reach.NO  # topological order: nothing reaches an earlier unit
        if distance > self.window:
            return Reach.UNKNOWN
        return Reach.YES if (self._desc[source] >> (distance - 1)) & 1 else Reach.NO

    def first_path(self, sources: Sequence[int], targets: Sequence[int]) -> tuple[int, int, Reach] | None:
        """A (source, target, YES|UNKNOWN) pair proving sources may reach targets, or None if none can.

        Both sequences ascending (tasks keep their units sorted); this is the pass's innermost loop."""
        window, desc = self.window, self._desc
        last_target = targets[-1] if targets else -1
        for source in sources:
            if source >= last_target:
                break  # nothing reaches an earlier unit, and sources only grow
            bits = desc[source]
            for target in targets:
                distance = target - source
                if distance <= 0:
                    continue
                if distance > window:
                    return source, target, Reach.UNKNOWN
                if (bits >> (distance - 1)) & 1:
                    return source, target, Reach.YES
        return None

    def mask_from(self, sources: Sequence[int]) -> int:
        """Units reachable from any of ``sources`` (ascending), as bits relative to sources[0]:
        bit i <=> unit sources[0] + 1 + i. Exact for units within WINDOW of sources[0]."""
        base = sources[0]
        mask = 0
        for source in sources:
            mask |= self._desc[source] << (source - base)
        return mask
