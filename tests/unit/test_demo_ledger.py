"""The demo's fenced effects ledger: one commit per job, stale fences refused, across processes."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from fsm.demo.effects import COMMITTED, DEDUPLICATED, FENCED_OUT, LEDGER_NAME, Ledger


def test_first_commit_wins_and_a_rerun_is_deduplicated(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / LEDGER_NAME, demo_dir=tmp_path)

    first = ledger.commit("JOB1", fence=1, attempt=1, what="charge")
    rerun = ledger.commit("JOB1", fence=2, attempt=2, what="charge")

    assert (first, rerun) == (COMMITTED, DEDUPLICATED)
    assert len(ledger.all()["JOB1"]["commits"]) == 1


def test_a_fence_older_than_the_newest_seen_for_the_job_is_fenced_out(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / LEDGER_NAME, demo_dir=tmp_path)
    ledger.commit("JOB2", fence=3, attempt=1, what="x")

    stale = ledger.commit("JOB3", fence=1, attempt=1, what="x")
    newer = ledger.commit("JOB2", fence=2, attempt=1, what="x")

    assert stale == COMMITTED  # another job: fences are per job
    assert newer == FENCED_OUT
    assert ledger.all()["JOB2"]["fenced_out"][0]["fence"] == 2


def _commit(home: str, fence: int) -> str:
    return Ledger(Path(home) / LEDGER_NAME, demo_dir=home).commit(
        "RACE", fence=fence, attempt=1, what="race"
    )


def test_concurrent_processes_commit_a_job_once(tmp_path: Path) -> None:
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        outcomes = pool.starmap(_commit, [(str(tmp_path), 1)] * 8)

    assert outcomes.count(COMMITTED) == 1
    assert outcomes.count(DEDUPLICATED) == 7
    assert len(Ledger(tmp_path / LEDGER_NAME, demo_dir=tmp_path).all()["RACE"]["commits"]) == 1


@pytest.mark.parametrize("where", ["/etc", "{home}/elsewhere", "{home}/effects/../../x/effects"])
def test_a_ledger_outside_the_demo_directory_is_refused(tmp_path: Path, where: str) -> None:
    # given a payload naming a ledger anywhere but <demo dir>/effects
    path = where.format(home=tmp_path)
    # then nothing is created there: the handler refuses the job instead
    with pytest.raises(ValueError, match="not effects/ inside"):
        Ledger(path, demo_dir=tmp_path)
    assert not (tmp_path / "elsewhere").exists()


def test_a_symlink_out_of_the_demo_directory_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    home = tmp_path / "demo"
    home.mkdir()
    (home / LEDGER_NAME).symlink_to(outside)
    with pytest.raises(ValueError, match="not effects/ inside"):
        Ledger(home / LEDGER_NAME, demo_dir=home)


def _demo_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("JOBFSM_DEMO_DIR", raising=False)
    home = tmp_path / "jobfsm-demo-x"
    home.mkdir(mode=0o700)
    return home


def test_a_demo_directory_of_this_user_is_accepted_without_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _demo_home(tmp_path, monkeypatch)

    assert Ledger(home / LEDGER_NAME).commit("J1", 1, 1, "x") == COMMITTED


def test_a_demo_directory_another_user_made_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a jobfsm-demo* directory whose owner is not the user running the handler
    home = _demo_home(tmp_path, monkeypatch)
    monkeypatch.setattr("os.getuid", lambda: home.stat().st_uid + 1)

    with pytest.raises(ValueError, match="of this user"):
        Ledger(home / LEDGER_NAME)
    assert not (home / LEDGER_NAME).exists()


def test_a_demo_directory_others_can_write_to_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _demo_home(tmp_path, monkeypatch)
    home.chmod(0o777)

    with pytest.raises(ValueError, match="writable by no other"):
        Ledger(home / LEDGER_NAME)


def test_a_symlink_planted_as_the_lock_file_is_not_followed(tmp_path: Path) -> None:
    # given a lock file name pointing at a file outside the ledger
    ledger = Ledger(tmp_path / LEDGER_NAME, demo_dir=tmp_path)
    target = tmp_path / "victim"
    (tmp_path / LEDGER_NAME / "J1.lock").symlink_to(target)

    # when a handler commits that job, the open refuses the symlink
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        ledger.commit("J1", 1, 1, "x")
    assert not target.exists()
