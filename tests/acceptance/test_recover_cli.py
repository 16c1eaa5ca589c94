"""`jobfsm recover`: the workers' recovery sweep, run once by an operator."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from fsm import Engine, FakeClock, KindPolicy, Owner, open_store
from fsm.service.identity import current
from fsm.service.pausing import PAUSE_SEEN_WITHIN

from ._cli import ok, ok_json, run_cli


def test_recover_takes_back_at_once_the_jobs_of_a_dead_process_on_this_host(
    tmp_path: Path,
) -> None:
    # given a SQLite store with a retry-safe job running under a process that has exited
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    engine = Engine(open_store(url), kinds={"k": KindPolicy()})
    try:
        job = engine.submit("k", {})
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        dead = Owner(host=current().host, pid=gone.pid, incarnation="exited")
        (leased,) = engine.claim(dead, limit=1)
        engine.start(job.id, leased.fence)
        # when an operator runs one sweep (the lease has 30 s left: only the judge helps)
        report = ok_json("recover", "--store", url, "--json")
        # then the job is back for a retry, recovered by the production sweep
        after = engine.get(job.id)
        assert report["expired"] == 1
        assert (after.state, after.recoveries, after.owner) == ("retry_wait", 1, None)
        assert f"pid {gone.pid} is gone" in (after.last_error or "")
    finally:
        engine.store.close()


def test_recover_without_the_judge_leaves_unexpired_leases_alone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    engine = Engine(open_store(url), kinds={"k": KindPolicy()})
    try:
        job = engine.submit("k", {})
        dead = Owner(host=current().host, pid=2**22 + 12345, incarnation="x")
        engine.claim(dead, limit=1)
        out = ok("recover", "--store", url, "--no-judge")
        assert out.startswith("recovered 0 job(s)")
        assert engine.get(job.id).state == "leased"
    finally:
        engine.store.close()


def test_erase_blanks_a_finished_jobs_payload_everywhere_from_the_cli(tmp_path: Path) -> None:
    # given a finished job whose payload holds a secret, in a SQLite store
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    secret = "card-4242-4242"
    engine = Engine(open_store(url), kinds={"k": KindPolicy()})
    try:
        job = engine.submit("k", {"card": secret})
        (leased,) = engine.claim(Owner("h", 1, "i"), limit=1)
        engine.start(job.id, leased.fence)
        engine.succeed(job.id, leased.fence, {"charged": secret})
        # when an operator erases it
        ok("erase", job.id, "--actor", "ops", "--reason", "customer asked", "--store", url)
        # then neither the record, the trail nor `inspect` shows the secret any more
        assert engine.get(job.id).payload is None
        assert all(secret not in e.data_json for e in engine.history(job.id))
        assert secret not in ok("inspect", job.id, "--store", url)
    finally:
        engine.store.close()


def test_prune_keeps_a_queue_by_its_own_retention(tmp_path: Path) -> None:
    # given two finished jobs, 10 days old, of an ordinary queue and of an audit queue
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    ten_days_ago = time.time() - 10 * 86400
    engine = Engine(open_store(url), clock=FakeClock(ten_days_ago), kinds={"k": KindPolicy()})
    try:
        ids = {}
        for queue in ("default", "audit"):
            job = engine.submit("k", {}, queue=queue)
            (leased,) = engine.claim(Owner("h", 1, "i"), [queue], limit=1)
            engine.start(job.id, leased.fence)
            ids[queue] = engine.succeed(job.id, leased.fence).id
        # when prune runs with the audit queue kept 90 days
        out = ok("prune", "--keep", "audit:succeeded=90", "--store", url)
        # then only the ordinary job (past the default 7 days) is gone
        assert out.strip() == "pruned 1 job(s)"
        assert engine.store.get(ids["default"]) is None
        assert engine.store.get(ids["audit"]) is not None
        bad = run_cli("prune", "--keep", "audit:running=1", "--store", url)
        assert bad.returncode == 2
        assert "STATE one of cancelled, failed, succeeded" in bad.stderr
    finally:
        engine.store.close()


def test_pause_and_resume_a_queue_from_the_cli(tmp_path: Path) -> None:
    # given a queued job in a SQLite store
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    engine = Engine(open_store(url), kinds={"k": KindPolicy(queue="mail")})
    try:
        job = engine.submit("k", {})
        # when an operator pauses its queue
        ok("pause", "mail", "--actor", "ada", "--reason", "provider outage", "--store", url)
        # then status says so, and no worker leases it
        assert "queue mail paused" in ok("status", "--store", url)
        assert "provider outage" in ok("status", "--store", url)
        worker_engine = Engine(open_store(url))
        try:
            assert worker_engine.claim(Owner("h", 1, "i"), ["mail"], limit=5) == []
            # until it is resumed
            out = ok("resume", "mail", "--actor", "ada", "--reason", "back", "--store", url)
            assert out.strip() == "queue mail resumed"
            time.sleep(PAUSE_SEEN_WITHIN)
            (leased,) = worker_engine.claim(Owner("h", 1, "i"), ["mail"], limit=5)
            assert leased.id == job.id
        finally:
            worker_engine.store.close()
        assert (
            run_cli("pause", "mail", "--actor", "", "--reason", "x", "--store", url).returncode == 2
        )
    finally:
        engine.store.close()


def test_recover_names_the_lost_runs_it_leaves_to_a_worker_with_their_reconciler(
    tmp_path: Path,
) -> None:
    # given a SQLite store with a lost run of a kind that has a reconciler (its lease lapsed
    # 10 s ago) and `jobfsm recover`, which has no reconciler
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    clock = FakeClock(time.time() - 40)
    engine = Engine(open_store(url), clock=clock)
    try:
        job = engine.submit("payment.charge", {})
        (leased,) = engine.claim(Owner("elsewhere", 1, "inc"), limit=1)
        engine.transition(job.id, "start", fence=leased.fence, kind_policy={"reconciler": True})
        lapsed_at = engine.get(job.id).lease_until or 0.0
        # when an operator runs one sweep
        out = ok("recover", "--store", url)
        report = ok_json("recover", "--store", url)
        # then the run is left running, and the command says which, why and until when
        assert engine.get(job.id).state == "running"
        assert "recovered 0 job(s)" in out
        assert "left 1 job(s) for later:" in out
        line = next(ln for ln in out.splitlines() if job.id in ln)
        assert "(payment.charge) until " in line
        assert "has a reconciler this process lacks" in line
        (deferred,) = report["deferred"]
        assert deferred["job_id"] == job.id
        assert deferred["until"] == lapsed_at + 60.0
    finally:
        engine.store.close()
