"""`jobfsm faults --jobs N`: the run's parts in N processes, added up into one report
(fsm/testing/faults_parts.py, fsm/cli/faults_parallel.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsm.cli import faults_cmd
from fsm.testing.faults import MODELS, FaultReport
from fsm.testing.faults_parts import WEIGHTS, merge, split

from .mutants import PATCHES

#: the parts of a whole run, in the order one process runs them
PARTS = ["machine", *(m.name for m in MODELS)]


def _report(**kw: object) -> FaultReport:
    base: dict[str, object] = {
        "store_url": "memory://",
        "profile": "dev",
        "seed": None,
        "examples": 1,
        "steps": 2,
        "faults": {},
        "checks": {},
        "seconds": 1.0,
        "ok": True,
    }
    return FaultReport(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("processes", [1, 2, 3, 4, 16])
def test_split_gives_every_part_to_exactly_one_process_and_leaves_none_idle(
    processes: int,
) -> None:
    # when the parts are shared out
    groups = split(PARTS, processes)
    # then each part is in one group, no group is empty, each keeps the run's order
    assert sorted(p for g in groups for p in g) == sorted(PARTS)
    assert len(groups) == min(processes, len(PARTS))
    assert all(groups)
    for group in groups:
        assert group == [p for p in PARTS if p in group]


def test_split_into_two_loads_both_processes_within_one_part_of_each_other() -> None:
    # when every part is shared between two processes
    groups = split(PARTS, 2)
    # then their loads differ by no more than the heaviest part (greedy, heaviest first)
    load = [sum(WEIGHTS[p] for p in g) for g in groups]
    assert abs(load[0] - load[1]) <= max(WEIGHTS.values())


@pytest.mark.parametrize("cores", [1, 3, 64])
def test_the_default_processes_come_from_the_cpu_count_where_there_is_no_affinity(
    monkeypatch: pytest.MonkeyPatch, cores: int
) -> None:
    # given a system without os.sched_getaffinity (macOS), with `cores` cores
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    # when a default-size run chooses its processes
    chosen = faults_cmd.part_processes(None, "sqlite:///x.db", None)
    # then it takes one more than the cores (a part waiting on its store leaves its
    # core idle), at most MAX_AUTO_JOBS
    assert chosen == min(cores + 1, faults_cmd.MAX_AUTO_JOBS)


def test_merge_adds_the_counts_and_keeps_the_first_failure() -> None:
    # given two parts' reports, the second failed
    a = _report(
        examples=3,
        steps=10,
        faults={"crash": 2},
        checks={"I1": 5},
        models={"machine": 4.0},
        coverage={"queued/lease": {"store": 1, "decide": 0}},
        notes=("n1",),
    )
    b = _report(
        examples=2,
        steps=7,
        faults={"crash": 1, "race": 4},
        checks={"I1": 1, "L1": 3},
        models={"limits": 2.0},
        coverage={"queued/lease": {"store": 2, "decide": 5}},
        notes=("n1", "n2"),
        ok=False,
        failure="L1 broken",
        failed_model="limits",
    )
    # when they are merged over 6 s of wall clock
    merged = merge([a, b], 6.0)
    # then everything is added, and the run failed as the second part did
    assert (merged.examples, merged.steps, merged.seconds) == (5, 17, 6.0)
    assert merged.faults == {"crash": 3, "race": 4}
    assert merged.checks == {"I1": 6, "L1": 3}
    assert merged.models == {"machine": 4.0, "limits": 2.0}
    assert merged.coverage == {"queued/lease": {"store": 3, "decide": 5}}
    assert merged.notes == ("n1", "n2")
    assert (merged.ok, merged.failure, merged.failed_model) == (False, "L1 broken", "limits")
    assert merge([a], 1.0).ok


@pytest.mark.slow  # a whole quick run on SQLite, in three processes
def test_a_run_in_two_processes_reports_every_part_as_one_run(tmp_path: Path) -> None:
    # when a quick run on SQLite goes in two processes
    out = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "fsm.cli", "faults", "--store", f"sqlite:///{tmp_path}/x.db"]
    cmd += ["--quick", "--jobs", "2", "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
    # then it held, and its one report names every part and the checks of each
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok: every invariant held" in done.stdout
    report = json.loads(out.read_text())
    assert set(report["models"]) == set(PARTS)
    ran = next(ln for ln in done.stdout.splitlines() if "fault models run:" in ln)
    named = [part.split()[0] for part in ran.split("fault models run: ")[1].split(", ")]
    assert named == [*PARTS[1:], "machine"]  # as one process runs them: models, machine
    prefixes = {name.split()[0] for name in report["checks"]}
    assert {"I1", "L1", "G1", "T1", "Y1"} <= prefixes  # machine, limits, retention, ...
    assert report["examples"] > 0


@pytest.mark.slow  # a patched copy of the tree, then a default-size run from it
def test_a_failing_part_ends_the_run_and_its_own_report_is_shown(tmp_path: Path) -> None:
    # given a careless change only the payloads model sees, and a run in two
    # processes (the machine in one, payloads in the other)
    from benchmarks.mutation import PG_DEFAULT, run_one

    (patch,) = [p for p in PATCHES if p.name == "payloads-int-takes-a-bool"]
    out = tmp_path / "report.json"
    extra = ("--jobs", "2", "--model", "machine", "--model", "payloads", "--json", str(out))
    # when it runs at the default size
    row = run_one(patch, "memory", size="default", timeout=240, pg=PG_DEFAULT, extra=extra)
    # then the run fails naming the model and the promise, as one process would
    assert row["killed"], row
    assert row["model"] == "payloads", row
    assert row["promise"] == "Y1", row
    # and the failing process's report is the run's JSON report, as with one process
    report = json.loads(out.read_text())
    assert (report["ok"], report["failed_model"]) == (False, "payloads")


def _alive(pid: int) -> bool:
    """`pid` runs (a zombie waiting to be reaped has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def _scratch_dirs(pid: int) -> set[Path]:
    """The scratch folders (jobfsm-models-*, jobfsm-faults-*) whose files `pid` holds open."""
    found: set[Path] = set()
    try:
        links = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return found
    for link in links:
        try:
            target = Path(os.readlink(link))
        except OSError:
            continue
        for parent in target.parents:
            if parent.name.startswith(("jobfsm-models-", "jobfsm-faults-")):  # SQLite scratch
                found.add(parent)
    return found


@pytest.mark.slow  # a default-size run in three processes, killed with SIGKILL
def test_children_end_with_a_killed_parent_and_remove_their_scratch_files() -> None:
    # given a default-size run on SQLite in two processes (minutes of work)
    cmd = [sys.executable, "-m", "fsm.cli", "faults", "--store", "sqlite:///unused.db"]
    cmd += ["--jobs", "2", "--no-shrink"]
    parent = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        children: list[int] = []
        scratch: set[Path] = set()
        while time.monotonic() < deadline and not (len(children) == 2 and scratch):
            time.sleep(0.2)
            children = _children(parent.pid)
            scratch = set().union(*(_scratch_dirs(c) for c in children)) if children else set()
        assert len(children) == 2, "the run did not start its two processes"
        assert scratch, "the children opened no scratch database"
        # when the parent is killed with SIGKILL (no chance to end them itself)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        # then each child ends within its grace (SIGTERM from the kernel) and the
        # scratch folders it made are gone
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(c) for c in children):
            time.sleep(0.1)
        left = [c for c in children if _alive(c)]
        for c in left:
            os.kill(c, signal.SIGKILL)
        assert not left, f"children {left} outlived their killed parent"
        assert not [d for d in scratch if d.exists()], scratch
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


