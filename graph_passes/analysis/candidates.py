"""Find candidate groups: tasks of different engines that are provably independent.

Two tasks A and B may share one fused node only if
  1. neither reaches the other (no path either way; beyond the reachability window: refused),
  2. no buffer hazard (RAW/WAR/WAW through views) between them, and
  3. the merged group is convex. Tasks are convex (tasks.py) and by 1. no path leaves one and
     enters the other, so any path leaving A ∪ B and re-entering would start and end in one task,
     contradicting its convexity: 3 follows from 1 and is re-checked on the final graph (select/groups.py).
Partners are searched among the tasks placed near A in the level-sorted order, i.e. work that
becomes ready at about the same time. Every task left without a partner gets a reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

import numpy as np

from hexfuse.graph_passes.analysis.facts import Analysis
from hexfuse.graph_passes.analysis.hazards import any_hazard, hazard
from hexfuse.graph_passes.analysis.reach import Reach
from hexfuse.graph_passes.analysis.structure import engine_value
from hexfuse.graph_passes.analysis.tasks import Task
from hexfuse.graph_passes.engines.classify import Engine

_units = attrgetter("units")

PARTNER_WINDOW = 64  # unit positions after a task's first unit searched for partners


class Pair(NamedTuple):  # (a tuple: made once per candidate pair, ten thousands of them in an LM)
    first: int  # task ids, first.lo < second.lo
    second: int


@dataclass(frozen=True)
class Candidates:
    pairs: tuple[Pair, ...]
    partners: dict[int, tuple[int, ...]]  # task id -> independent partner task ids (both directions)
    reasons: dict[int, str]  # fusable task id without any partner -> why


def independence_problem(analysis: Analysis, a: Task, b: Task) -> str | None:
    """Why tasks a and b may not run at the same time, or None when they provably may."""
    for source, target in ((a, b), (b, a)):
        path = analysis.reach.first_path(source.units, target.units)
        if path is not None:
            start, end, answer = path
            verb = "reaches" if answer is Reach.YES else "is too far in the schedule to prove independent of"
            return f"{analysis.unit_label(start)} {verb} {analysis.unit_label(end)}"
    return hazard(analysis.buffers(a), analysis.buffers(b), analysis.flat.names)


def _own_mask(task: Task) -> int:
    """Bit j set <=> unit task.lo + j belongs to the task."""
    units = task.units
    if len(units) == 1:
        return 1
    lo, mask = units[0], 0
    for unit in units:
        mask |= 1 << (unit - lo)
    return mask


class _Starts:
    """Which unit positions are the first unit of a fusable task of each engine, as 64-bit chunks, so
    that "positions lo+1 .. lo+64 starting a task of another engine" is two shifts, not a scan."""

    def __init__(self, firsts: list[int], engines: list[str], count: int) -> None:
        """``firsts``, ``engines``: per task, its first unit and its engine's value (structure.engine_value)."""
        size = count // 64 + 2
        code_of = {engine: code for code, engine in enumerate(dict.fromkeys(engines))}
        self._codes = np.fromiter(map(code_of.__getitem__, engines), dtype=np.int64, count=len(engines))
        self._firsts = np.array(firsts, dtype=np.int64)
        self._chunks: dict[str, np.ndarray] = {}  # by engine value: the starts of tasks of every other engine
        for engine, code in code_of.items():
            bits = np.zeros(size * 64, dtype=bool)
            bits[self._firsts[self._codes != code]] = True
            self._chunks[engine] = np.packbits(bits, bitorder="little").view("<u8")
        self._code_of = code_of
        self.others = {engine: chunks.tolist() for engine, chunks in self._chunks.items()}  # as Python ints

    def after(self, engine: Engine, lo: int) -> int:
        """Bit k set <=> position lo + 1 + k (k < PARTNER_WINDOW) starts a task of another engine."""
        chunks = self.others[engine._value_]
        start = lo + 1
        c, r = start >> 6, start & 63
        return ((chunks[c] >> r) | (chunks[c + 1] << (64 - r))) & _WINDOW_MASK

    def after_each(self) -> np.ndarray:
        """``after`` of every task given to the constructor, at its own first unit and engine (uint64)."""
        windows = np.zeros(len(self._firsts), dtype=np.uint64)
        start = self._firsts + 1
        c, r = start >> 6, (start & 63).astype(np.uint64)
        for engine, code in self._code_of.items():
            mine = self._codes == code
            chunks, c_mine, r_mine = self._chunks[engine], c[mine], r[mine]
            high = np.where(r_mine == 0, np.uint64(0), chunks[c_mine + 1] << ((np.uint64(64) - r_mine) & np.uint64(63)))
            windows[mine] = ((chunks[c_mine] >> r_mine) | high) & np.uint64(_WINDOW_MASK)
        return windows


_WINDOW_MASK = (1 << PARTNER_WINDOW) - 1
assert PARTNER_WINDOW <= 64  # a window is one 64-bit word (_Starts.after_each)


