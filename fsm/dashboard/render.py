"""Diagrams drawn once and kept: Graphviz runs for a key the cache has not seen, at most
`workers` drawings at a time, and requests for a key being drawn wait for that drawing.

Keys: a job's path is drawn per (job id, version, trail page), the live lifecycle per
count snapshot; so 40 open tabs refreshing one job page cost one `dot` process, and
a flood of different job pages costs at most `workers` at a time (the rest wait up
to `wait` seconds, then show that the diagram is busy instead of queueing forever).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

from ..display.diagram import DiagramError, render_image

#: drawings (`dot` processes) at once, per dashboard
RENDER_WORKERS = 2
#: drawings kept
CACHE_SIZE = 256
#: seconds a request waits for a free drawing slot or for the same key being drawn
RENDER_WAIT = 10.0

Drawn = tuple[str | None, str | None]


def draw_svg(dot: str) -> Drawn:
    """(inline SVG, None), or (None, why not) when Graphviz cannot draw it."""
    try:
        svg = render_image(dot, "svg").decode("utf-8")
    except DiagramError as err:
        return None, str(err)
    start = svg.find("<svg")  # drop the XML prolog and DOCTYPE for inline use
    return (svg[start:] if start >= 0 else svg), None


class Renderer:
    """A bounded cache of drawings in front of a bounded pool of drawers (thread-safe)."""

    def __init__(
        self,
        draw: Callable[[str], Drawn] = draw_svg,
        *,
        workers: int = RENDER_WORKERS,
        size: int = CACHE_SIZE,
        wait: float = RENDER_WAIT,
    ) -> None:
        self._draw = draw
        self._slots = threading.BoundedSemaphore(workers)
        self._size = size
        self._wait = wait
        self._lock = threading.Lock()
        self._done: OrderedDict[Hashable, Drawn] = OrderedDict()
        self._drawing: dict[Hashable, threading.Event] = {}
        #: how many drawings were made (what the cache saved shows against requests)
        self.drawn = 0

    def svg(self, key: Hashable, dot: Callable[[], str]) -> Drawn:
        """The drawing for `key`, made from `dot()` if it is not kept yet."""
        while True:
            with self._lock:
                if key in self._done:
                    self._done.move_to_end(key)
                    return self._done[key]
                pending = self._drawing.get(key)
                if pending is None:
                    mine = self._drawing[key] = threading.Event()
                    break
            if not pending.wait(self._wait):
                return None, "the diagram is still being drawn: it shows on the next refresh"
        try:
            if not self._slots.acquire(timeout=self._wait):
                return None, "every diagram drawer is busy: it shows on the next refresh"
            try:
                drawn = self._draw(dot())
            finally:
                self._slots.release()
            with self._lock:
                self.drawn += 1
                self._done[key] = drawn
                while len(self._done) > self._size:
                    self._done.popitem(last=False)
            return drawn
        finally:
            with self._lock:
                self._drawing.pop(key, None)
            mine.set()
