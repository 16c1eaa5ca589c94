"""Several worker processes lease, run and finish thousands of jobs on one PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest

from adapters.postgres import open_store
from fsm.service.engine import Engine

pytestmark = pytest.mark.postgres

JOBS = 1000
PROCESSES = 4
BATCH = 25

WORKER = """
import json, os, sys
from fsm.service.engine import Engine
from fsm.records import Owner
from adapters.postgres import open_store
engine = Engine(open_store(sys.argv[1]))
me = Owner("host-" + sys.argv[2], os.getpid(), "inc-" + sys.argv[2])
grants = []
while True:
    jobs = engine.claim(me, limit=int(sys.argv[3]))
    if not jobs:
        break
    for job in jobs:
        grants.append([job.id, job.fence])
        engine.start(job.id, job.fence)
        engine.succeed(job.id, job.fence, {"by": sys.argv[2]})
engine.store.close()
print(json.dumps(grants))
"""


def test_processes_leasing_at_once_run_every_job_exactly_once(pg_url: str, admin: Any) -> None:
    # given thousands of queued jobs
    engine = Engine(open_store(pg_url))
    try:
        jobs = engine.submit_many([("k", i, {}) for i in range(JOBS)])
    finally:
        engine.store.close()
    url = f"{pg_url}?pool_max=2"
    # when several processes claim, start and finish them concurrently
    children = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url, str(n), str(BATCH)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(PROCESSES)
    ]
    grants: list[tuple[str, int]] = []
    for child in children:
        out, _ = child.communicate(timeout=240)
        assert child.returncode == 0
        grants += [(g[0], g[1]) for g in json.loads(out)]
    # then every job was leased exactly once, no fence was given twice, all succeeded
    assert Counter(job_id for job_id, _ in grants) == Counter(j.id for j in jobs)
    assert len(set(grants)) == len(grants) == JOBS
    assert admin.all("SELECT state, count(*) FROM jobs GROUP BY state") == [("succeeded", JOBS)]
    assert admin.one("SELECT count(*) FROM job_events") == JOBS * 4
