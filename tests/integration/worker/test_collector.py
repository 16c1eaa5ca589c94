"""The garbage collector in a `jobfsm worker` process (`fsm.worker.collector`).

A real worker process on a SQLite file runs a handler that reads the collector's
settings from inside it; `tune_collector` itself runs in child interpreters, since
it changes process-wide settings this test process must keep.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

from fsm import Engine
from fsm.worker.collector import MIDDLE_EVERY

from .helpers import Workers, wait_for


def _in_child(code: str) -> dict[str, object]:
    prog = "import gc, json\nfrom fsm.worker.collector import tune_collector\n" + code
    done = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    out: dict[str, object] = json.loads(done.stdout)
    return out


def test_a_worker_process_serves_with_its_start_up_objects_frozen_and_middle_collections_spaced(
    sqlite_url: str, workers: Workers, open_engine: Callable[[str], Engine]
) -> None:
    # given: a `jobfsm worker` process serving the test app
    engine = open_engine(sqlite_url)
    workers.wait_serving(workers.start(sqlite_url))

    # when: a job reads the collector's settings inside it
    job = engine.submit("collector")
    wait_for(lambda: engine.get(job.id).state == "succeeded", 20, "the job to run")

    # then: what existed at start-up is frozen (the app, the store, the worker) and the
    # middle generation is collected every MIDDLE_EVERY youngest collections
    result = engine.get(job.id).result
    assert isinstance(result, dict)
    youngest, middle, _oldest = result["threshold"]
    assert youngest > 0  # the youngest generation keeps the interpreter's own threshold
    assert middle == MIDDLE_EVERY
    assert result["frozen"] > 10_000  # imports alone are tens of thousands of objects


def test_tuning_the_collector_freezes_what_exists_and_keeps_the_other_thresholds() -> None:
    got = _in_child(
        "gc.set_threshold(500, 10, 7)\n"
        "tuned = tune_collector()\n"
        "print(json.dumps({'tuned': tuned, 'threshold': gc.get_threshold(),"
        " 'frozen': gc.get_freeze_count(), 'enabled': gc.isenabled()}))"
    )
    assert got == {"tuned": True, "threshold": [500, MIDDLE_EVERY, 7],
                   "frozen": got["frozen"], "enabled": True}  # fmt: skip
    assert isinstance(got["frozen"], int)
    assert got["frozen"] > 0


def test_a_collector_someone_disabled_is_left_as_it_is() -> None:
    for setup in ("gc.disable()", "gc.set_threshold(0)"):
        got = _in_child(
            f"{setup}\nbefore = gc.get_threshold()\ntuned = tune_collector()\n"
            "print(json.dumps({'tuned': tuned, 'same': gc.get_threshold() == before,"
            " 'frozen': gc.get_freeze_count()}))"
        )
        assert got == {"tuned": False, "same": True, "frozen": 0}, setup
