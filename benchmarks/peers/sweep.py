"""The shapes each peer is run in, and how the best of them is picked and labelled.

A shape is (processes, concurrency per process): procrastinate's worker processes x
`--concurrency`, dramatiq's `--processes` x `--threads`, celery's workers x prefork
`-c`. The full run sweeps a grid per peer and reports its best (the median of a
shape's runs is what is compared); every shape's median is kept in the row's facts,
so a reader sees what was tried. A quick run tries only the shapes its rows need.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

Shape = tuple[int, int]

PROCRASTINATE: tuple[Shape, ...] = tuple((p, c) for p in (1, 2, 4) for c in (1, 4, 16))
PROCRASTINATE_QUICK: tuple[Shape, ...] = ((1, 1), (4, 1), (1, 4))
# 32 threads since dramatiq's best one-process shape came out at 16, the edge of {4, 8, 16}
DRAMATIQ: tuple[Shape, ...] = tuple((p, t) for p in (1, 2, 4) for t in (4, 8, 16, 32))
DRAMATIQ_QUICK: tuple[Shape, ...] = ((1, 8), (4, 8))
CELERY: tuple[Shape, ...] = ((1, 1), (1, 2), (1, 4), (1, 8), (2, 2), (2, 4), (4, 1), (4, 2))
CELERY_QUICK: tuple[Shape, ...] = ((1, 1), (1, 4))


def names(shapes: Sequence[Shape]) -> str:
    return "{" + ", ".join(f"{a}x{b}" for a, b in shapes) + "}"


def slots(grid: Sequence[Shape], n: int) -> list[Shape]:
    """The shapes of `grid` with `n` job slots in all."""
    return [s for s in grid if s[0] * s[1] == n]


def processes(grid: Sequence[Shape], n: int) -> list[Shape]:
    """The shapes of `grid` with `n` worker processes."""
    return [s for s in grid if s[0] == n]


def best(
    runs: Mapping[Shape, list[float]], shapes: Sequence[Shape]
) -> tuple[Shape, list[float], dict[str, Any]]:
    """(the shape with the highest median among `shapes`, its runs, every shape's median)."""
    if not shapes:
        raise ValueError("benchmark: no shape to pick the best of")
    pick = max(shapes, key=lambda s: statistics.median(runs[s]))
    medians = {f"{a}x{b}": round(statistics.median(runs[(a, b)])) for a, b in shapes}
    return pick, runs[pick], {"medians of the shapes tried (jobs/s)": medians}
