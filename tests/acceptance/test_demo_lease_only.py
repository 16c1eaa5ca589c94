"""`jobfsm demo` with lease-only liveness, as it runs on a developer's Mac (forced here).

Its workers cannot confirm a killed peer's death by pid; lost runs wait for their
lease (the demo's is 3 s), and still no job is lost and no effect is committed twice.
"""

from __future__ import annotations

import json
from pathlib import Path

from fsm import Engine, open_store
from fsm.ports import ScanRequest
from fsm.service.identity import LIVENESS_ENV

from ._cli import run_cli


def test_the_demo_runs_with_lease_only_liveness_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    done = run_cli(
        "demo",
        "--jobs",
        "40",
        "--workers",
        "2",
        "--crash-every",
        "1.5",
        "--seed",
        "5",
        "--dir",
        str(out),
        "--timeout",
        "90",
        env={LIVENESS_ENV: "lease"},
        timeout=150,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert (summary["ok"], summary["lost"], summary["not_final"]) == (True, 0, 0)
    assert summary["effects"]["committed_twice"] == 0
    assert summary["crashes_injected"] >= 1
    # the workers ran lease-only: lost runs were expired, never by a pid check
    logs = "".join(p.read_text(errors="replace") for p in out.glob("worker-*.log"))
    assert "liveness is lease-only" in logs
    store = open_store(f"sqlite:///{out / 'demo.db'}")
    try:
        engine = Engine(store)
        jobs = engine.store.scan(ScanRequest(states=tuple(engine.spec.states), limit=1000))
        expires = [
            e
            for job in jobs
            for e in engine.history(job.id)
            if e.event == "expire" and e.from_state == "running"
        ]
    finally:
        store.close()
    assert expires, "no run was lost: the crashes hit no running job"
    assert all(e.code != "owner_dead_pid_gone" for e in expires)
    assert all("is gone on this host" not in (e.error or "") for e in expires)
