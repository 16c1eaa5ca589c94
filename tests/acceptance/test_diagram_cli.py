"""`jobfsm diagram` in every format, parsed back against the spec; one job's path."""

from __future__ import annotations

from pathlib import Path

from fsm.lifecycle.spec import lifecycle
from tests.conftest import need_program
from tests.unit.test_diagram import parse_dot, parse_mermaid, spec_edges

from ._cli import ok_here, ok_json_here, one_line_error, run_cli


def test_mermaid_on_stdout_parses_back_to_the_specs_edges() -> None:
    edges, classes, _ = parse_mermaid(ok_here("diagram"))

    assert edges == spec_edges(lifecycle())
    assert classes["parked"] == {"investigate"}


def test_dot_to_a_file_parses_back_to_the_specs_edges(tmp_path: Path) -> None:
    out = tmp_path / "job.dot"

    ok_here("diagram", "--format", "dot", "--output", str(out))

    edges, _, _ = parse_dot(out.read_text(encoding="utf-8"))
    assert edges == spec_edges(lifecycle())


def test_a_jobs_path_is_drawn_from_its_audit_trail(sqlite_url: str) -> None:
    job = ok_json_here("submit", "report.build", "--store", sqlite_url)["job"]
    ok_here("cancel", job["id"], "--actor", "ann", "--reason", "not needed", "--store", sqlite_url)

    text = ok_here("diagram", "--job", job["id"], "--store", sqlite_url)

    assert "[*] --> queued : submit (step 1)" in text
    assert "queued --> cancelled : cancel (operator) (step 2)" in text  # an operator event
    _, classes, _ = parse_mermaid(text)
    assert classes["current"] == {"cancelled"}


def test_svg_without_graphviz_is_a_one_line_error_naming_what_to_install(
    tmp_path: Path,
) -> None:
    done = run_cli(
        "diagram", "--format", "svg", "-o", str(tmp_path / "x.svg"), env={"PATH": str(tmp_path)}
    )

    line = one_line_error(done)
    assert "apt-get install graphviz" in line
    assert "jobfsm[diagrams]" not in line  # no such extra: dot is a program
    assert not (tmp_path / "x.svg").exists()


def test_svg_and_png_with_graphviz(tmp_path: Path) -> None:
    need_program("dot", "apt-get install graphviz")

    ok_here("diagram", "--format", "svg", "-o", str(tmp_path / "x.svg"))
    ok_here("diagram", "--format", "png", "-o", str(tmp_path / "x.png"))

    assert b"<svg" in (tmp_path / "x.svg").read_bytes()
    assert (tmp_path / "x.png").read_bytes().startswith(b"\x89PNG")
