"""`jobfsm faults` and `run_faults`: summary, exit codes, and a runnable reproduction."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import fsm.testing.faults as faults_module
from fsm.ports import Store
from fsm.testing import run_faults

from .mutants import PruneAnythingStore


def jobfsm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fsm.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


@pytest.mark.slow  # a whole quick run (the machine and every model) in a subprocess
def test_jobfsm_faults_exits_0_and_summarizes_faults_and_checks_when_all_hold() -> None:
    # given a small run on the memory store (the summary is the point here: the whole
    # quick run on SQLite is test_fault_models.py's; this one took 10.6 s of CPU on SQLite
    # and takes 4.3 on memory, #38)
    # when the command runs
    done = jobfsm("faults", "--store", "memory://", "--quick", "--examples", "5", "--steps", "15")
    # then it exits 0 with the summary of what ran, was injected and was checked
    assert done.returncode == 0, done.stderr
    assert "ok: every invariant held" in done.stdout
    assert "faults injected" in done.stdout
    assert "I6" in done.stdout or "I2/I4/I5/I6/I8" in done.stdout
    assert "examples" in done.stdout
    # and it says which models ran and which (state, event) pairs of the spec it reached
    assert "fault models run: policy" in done.stdout
    assert "spec coverage:" in done.stdout
    assert "(state, event) pairs" in done.stdout


def test_jobfsm_faults_names_an_unknown_fault_model() -> None:
    done = jobfsm("faults", "--store", "memory://", "--model", "nosuchmodel")
    assert done.returncode == 2
    assert "nosuchmodel" in done.stderr
    assert "races" in done.stderr


def test_jobfsm_faults_refuses_the_delivery_model_without_a_broker_url() -> None:
    done = jobfsm("faults", "--store", "memory://", "--model", "delivery")
    assert done.returncode == 2
    assert "--delivery amqp://" in done.stderr
    assert "invariant" not in done.stdout  # nothing ran


@pytest.mark.slow  # a quick run of the policy model in a subprocess
def test_jobfsm_faults_writes_its_report_as_json(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    done = jobfsm(
        "faults", "--store", "memory://", "--model", "policy", "--quick", "--json", str(out)
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["ok"] is True
    assert set(report["models"]) == {"policy"}
    assert report["coverage"]["running/fail"]["decide"] > 0


def test_jobfsm_faults_names_a_store_url_it_cannot_use() -> None:
    # given a URL of no known store; when the command runs; then it says which and exits non-zero
    done = jobfsm("faults", "--store", "nosuchstore://here", "--examples", "1")
    assert done.returncode != 0
    assert "nosuchstore" in done.stderr


def test_jobfsm_faults_refuses_a_non_positive_example_count() -> None:
    done = jobfsm("faults", "--store", "memory://", "--examples", "0")
    assert done.returncode == 2
    assert "--examples" in done.stderr


def test_run_faults_against_a_broken_store_reports_the_invariant_and_a_runnable_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given run_faults whose "memory://" stores prune jobs that have not finished
    @contextlib.contextmanager
    def broken(url: str, notes: list[str] | None = None) -> Iterator[object]:
        def factory() -> Store:
            return PruneAnythingStore()

        yield factory

    monkeypatch.setattr(faults_module, "fresh_stores", broken)
    # when the suite runs (unshrunk: shrinking is hypothesis's job, and slow)
    report = run_faults("memory://", examples=200, steps=50, profile="ci", shrink=False, models=())
    # then it fails, names the invariant, and its reproduction replays the failure
    assert not report.ok
    assert report.failure is not None
    assert re.search(r"[ID]\d job", report.failure)
    assert report.reproduction is not None
    assert "state = FaultSuiteMachine()" in report.reproduction
    with pytest.raises(AssertionError, match=r"[ID]\d job"):
        exec(compile(report.reproduction, "repro.py", "exec"), {})


@pytest.mark.parametrize("mode", [["--quick"], ["--exhaustive", "--scope", "tiny"]])
def test_jobfsm_faults_without_the_testing_extra_names_the_extra(mode: list[str]) -> None:
    # given an interpreter where hypothesis cannot be imported (the extra not installed)
    argv = ["jobfsm", "faults", "--store", "memory://", *mode]
    code = (
        "import sys; sys.modules['hypothesis'] = None\n"
        "from fsm.cli import main\n"
        f"sys.argv = {argv!r}\n"
        "main()\n"
    )
    # when the command runs, sampling or exhaustive
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    # then the command says which extra to install, without a traceback
    assert done.returncode != 0
    assert "'testing' extra" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert "ModuleNotFoundError" not in done.stderr


@pytest.mark.slow  # two quick runs of the machine in subprocesses
def test_jobfsm_faults_is_quiet_by_default_and_verbose_shows_the_logs() -> None:
    # given the commits-free models that log by design (rejected stale reports, retries),
    # on the memory store (it logs the same; half the CPU of SQLite files, #38)
    args = ("faults", "--store", "memory://", "--quick", "--model", "machine")
    # when the command runs without and with --verbose
    quiet, loud = jobfsm(*args), jobfsm(*args, "--verbose")
    # then the default run prints a bar per model and no log lines; --verbose shows them
    assert quiet.returncode == 0, quiet.stderr
    assert loud.returncode == 0, loud.stderr
    assert "  machine" in quiet.stderr
    assert "WARNING" not in quiet.stderr
    assert "Traceback" not in quiet.stderr
    assert "WARNING" in loud.stderr, loud.stderr[-2000:]


@pytest.mark.slow  # two quick runs of one model in subprocesses
def test_a_run_that_draws_its_seed_names_it_and_the_seed_makes_the_same_draws(
    tmp_path: Path,
) -> None:
    # given a profile that draws at random (dev, outside CI: under $CI hypothesis makes
    # every profile derandomize), and no --seed
    first = tmp_path / "first.json"
    args = ("faults", "--store", "memory://", "--quick", "--profile", "dev", "--model", "races")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    done = jobfsm(*args, "--json", str(first), env=env)
    # then the run names the seed it drew, and its report carries it
    assert done.returncode == 0, done.stderr
    drawn = re.search(r"^seed (\d+) \(drawn: --seed \1 makes the same draws\)$", done.stderr, re.M)
    assert drawn is not None, done.stderr
    report = json.loads(first.read_text())
    assert report["seed"] == int(drawn.group(1))
    # and a run with that seed injects the same faults and makes the same checks
    again = tmp_path / "again.json"
    replay = jobfsm(*args, "--seed", drawn.group(1), "--json", str(again), env=env)
    assert replay.returncode == 0, replay.stderr
    assert "drawn" not in replay.stderr
    replayed = json.loads(again.read_text())
    assert (replayed["faults"], replayed["checks"]) == (report["faults"], report["checks"])


def test_a_derandomized_profile_draws_no_seed() -> None:
    # given the ci profile, which derandomizes (every run makes the same draws)
    args = ("faults", "--store", "memory://", "--quick", "--profile", "ci", "--model", "races")
    done = jobfsm(*args)
    # then no seed is drawn or named
    assert done.returncode == 0, done.stderr
    assert "drawn" not in done.stderr


def test_run_faults_reports_progress_after_each_example_of_the_machine() -> None:
    # given a progress callback (the command's bar) and a machine-only run on the
    # memory store, a store that has no queue of the run's to clean up
    seen: list[int] = []
    # when the run ends
    report = run_faults(
        "memory://",
        examples=4,
        steps=5,
        models=(),
        progress=lambda stats: seen.append(stats.examples),
    )
    # then the callback was told after every example the machine ran, in order
    assert report.ok, report.failure
    assert report.examples >= 1
    assert len(seen) == report.examples
    assert seen == sorted(seen)
