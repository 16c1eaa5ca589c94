"""`python -m benchmarks --quick`: the CI smoke run of the benchmark harness.

It only checks that every suite completes and produces every figure the report
compares (quick figures are not fit to quote); docs/benchmarks.md is left alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness import read_jsonl
from benchmarks.machine import MACHINE_FACT
from benchmarks.report import (
    BOUNDS,
    LATENCY_BOUNDS,
    LATENCY_COMPARISONS,
    PAIR_BOUNDS,
    RECOVERY_TARGETS,
    THROUGHPUT_COMPARISONS,
    ZOMBIE_KEYS,
)

ROOT = Path(__file__).resolve().parents[2]
#: the issue's bound for --quick on 2 cores is 5 minutes; a loaded CI machine gets 8
QUICK_TIMEOUT = 480

PEER_RECOVERY = (
    "recovery.procrastinate.default",
    "recovery.procrastinate.recipe",
    "recovery.dramatiq.default",
    "recovery.celery.acks_early",
    "recovery.celery.acks_late",
)


@pytest.mark.timeout(QUICK_TIMEOUT + 60)
@pytest.mark.postgres
@pytest.mark.rabbitmq
@pytest.mark.peers
def test_quick_run_completes_with_every_compared_figure(
    tmp_path: Path, pg_server: str, rabbit_url: str
) -> None:
    docs = ROOT / "docs" / "benchmarks.md"
    before = docs.read_text()
    out = tmp_path / "results.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "JOBFSM_STORE"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=QUICK_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    facts, command, rows = read_jsonl(out)
    assert facts["cores"] == os.cpu_count()
    assert command == f"python -m benchmarks --quick --out {out}"
    keys = {m.key for m in rows}
    wanted = {c.ours for c in THROUGHPUT_COMPARISONS}
    wanted |= {k for c in THROUGHPUT_COMPARISONS for k in c.theirs}
    wanted |= {*RECOVERY_TARGETS, *ZOMBIE_KEYS, *PEER_RECOVERY, *(b.key for b in BOUNDS)}
    wanted |= {b.floor for b in BOUNDS if b.floor is not None}
    wanted |= {k for b in (*LATENCY_BOUNDS, *PAIR_BOUNDS) for k in (b.key, *b.among)}
    wanted |= {k for c in LATENCY_COMPARISONS for k in (c.ours, *c.ours_among, *c.theirs)}
    wanted |= {f"scale.{s}.worker_memory" for s in ("sqlite", "postgres")}
    wanted |= {f"scale.{s}.rows0.lease_p50" for s in ("sqlite", "postgres")}
    # the quick run's largest PostgreSQL table (10,000 rows) is pruned too
    wanted |= {f"scale.postgres.rows10000.{k}" for k in ("prune", "lease_p99_pruning")}
    assert sorted(wanted - keys) == []
    # a difference (the CPU the broker adds) and a latency from a submit's return (the
    # handler may start before the submitting thread runs again) may dip below zero
    signed = ("pairs.w1.broker_machine_cpu", "pairs.w4.broker_machine_cpu", "latency.")
    for m in rows:
        assert m.unit, m.key
        assert m.key.startswith(signed) or all(v >= 0 for v in m.values), m.key
    # jobfsm's own runs always finish: a figure per key (peers may never re-run a job)
    jobfsm_rows = ("throughput.", "scale.", "core.", "pairs.", "latency.jobfsm.")
    assert all(m.values for m in rows if m.key.startswith(jobfsm_rows))
    # the engine path alone spends CPU in both of its calls, on both stores
    by_key = {m.key: m for m in rows}
    for store in ("sqlite", "postgres"):
        path = by_key[f"throughput.engine.{store}.batched.cpu"]
        assert path.facts["claim-and-start, us per job"][0] > 0, store
        assert path.facts["report_many, us per job"][0] > 0, store
        # the claim's wall-clock time covers the CPU its thread spent in it
        wall = path.facts["claim-and-start wall-clock, us per job"][0]
        assert wall >= path.facts["claim-and-start, us per job"][0], store
    # a recovered job keeps its place: the next claim batch takes it
    assert {m.key: m.values for m in rows}["core.recovered_place"] == [1.0]
    # every system's drains keep the whole machine's CPU per job, part by part
    drains = [
        m
        for m in rows
        if m.key.startswith("throughput.") and m.key.endswith(".process") and ".raw." not in m.key
    ]
    assert drains
    for m in drains:
        assert m.facts[MACHINE_FACT]["all"] > 0, m.key
        assert m.facts[MACHINE_FACT]["worker processes"] > 0, m.key
    assert "The whole machine's CPU per job" in done.stdout
    assert "### Targets" in done.stdout
    assert "jobfsm writes an audit row for every transition" in done.stdout
    assert docs.read_text() == before
