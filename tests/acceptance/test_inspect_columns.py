"""`jobfsm inspect` at 200 columns: no column cut to nothing, the actor whole, a
recovery's owner text once, the failure stage shown (issue 34 item 13, issue 37 item 11)."""

from __future__ import annotations

import subprocess
import sys

from fsm import Engine, KindPolicy, Owner, open_store
from fsm.service.identity import current

from ._cli import ok_here, ok_json_here

ACTOR = "ann.operator@example.com"


def _lost_and_requeued(url: str, *, requeue: bool = True) -> tuple[str, int]:
    """A not-retry-safe run lost to a dead process, parked, then requeued by ACTOR."""
    engine = Engine(open_store(url), kinds={"u": KindPolicy(retry_safe=False)})
    try:
        job = engine.submit("u", {})
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        dead = Owner(host=current().host, pid=gone.pid, incarnation="exited")
        (leased,) = engine.claim(dead, ids=[job.id])
        engine.start(job.id, leased.fence)
    finally:
        engine.store.close()
    ok_here("recover", "--store", url)
    if requeue:
        ok_here("requeue", job.id, "--attempts", "1", "--actor", ACTOR, "--reason", "not charged",
                "--store", url)  # fmt: skip
    return job.id, gone.pid


def test_inspect_at_200_columns_keeps_the_actor_and_shows_the_owner_text_once(
    sqlite_url: str,
) -> None:
    job_id, pid = _lost_and_requeued(sqlite_url)
    # when the job is inspected through a pipe (drawn 200 wide)
    out = ok_here("inspect", job_id, "--store", sqlite_url)
    lines = out.splitlines()
    # then the table fits, the actor is whole and every version number is there
    trail = lines[lines.index("audit trail") :]
    assert max(len(line) for line in trail) <= 200
    assert f"   {ACTOR}   " in out
    rows = [line for line in trail[3:] if line.strip()]
    assert [line.split()[0] for line in rows] == ["1", "2", "3", "4", "5"]
    # the recovery's verdict (its reason and its error) is shown once, what happened first
    (expire,) = [line for line in rows if " expire " in line]
    assert expire.count(f"pid {pid} is gone") == 1
    assert f"pid {pid} is gone on this host (owner " in expire
    # and the failure stage of the lost run is in its own column and beside last_error
    assert " handler " in expire


def test_inspect_says_at_which_stage_the_last_error_happened(sqlite_url: str) -> None:
    job_id, pid = _lost_and_requeued(sqlite_url, requeue=False)

    out = ok_here("inspect", job_id, "--store", sqlite_url)

    (line,) = [ln for ln in out.splitlines() if ln.strip().startswith("last_error:")]
    assert f"pid {pid} is gone on this host" in line
    assert line.endswith("(stage handler, attempt 1)")


def test_inspect_json_carries_each_entrys_stage(sqlite_url: str) -> None:
    job_id, _ = _lost_and_requeued(sqlite_url)

    history = ok_json_here("inspect", job_id, "--store", sqlite_url)["history"]

    assert [(e["event"], e["stage"]) for e in history] == [
        ("submit", None),
        ("lease", None),
        ("start", None),
        ("expire", "handler"),
        ("requeue", None),
    ]