#: a run under `sigterm_ends_run` whose SIGTERM arrives inside a garbage collector's
#: callback (hypothesis keeps one): the handler's exception is raised there, where
#: Python prints "Exception ignored" and goes on
_SIGTERM_IN_A_GC_CALLBACK = """
import gc, os, signal, sys, time
from fsm.cli.faults_parallel import sigterm_ends_run

sent = []

def callback(phase, info):
    if phase == "start" and not sent:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100_000):  # the handler runs between these bytecodes
            pass
        print("callback ended", flush=True)  # only if the handler ran after it

gc.callbacks.append(callback)
with sigterm_ends_run():
    until = time.monotonic() + 20
    while time.monotonic() < until:
        gc.collect()
        time.sleep(0.01)
    print("the run went on", flush=True)
    sys.exit(3)
"""


def test_a_sigterm_swallowed_by_a_gc_callback_still_ends_the_run() -> None:
    # given a run whose SIGTERM's exception is raised inside a gc callback
    done = subprocess.run(
        [sys.executable, "-c", _SIGTERM_IN_A_GC_CALLBACK],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # then the signal's exception was raised inside the callback (which it ended)
    assert "callback ended" not in done.stdout, done
    # and raised again outside it: the run ends with 143 at once, not when its work is
    # done (20 s) or SIGKILL comes, and nothing says it was ignored
    assert done.returncode == 128 + signal.SIGTERM, (done.returncode, done.stdout, done.stderr)
    assert "the run went on" not in done.stdout
    assert "Exception ignored" not in done.stderr, done.stderr
