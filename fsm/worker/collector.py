"""The garbage collector's settings for a process that serves as a worker.

A busy worker keeps thousands of young objects alive at any moment: the runs in
flight (each with its context and tokens), the claimed batch, the outcomes waiting
for their report batch. With CPython's default thresholds (700, 10, 10) most of them
survive the youngest generation's collections, fill the middle one, and every tenth
middle collection is a full one that also walks every module, class and function the
process imported. A no-op job then spends 37-59 us of CPU in the collector
(docs/benchmarks.md, "The garbage collector in a worker").

`tune_collector` leaves the youngest generation as it is (its cost is the objects in
flight, whatever its threshold) and

- freezes what exists when the worker starts (`gc.freeze`): imports, the app, the
  store, the worker itself. Full collections never walk them again; they are still
  freed by reference counting, only a reference cycle among them would stay;
- runs a middle collection every `MIDDLE_EVERY` youngest ones instead of every 10,
  so most objects in flight have died by the time it looks.

Cyclic garbage made by handlers is still collected, later: a middle collection
comes after at most `MIDDLE_EVERY` x 700 net new objects. `jobfsm worker` calls it
before it serves; a service that embeds a `Worker` in its own process can call it
too (it changes process-wide settings, so jobfsm never does that for it).
"""

from __future__ import annotations

import gc

#: youngest-generation collections per middle one (CPython's default: 10)
MIDDLE_EVERY = 100


def tune_collector() -> bool:
    """Freeze the objects that exist now and space out middle collections.

    Returns False, changing nothing, when the collector is disabled or its youngest
    threshold is 0 (someone chose that on purpose).
    """
    youngest, _middle, oldest = gc.get_threshold()
    if not gc.isenabled() or youngest == 0:
        return False
    gc.freeze()
    gc.set_threshold(youngest, MIDDLE_EVERY, oldest)
    return True