def find_candidates(analysis: Analysis) -> Candidates:
    """Independent pairs of tasks of different engines that become ready near each other: every one in
    the partner window. (It kept 4 per task, the first in position order: on llama_prefill_decode_qdq the
    estimates then saved 91 us where the whole window saves 145, and the replay of QNN's schedule missed
    pairs that pay, e.g. Qwen2.5-1.5B decode 2048's best overlap credit 17.9 us where the window has 39.8.)

    Per task, two bitsets relative to its first unit lo: the units it reaches (bit i: unit lo + 1 + i,
    exact within the reachability window) and its own units (bit j: unit lo + j). The tasks of another
    engine starting in the partner window minus the positions it reaches are the only ones worth a
    look (in the LM most of the window depends on it); for those, whether b reaches a is one shift and
    one AND; beyond the window the answer is "may" (refused)."""
    assert PARTNER_WINDOW <= analysis.reach.window  # the reach mask is exact over the partner window
    reasons: dict[int, str] = {}
    fusable = []
    # Structure keys of every fusable task at once: the claim checks and the scorer ask for them.
    tasks = [task for task in analysis.tasks if task.fusable]
    analysis.structures.prepare(tasks)
    for task, blocked in zip(tasks, analysis.claim_blockers(tasks)):  # the QNN EP would not claim a node holding it
        if blocked is None:
            fusable.append(task)
        else:
            reasons[task.id] = blocked
    fusable.sort(key=lambda task: task.units[0])
    firsts, engines = [task.units[0] for task in fusable], list(map(engine_value, fusable))
    starts = _Starts(firsts, engines, len(analysis.units))
    at = dict(zip(firsts, range(len(fusable))))
    reaches = list(map(analysis.reach.mask_from, map(_units, fusable)))
    owns = list(map(_own_mask, fusable))
    # Per task: the positions after it in the window that start a task of another engine and that it
    # does not reach (the first filter of the search, for every task at once).
    near = np.fromiter((reach & _WINDOW_MASK for reach in reaches), dtype=np.uint64, count=len(reaches))
    windows = (starts.after_each() & ~near).tolist()
    # Hazards imply a path on a well-formed graph (hazards.py), so the search first assumes none and
    # checks every accepted pair at once; where one has a hazard, it searches again pair by pair.
    his = [task.units[-1] for task in fusable]
    found, partners = _search(analysis.reach.window, firsts, his, windows, at, reaches, owns, None)
    if any_hazard(analysis.flat, analysis.buffer_map, analysis.task_node_arrays(fusable), found):
        buffers, names = analysis.buffers, analysis.flat.names
        found, partners = _search(analysis.reach.window, firsts, his, windows, at, reaches, owns,
                                  lambda i, j: hazard(buffers(fusable[i]), buffers(fusable[j]), names) is not None)
    for task, own in zip(fusable, partners):
        if not own:
            reasons[task.id] = _why_alone(analysis, task, starts, fusable, at)
    ids = [task.id for task in fusable]
    pairs = tuple([Pair(ids[i], ids[j]) for i, j in found])
    return Candidates(pairs, dict(zip(ids, [tuple([ids[j] for j in own]) for own in partners])), reasons)


def _search(window: int, firsts: list[int], his: list[int], windows: list[int], at: dict[int, int],
            reaches: list[int], owns: list[int], conflict) -> tuple[list[tuple[int, int]], list[list[int]]]:
    """Pairs in the partner window (find_candidates), refusing those ``conflict(i, j)`` says (None: none).
    Tasks are positions in the fusable list; per position: ``firsts`` and ``his`` its first and last unit,
    ``windows`` the positions in its window worth a look (bit k: position lo + 1 + k). Returns the pairs
    (i, j) and per position its partners' positions; ``window``: the reachability window."""
    found: list[tuple[int, int]] = []
    partners: list[list[int]] = [[] for _ in firsts]
    for i, candidates in enumerate(windows):
        if not candidates:
            continue
        own = partners[i]
        a_lo, a_hi, a_reach, a_own = firsts[i], his[i], reaches[i], owns[i]
        while candidates:
            low = candidates & -candidates
            candidates ^= low
            b_lo = a_lo + low.bit_length()  # bit k is position a_lo + 1 + k
            j = at[b_lo]
            if (his[j] - a_lo > window or a_hi - b_lo > window  # the window cannot tell
                    or (a_reach >> (b_lo - a_lo - 1)) & owns[j]  # a reaches b beyond b's first unit
                    # b reaches a: only a's units after b.lo can be; shift b's bits onto a's frame
                    or (a_hi > b_lo and (reaches[j] << (b_lo + 1 - a_lo)) & a_own)
                    or (conflict is not None and conflict(i, j))):
                continue
            found.append((i, j))
            own.append(j)
            partners[j].append(i)
    return found, partners


def _why_alone(analysis: Analysis, task: Task, starts: _Starts, fusable: list[Task], at: dict[int, int]) -> str:
    """Why a task found no partner: what links it to the first task of another engine after it in the
    window (its own scan refused every one of those), else to the nearest one before it."""
    lo = task.units[0]
    after = starts.after(task.engine, lo)
    if after:
        other = fusable[at[lo + (after & -after).bit_length()]]
        return independence_problem(analysis, task, other) or "no independent partner (internal: none refused)"
    for start in range(lo - 1, max(-1, lo - PARTNER_WINDOW - 1), -1):
        index = at.get(start)
        if index is not None and fusable[index].engine is not task.engine:
            problem = independence_problem(analysis, fusable[index], task)
            if problem:
                return problem
    return "no task of another engine becomes ready near it (the graph is a chain here)"
