"""State diagrams and tables drawn from the compiled lifecycle (never by hand).

Text renderers (Mermaid `stateDiagram-v2`, Graphviz DOT, a Markdown table) need
nothing installed. SVG and PNG go through Graphviz's `dot` program; without it,
`render_image` raises DiagramError naming what to install.

Every rule of the spec is one edge, labelled `event [guard, ...]`; operator
events carry ` (operator)` (dashed in DOT). Terminal and parked states are styled
apart. Two optional overlays: `counts` (edge -> how often it was taken, shown as
`n=K`) and `path` (one job's audit trail, its edges labelled `step i, j`).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence

from ..errors import JobFSMError
from ..lifecycle.spec import Lifecycle, Rule
from ..records import AuditEntry

#: an edge as the audit trail names it: (from_state or None for creation, event, to_state)
Edge = tuple[str | None, str, str]

IMAGE_FORMATS = ("svg", "png")
TEXT_FORMATS = ("mermaid", "dot")
#: seconds a `dot` run may take before it is killed
DOT_TIMEOUT = 30.0
INSTALL_HINT = "install Graphviz's dot program (`apt-get install graphviz`)"

_START = "__start"


class DiagramError(JobFSMError):
    """A diagram that cannot be drawn (Graphviz missing or failing, bad format)."""


def edge_of(rule: Rule) -> Edge:
    return (rule.source, rule.event, rule.dest)


def path_steps(entries: Iterable[AuditEntry]) -> dict[Edge, list[int]]:
    """Edge -> the step numbers (1-based) at which one job's audit trail took it."""
    steps: dict[Edge, list[int]] = {}
    n = 0
    for entry in entries:
        if entry.outcome != "applied":
            continue
        n += 1
        steps.setdefault((entry.from_state, entry.event, entry.to_state), []).append(n)
    return steps


#: most run marks a job path's title names (the rest are counted)
TITLE_MARKS = 5


def path_marks(entries: Iterable[AuditEntry]) -> str:
    """The run marks of one job's trail, by step number as `path_steps` numbers them:
    `step 7 "charging" [ch_1]`, at most TITLE_MARKS of them (empty if none)."""
    marks: list[str] = []
    n = 0
    for entry in entries:
        if entry.outcome != "applied":
            continue
        n += 1
        if entry.event == "mark":
            external = entry.data.get("external_id")
            text = f'step {n} "{entry.data.get("label", "")}"'
            marks.append(text if external is None else f"{text} [{external}]")
    shown = "; ".join(marks[:TITLE_MARKS])
    if len(marks) > TITLE_MARKS:
        shown += f"; {len(marks) - TITLE_MARKS} more"
    return shown


def edge_counts(trails: Iterable[Iterable[AuditEntry]]) -> dict[Edge, int]:
    """Edge -> how many times it was taken across many audit trails."""
    counts: dict[Edge, int] = {}
    for trail in trails:
        for entry in trail:
            if entry.outcome == "applied":
                key = (entry.from_state, entry.event, entry.to_state)
                counts[key] = counts.get(key, 0) + 1
    return counts


def _edges(lc: Lifecycle) -> list[Rule]:
    """One rule per distinct (from, event, to), creation first, in spec order."""
    seen: set[Edge] = set()
    out = []
    for rule in lc.rules:
        if edge_of(rule) not in seen:
            seen.add(edge_of(rule))
            out.append(rule)
    return out


def edge_label(
    lc: Lifecycle,
    rule: Rule,
    *,
    counts: Mapping[Edge, int] | None = None,
    path: Mapping[Edge, Sequence[int]] | None = None,
) -> str:
    """`event [guards] (operator) (n=K) (step i, j)`; the parts after the event are optional."""
    label = rule.event
    if rule.guards:
        label += f" [{', '.join(rule.guards)}]"
    if lc.events[rule.event].operator:
        label += " (operator)"
    edge = edge_of(rule)
    if counts is not None:
        audited = lc.events[rule.event].audited
        label += f" (n={counts.get(edge, 0)})" if audited else " (not counted: unaudited)"
    if path and edge in path:
        label += f" (step {', '.join(str(i) for i in path[edge])})"
    return label


def _visited(path: Mapping[Edge, Sequence[int]] | None) -> set[str]:
    states: set[str] = set()
    for src, _event, dst in path or {}:
        if src is not None:
            states.add(src)
        states.add(dst)
    return states


def _current(path: Mapping[Edge, Sequence[int]] | None) -> str | None:
    last, where = 0, None
    for (_src, _event, dst), steps in (path or {}).items():
        if steps and max(steps) > last:
            last, where = max(steps), dst
    return where


def _one_line(title: str) -> str:
    """A title on one line: a newline in a Mermaid comment would start a statement."""
    return " ".join(title.split())


