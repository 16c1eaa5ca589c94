"""Tables and progress bars on a terminal (rich), for the CLI, the demo and the benchmarks.

Stored text goes through `fsm.text.printable` before rich sees it, and rich's
markup and highlighting are off, so stored data is printed as it is and can never
style or drive the terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click

from ..text import printable

#: widest a table is drawn when stdout is not a terminal (pipes, files, CI logs)
PIPE_WIDTH = 200
#: columns a narrow terminal may cut short (with "…"); ids, states and counts never are
SHRINKABLE = frozenset(
    {"last error (first line)", "error", "reason", "actor", "fault", "reason / error"}
)
#: the widest a shrinkable column is drawn (`list` cuts errors at 80 as well)
SHRINK_TO = 80


def console(*, err: bool = False, width: int | None = None) -> Any:
    """A rich Console for stdout (or stderr): `width`, else the terminal's on a terminal,
    else PIPE_WIDTH; no markup or highlighting, so stored text is printed as it is
    (escaped)."""
    from rich.console import Console

    stream = sys.stderr if err else sys.stdout
    if width is None and not stream.isatty():
        width = PIPE_WIDTH
    return Console(file=stream, width=width, highlight=False, markup=False, emoji=False)


class Bar:
    """What `progress_bar` yields: move it on, and print above it."""

    def __init__(self, progress: Any, task: Any) -> None:
        self._progress = progress
        self._task = task

    def update(self, completed: float, description: str | None = None) -> None:
        if description is None:
            self._progress.update(self._task, completed=completed)
        else:
            self._progress.update(self._task, completed=completed, description=description)

    def print(self, text: str) -> None:
        self._progress.console.print(text, markup=False, highlight=False)


@contextmanager
def progress_bar(description: str, total: float) -> Iterator[Bar]:
    """The one progress style of every long command (demo, faults, benchmarks): a rich
    bar with a count and the time elapsed, on stderr."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console(err=True)) as progress:
        yield Bar(progress, progress.add_task(description, total=total))


def _fit(widest: list[int], shrinkable: list[bool], width: int) -> list[int] | None:
    """Column widths that fit `width`: fixed columns at their widest, shrinkable ones
    at most SHRINK_TO and at least min(widest, 20), sharing what is left fairly (the
    narrowest first); None when even that does not fit."""
    gaps = 3 * len(widest)  # padding and separator of each column
    fixed = sum(w for w, s in zip(widest, shrinkable, strict=True) if not s)
    wanted = {i: min(w, SHRINK_TO) for i, w in enumerate(widest) if shrinkable[i]}
    floor = sum(min(w, 20) for w in wanted.values())
    left = width - gaps - fixed
    if left < floor:
        return None
    sizes = list(widest)
    pending = sorted(wanted, key=lambda i: wanted[i])
    while pending:
        share = left // len(pending)
        i = pending.pop(0)
        sizes[i] = min(wanted[i], share)
        left -= sizes[i]
    return sizes


def print_table(
    rows: Sequence[Sequence[object]], header: Sequence[str], *, title: str | None = None
) -> None:
    """A table of cells (escaped with `printable`, one line each) on stdout, drawn by rich.

    Ids, states and counts are never cut; the SHRINKABLE columns (errors, reasons,
    actors) share what the width leaves, each cut with "…" at most at SHRINK_TO. When
    even 20 characters each do not fit, the table is drawn wider and the terminal wraps
    its lines rather than hide a column."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    cells = [[printable(c) for c in row] for row in rows]
    widest = [max([len(name), *(len(r[i]) for r in cells)]) for i, name in enumerate(header)]
    shrinkable = [name in SHRINKABLE for name in header]
    out = console()
    sizes = _fit(widest, shrinkable, out.width)
    if sizes is None:  # too narrow: let the terminal wrap lines rather than hide columns
        floor = [min(w, 20) if s else w for w, s in zip(widest, shrinkable, strict=True)]
        out = console(width=sum(floor) + 3 * len(floor))
        sizes = _fit(widest, shrinkable, out.width) or floor
    tbl = Table(
        box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, show_edge=False
    )
    for name, size in zip(header, sizes, strict=True):
        tbl.add_column(name, no_wrap=True, overflow="ellipsis", width=size)
    for row in cells:
        tbl.add_row(*(Text(c, overflow="ellipsis", no_wrap=True) for c in row))
    with out.capture() as captured:
        out.print(tbl)
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))
