"""Diagrams are drawn from the spec: parsed back, they hold exactly the spec's states and edges."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from adapters.memory import MemoryStore
from fsm import Engine, FakeClock, Owner
from fsm.display.diagram import (
    DiagramError,
    edge_counts,
    path_steps,
    render,
    render_dot,
    render_mermaid,
    render_table,
)
from fsm.lifecycle.spec import Lifecycle, lifecycle
from tests.conftest import need_program

Spec = set[tuple[str, str, str, tuple[str, ...]]]

_LABEL = re.compile(r"^(?P<event>\w+)(?: \[(?P<guards>[^\]]*)\])?(?P<rest>.*)$")


def _split_label(label: str) -> tuple[str, tuple[str, ...], str]:
    m = _LABEL.match(label)
    assert m is not None, label
    guards = tuple(g.strip() for g in (m["guards"] or "").split(",") if g.strip())
    return m["event"], guards, m["rest"]


def spec_edges(lc: Lifecycle) -> Spec:
    return {(r.source or "[*]", r.event, r.dest, r.guards) for r in lc.rules}


def parse_mermaid(text: str) -> tuple[Spec, dict[str, set[str]], list[str]]:
    """Edges, `class` assignments and edge label tails of a stateDiagram-v2."""
    assert text.startswith("stateDiagram-v2\n")
    edges: Spec = set()
    classes: dict[str, set[str]] = {}
    tails = []
    for raw in text.splitlines()[1:]:
        line = raw.strip()
        if m := re.fullmatch(r"(\S+) --> (\S+) : (.+)", line):
            event, guards, rest = _split_label(m[3])
            edges.add((m[1], event, m[2], guards))
            tails.append(rest)
        elif m := re.fullmatch(r"class (\S+) (\w+)", line):
            classes[m[2]] = set(m[1].split(","))
        else:
            assert line.startswith(("%%", "classDef ")), f"unexpected mermaid line {line!r}"
    return edges, classes, tails


def parse_dot(text: str) -> tuple[Spec, dict[str, str], list[tuple[str, str]]]:
    """Edges, node attribute strings, and (label, attributes) of every edge."""
    edges: Spec = set()
    nodes: dict[str, str] = {}
    edge_attrs = []
    for raw in text.splitlines():
        line = raw.strip()
        if m := re.fullmatch(r'(\w+) -> (\w+) \[label="([^"]*)"(.*)\];', line):
            event, guards, _rest = _split_label(m[3])
            src = "[*]" if m[1] == "__start" else m[1]
            edges.add((src, event, m[2], guards))
            edge_attrs.append((m[3], m[4]))
        elif (m := re.fullmatch(r"(\w+) \[(.*)\];", line)) and m[1] not in ("node", "edge"):
            nodes[m[1]] = m[2]
    return edges, nodes, edge_attrs


def test_mermaid_parsed_back_has_exactly_the_specs_edges_and_styles_final_states() -> None:
    lc = lifecycle()

    edges, classes, _ = parse_mermaid(render_mermaid(lc))

    assert edges == spec_edges(lc)
    assert {s for e in edges for s in (e[0], e[2])} - {"[*]"} == set(lc.states)
    assert classes["terminal"] == set(lc.terminal)
    assert classes["parked"] == set(lc.parked)


def test_dot_parsed_back_has_exactly_the_specs_edges_with_operator_edges_dashed() -> None:
    lc = lifecycle()

    edges, nodes, edge_attrs = parse_dot(render_dot(lc))

    assert edges == spec_edges(lc)
    assert set(nodes) - {"__start"} == set(lc.states)
    for state in lc.terminal:
        assert "peripheries=2" in nodes[state]
    for state in lc.parked:
        assert "shape=octagon" in nodes[state]
    for label, attrs in edge_attrs:
        operator = lc.events[label.split()[0]].operator
        assert ("style=dashed" in attrs) == operator, label


def test_guards_appear_in_edge_labels() -> None:
    text = render_mermaid(lifecycle())

    assert "running --> retry_wait : fail [retryable, attempts_left, retry_before_deadline]" in text


def test_markdown_table_has_one_row_per_rule() -> None:
    lc = lifecycle()

    rows = render_table(lc).splitlines()[2:]

    parsed = set()
    for row in rows:
        state, event, dest, guards, _effects = (c.strip() for c in row.strip("|").split("|"))
        src = "[*]" if state == "(none)" else state
        parsed.add((src, event.split()[0], dest, tuple(g for g in guards.split(", ") if g != "-")))
    assert len(rows) == len(lc.rules)
    assert parsed == spec_edges(lc)


def _run_one_job(engine: Engine, clock: FakeClock) -> str:
    owner = Owner("host", 1, "inc")
    job = engine.submit("k", {})
    (leased,) = engine.claim(owner)
    engine.start(leased.id, leased.fence)
    engine.fail(leased.id, leased.fence, "boom", delay=1.0)
    clock.advance(2)
    (again,) = engine.claim(owner)
    engine.start(again.id, again.fence)
    engine.succeed(again.id, again.fence, {"ok": True})
    return job.id


def test_a_jobs_path_is_numbered_on_its_edges_and_its_states_highlighted() -> None:
    clock = FakeClock()
    engine = Engine(MemoryStore(), clock=clock)
    job_id = _run_one_job(engine, clock)

    path = path_steps(engine.history(job_id))
    text = render_mermaid(lifecycle(), path=path)

    assert "[*] --> queued : submit (step 1)" in text
    assert "queued --> leased : lease [due, before_deadline] (step 2)" in text
    assert "retry_wait --> leased : lease [due, before_deadline] (step 5)" in text
    assert "running --> succeeded : succeed (step 7)" in text
    _, classes, _ = parse_mermaid(text)
    assert classes["current"] == {"succeeded"}
    assert classes["visited"] == {"queued", "leased", "running", "retry_wait"}
    edges, _, edge_attrs = parse_dot(render_dot(lifecycle(), path=path))
    assert edges == spec_edges(lifecycle())
    taken = [attrs for label, attrs in edge_attrs if "(step" in label]
    assert len(taken) == 6
    assert all("penwidth=3" in a for a in taken)


def test_edge_counts_label_every_edge_with_how_often_it_was_taken() -> None:
    clock = FakeClock()
    engine = Engine(MemoryStore(), clock=clock)
    ids = [_run_one_job(engine, clock) for _ in range(3)]

    counts = edge_counts(engine.history(i) for i in ids)
    text = render_mermaid(lifecycle(), counts=counts)

    assert "running --> succeeded : succeed (n=3)" in text
    assert "queued --> leased : lease [due, before_deadline] (n=3)" in text
    assert "investigate --> queued : requeue (operator) (n=0)" in text
    assert "running --> running : heartbeat (not counted: unaudited)" in text


def test_image_without_graphviz_names_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no `dot` anywhere

    with pytest.raises(DiagramError) as err:
        render(lifecycle(), "svg")

    assert "apt-get install graphviz" in str(err.value)
    assert "jobfsm[diagrams]" not in str(err.value)  # no such extra: dot is a program


def test_unknown_format_is_named() -> None:
    with pytest.raises(DiagramError, match="'gif'"):
        render(lifecycle(), "gif")


def test_svg_through_graphviz_is_an_svg_document() -> None:
    need_program("dot", "apt-get install graphviz")

    data = render(lifecycle(), "svg")

    assert b"<svg" in data
    assert b"investigate" in data


def test_a_title_with_newlines_stays_one_comment_line() -> None:
    # given a title that tries to add a transition of its own on a new line
    text = render_mermaid(lifecycle(), title="job X\n    queued --> succeeded : forged")
    # then the title is one comment line and no forged edge appears
    assert "    %% job X queued --> succeeded : forged" in text.splitlines()
    assert "    queued --> succeeded : forged" not in text.splitlines()