def render_mermaid(
    lc: Lifecycle,
    *,
    counts: Mapping[Edge, int] | None = None,
    path: Mapping[Edge, Sequence[int]] | None = None,
    title: str | None = None,
) -> str:
    """A Mermaid `stateDiagram-v2` of every rule of the lifecycle."""
    lines = [
        "stateDiagram-v2",
        f"    %% lifecycle {lc.name!r}, generated by `jobfsm diagram`: do not edit by hand",
    ]
    if title:
        lines.append(f"    %% {_one_line(title)}")
    lines += [
        "    classDef terminal fill:#eceff1,stroke:#263238,stroke-width:3px",
        "    classDef parked fill:#ffe0b2,stroke:#e65100,stroke-width:3px",
        "    classDef visited fill:#c8e6c9,stroke:#1b5e20,stroke-width:3px",
        "    classDef current fill:#81c784,stroke:#1b5e20,stroke-width:4px",
    ]
    for rule in _edges(lc):
        src = "[*]" if rule.source is None else rule.source
        label = edge_label(lc, rule, counts=counts, path=path)
        lines.append(f"    {src} --> {rule.dest} : {label}")
    visited = _visited(path)
    current = _current(path)
    styles = {
        "terminal": sorted(lc.terminal - visited),
        "parked": sorted(lc.parked - visited),
        "visited": sorted(visited - {current}) if path else [],
        "current": [current] if current else [],
    }
    for cls, states in styles.items():
        if states:
            lines.append(f"    class {','.join(states)} {cls}")
    return "\n".join(lines) + "\n"


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_dot(
    lc: Lifecycle,
    *,
    counts: Mapping[Edge, int] | None = None,
    path: Mapping[Edge, Sequence[int]] | None = None,
    title: str | None = None,
) -> str:
    """A Graphviz DOT digraph of every rule; operator edges dashed."""
    visited = _visited(path)
    current = _current(path)
    lines = [
        f"// lifecycle {lc.name!r}, generated by `jobfsm diagram`: do not edit by hand",
        f"digraph {lc.name} {{",
        "  rankdir=LR;",
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
    ]
    if title:
        lines.append(f"  label={_dot_quote(_one_line(title))}; labelloc=t;")
    lines.append(f"  {_START} [shape=point, width=0.15];")
    for state in lc.states:
        attrs = [f"tooltip={_dot_quote(lc.state_docs.get(state, ''))}"]
        if state in lc.terminal:
            attrs += ["peripheries=2", 'fillcolor="#eceff1"']
        if state in lc.parked:
            attrs += ["shape=octagon", 'fillcolor="#ffe0b2"', 'color="#e65100"']
        if state in visited:
            attrs += ['fillcolor="#c8e6c9"', "penwidth=2.5"]
        if state == current:
            attrs += ['fillcolor="#81c784"', "penwidth=4"]
        lines.append(f"  {state} [{', '.join(attrs)}];")
    for rule in _edges(lc):
        src = _START if rule.source is None else rule.source
        label = edge_label(lc, rule, counts=counts, path=path)
        attrs = [f"label={_dot_quote(label)}"]
        if lc.events[rule.event].operator:
            attrs += ["style=dashed", 'color="#6a1b9a"', 'fontcolor="#6a1b9a"']
        if path and edge_of(rule) in path:
            attrs += ['color="#1b5e20"', "penwidth=3"]
        lines.append(f"  {src} -> {rule.dest} [{', '.join(attrs)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_table(lc: Lifecycle) -> str:
    """The lifecycle as a Markdown table: one row per rule, in the order it is tried."""
    rows = [
        "| state | event | to | guards | effects |",
        "|---|---|---|---|---|",
    ]
    for rule in lc.rules:
        event = rule.event + (" (operator)" if lc.events[rule.event].operator else "")
        rows.append(
            "| {} | {} | {} | {} | {} |".format(
                "(none)" if rule.source is None else rule.source,
                event,
                rule.dest,
                ", ".join(rule.guards) or "-",
                ", ".join(rule.effects) or "-",
            )
        )
    return "\n".join(rows) + "\n"


def render_codes(lc: Lifecycle) -> str:
    """The reason codes as a Markdown table: each code, its meaning, the transitions
    whose audit entries can carry it (a `code_rule` picks one of several)."""
    given: dict[str, list[str]] = {code: [] for code in lc.codes}
    for rule in lc.rules:
        where = f"{rule.source or '(none)'} {rule.event} {rule.dest}"
        for code in rule.codes():
            if where not in given.setdefault(code, []):
                given[code].append(where)
    rows = ["| code | meaning | given by |", "|---|---|---|"]
    for code, meaning in lc.codes.items():
        by = "; ".join(f"`{w}`" for w in given[code]) or "a rejected report (any fenced event)"
        rows.append(f"| `{code}` | {meaning} | {by} |")
    return "\n".join(rows) + "\n"


def render_image(dot_text: str, fmt: str) -> bytes:
    """SVG or PNG bytes from DOT text through Graphviz `dot` (bounded by DOT_TIMEOUT)."""
    if fmt not in IMAGE_FORMATS:
        raise DiagramError(f"image format must be one of {', '.join(IMAGE_FORMATS)}, got {fmt!r}")
    exe = shutil.which("dot")
    if exe is None:
        raise DiagramError(
            f"{fmt} output needs Graphviz's `dot` program, not found: {INSTALL_HINT}"
        )
    try:
        done = subprocess.run(
            [exe, f"-T{fmt}"],
            input=dot_text.encode("utf-8"),
            capture_output=True,
            timeout=DOT_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise DiagramError(f"Graphviz `dot` took longer than {DOT_TIMEOUT:.0f}s") from err
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise DiagramError(
            f"Graphviz `dot` failed (exit {done.returncode}): {detail[0] if detail else ''}"
        )
    return done.stdout


def render(
    lc: Lifecycle,
    fmt: str,
    *,
    counts: Mapping[Edge, int] | None = None,
    path: Mapping[Edge, Sequence[int]] | None = None,
    title: str | None = None,
) -> bytes:
    """Any supported format as bytes (text formats UTF-8)."""
    if fmt == "mermaid":
        return render_mermaid(lc, counts=counts, path=path, title=title).encode("utf-8")
    dot = render_dot(lc, counts=counts, path=path, title=title)
    if fmt == "dot":
        return dot.encode("utf-8")
    if fmt in IMAGE_FORMATS:
        return render_image(dot, fmt)
    known = ", ".join((*TEXT_FORMATS, *IMAGE_FORMATS))
    raise DiagramError(f"unknown diagram format {fmt!r}; known: {known}")
