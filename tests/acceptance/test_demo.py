"""`jobfsm demo`: crashes injected, and still no job lost, none left unfinished, no effect twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ._cli import run_cli

#: the demo's own bound on these small runs (it fails, rather than hangs, past it)
DEMO_TIMEOUT = "60"


def _demo(tmp_path: Path, *extra: str) -> tuple[int, str, dict[str, object]]:
    out = tmp_path / "demo"
    done = run_cli(
        "demo",
        "--jobs",
        "60",
        "--workers",
        "2",
        "--crash-every",
        "0.8",
        "--seed",
        "11",
        "--dir",
        str(out),
        "--timeout",
        DEMO_TIMEOUT,
        *extra,
        timeout=120,
    )
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return done.returncode, done.stdout + done.stderr, summary


def test_demo_on_sqlite_kills_workers_and_still_loses_nothing(tmp_path: Path) -> None:
    code, output, summary = _demo(tmp_path)

    assert code == 0, output
    assert summary["ok"] is True
    assert summary["lost"] == 0
    assert summary["not_final"] == 0
    assert summary["effects"]["committed_twice"] == 0  # type: ignore[index]
    assert summary["crashes_injected"] >= 1  # type: ignore[operator]
    assert sum(summary["states"].values()) == 60  # type: ignore[attr-defined]
    assert "lost jobs: 0; not final: 0; invariant problems: 0" in output
    assert "OK" in output.splitlines()[-1]
    assert (tmp_path / "demo" / "lifecycle.mmd").read_text().startswith("stateDiagram-v2")
    assert "(n=" in (tmp_path / "demo" / "lifecycle.mmd").read_text()


@pytest.mark.postgres
def test_demo_on_postgresql_kills_workers_and_still_loses_nothing(
    tmp_path: Path, pg_url: str
) -> None:
    code, output, summary = _demo(tmp_path, "--store", pg_url)

    assert code == 0, output
    assert summary["lost"] == 0
    assert summary["not_final"] == 0
    assert summary["effects"]["committed_twice"] == 0  # type: ignore[index]
    assert "postgresql://" in str(summary["store"])
