"""Interleaved timing of several session configs and paired statistics with a bootstrap CI.

A bootstrap over one run's iterations captures the noise within that run only: on a loaded machine two
runs of the same pair gave 0.96x [0.92, 1.01] and 1.63x [1.58, 1.70]. So the iterations are also cut
into ROUNDS consecutive rounds (each still interleaving every config), the speedup is computed per
round, and the spread between rounds is reported; a speedup is significant only when the CI excludes 1
and every round lies on the same side of 1.
"""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

import numpy as np


class Progress:
    """A line on stderr at most every `every` seconds; silent when quiet."""

    def __init__(self, quiet: bool, every: float = 2.0) -> None:
        self.quiet, self.every, self.last = quiet, every, 0.0

    def __call__(self, msg: str, force: bool = False) -> None:
        now = time.monotonic()
        if self.quiet or (not force and now - self.last < self.every):
            return
        self.last = now
        print(f"hexfuse ab: {msg}", file=sys.stderr, flush=True)

    @contextmanager
    def step(self, msg: str, force: bool = False, every: float = 15.0) -> Iterator[None]:
        """Say ``msg``, then 'still ...' every ``every`` seconds until the block ends (QNN session creation
        compiles the graph silently for a minute and more)."""
        self(msg, force=force)
        if self.quiet:
            yield
            return
        stop, start = threading.Event(), time.monotonic()

        def beat() -> None:
            while not stop.wait(every):
                self(f"still {msg} ({time.monotonic() - start:.0f} s)", force=True)

        thread = threading.Thread(target=beat, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def time_interleaved(runners: dict[str, Callable[[], object]], iters: int, warmup: int,
                     progress: Progress) -> dict[str, np.ndarray]:
    """Run every config once per iteration, rotating the order so no config always goes first
    (caches, clocks and thermal drift then hit all configs alike, and iterations pair up)."""
    keys = list(runners)
    start = time.perf_counter()
    for w in range(warmup):
        for k in keys:
            runners[k]()
        progress(f"warmup {w + 1}/{warmup} ({len(keys)} sessions){_eta(start, w + 1, warmup)}")
    times = {k: np.empty(iters) for k in keys}
    start = time.perf_counter()
    for i in range(iters):
        shift = i % len(keys)
        for k in keys[shift:] + keys[:shift]:
            t0 = time.perf_counter()
            runners[k]()
            times[k][i] = (time.perf_counter() - t0) * 1e3
        progress(f"timing {i + 1}/{iters} ({len(keys)} sessions interleaved){_eta(start, i + 1, iters)}")
    return times


def _eta(start: float, done: int, total: int) -> str:
    left = (time.perf_counter() - start) / done * (total - done)
    return f", about {left:.0f} s left" if left >= 1 else ""


def stats(ms: np.ndarray) -> dict:
    return {"n": int(ms.size), "median_ms": float(np.median(ms)), "p90_ms": float(np.percentile(ms, 90)),
            "p99_ms": float(np.percentile(ms, 99)), "mean_ms": float(ms.mean()), "min_ms": float(ms.min()),
            "max_ms": float(ms.max())}


ROUNDS = 5  # rounds the timed iterations are cut into (fewer where there are under MIN_PER_ROUND per round)
MIN_PER_ROUND = 5


def round_speedups(ref: np.ndarray, new: np.ndarray, rounds: int = ROUNDS) -> list[float]:
    """median(ref) / median(new) per round of consecutive iterations (pairs stay in one round)."""
    count = min(rounds, ref.size // MIN_PER_ROUND)
    if count < 2:
        return []
    return [float(np.median(a) / np.median(b)) for a, b in zip(np.array_split(ref, count), np.array_split(new, count))]


def paired_speedup(ref: np.ndarray, new: np.ndarray, seed: int, n_boot: int = 2000, rounds: int = ROUNDS) -> dict:
    """Speedup = median(ref) / median(new); CI by resampling iteration indices (keeps the pairing);
    per-round speedups and their spread; significant when the CI and every round agree (module doc)."""
    rng = np.random.default_rng(seed)
    n = ref.size
    idx = rng.integers(0, n, size=(n_boot, n))
    boot = np.median(ref[idx], axis=1) / np.median(new[idx], axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    ratio = ref / new
    per_round = round_speedups(ref, new, rounds)
    ci_says = bool(lo > 1.0 or hi < 1.0)
    rounds_agree = bool(per_round) and (all(r > 1.0 for r in per_round) if lo > 1.0 else all(r < 1.0 for r in per_round))
    return {"speedup": float(np.median(ref) / np.median(new)), "ci95": [float(lo), float(hi)],
            "median_paired_ratio": float(np.median(ratio)), "n_boot": n_boot, "seed": seed,
            "rounds": [round(r, 6) for r in per_round],
            "round_spread": [min(per_round), max(per_round)] if per_round else None,
            "significant_within_run": ci_says,
            "significant": ci_says and rounds_agree}
