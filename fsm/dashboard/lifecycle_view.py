"""The Lifecycle page's and the job page's diagrams, drawn from the spec for a person to read.

The machine is laid out top-down in groups derived from the spec (never listed by
hand): *intake* (where jobs are created and wait for a lease), *run* (states a
heartbeat renews), *terminal* at the bottom, and apart on the side the states an
operator event enters (cancelling) and the parked and recovery states
(investigate, reconciling). The several events between one pair of states are one
edge with one line per event, so the drawing has an edge per pair, not per rule.
Each state shows how many jobs are in it now and links to the job list filtered by
it; each event line shows how often it was taken in the chosen window, counted by
the store's `JobBrowser.recent_transitions` (one grouped SQL aggregate over the
audit trail's window).

A job's own path is drawn alone: one node per state it entered, in order, each
edge the event that took it there with its time, fence and attempt.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from urllib.parse import urlencode

import attrs

from ..display.diagram import Edge
from ..display.format import fmt_time
from ..errors import BadInput
from ..lifecycle.spec import Lifecycle
from ..records import AuditEntry
from ..service.engine import Engine
from . import views
from .render import Renderer

#: the windows the Lifecycle page counts transitions over (label -> seconds)
WINDOWS: dict[str, float] = {"15m": 900.0, "1h": 3600.0, "6h": 21600.0, "1d": 86400.0}
DEFAULT_WINDOW = "1h"
#: steps of a job's path drawn (the newest of the trail page; the rest are counted)
PATH_STEPS = 60

GROUP_LABELS = {
    "intake": "intake",
    "retry": "waiting to retry",
    "run": "run",
    "terminal": "terminal",
    "operator": "stopping on request",
    "aside": "recovery and investigation",
}
_FONT = 'fontname="Helvetica"'


def window_of(raw: str | None) -> tuple[str, float]:
    """(label, seconds) of a `window` query value; BadInput naming the known ones."""
    label = raw or DEFAULT_WINDOW
    if label not in WINDOWS:
        raise BadInput(f"window must be one of {', '.join(WINDOWS)}, got {label[:20]!r}")
    return label, WINDOWS[label]


def groups(lc: Lifecycle) -> dict[str, list[str]]:
    """Each state's group, derived from the spec (see the module's doc), in spec order."""
    created = {r.dest for r in lc.create_rules}
    leased = set(lc.sources("heartbeat"))
    lease_from = set(lc.sources("lease")) if "lease" in lc.events else set()
    operator_only: set[str] = set()
    for state in lc.states:
        entering = [r for r in lc.rules if r.dest == state and r.source != state]
        if entering and all(lc.events[r.event].operator for r in entering):
            operator_only.add(state)
    out: dict[str, list[str]] = {k: [] for k in GROUP_LABELS}
    for state in lc.states:
        if state in lc.terminal:
            out["terminal"].append(state)
        elif state in lc.parked:
            out["aside"].append(state)
        elif state in operator_only:
            out["operator"].append(state)
        elif state in leased:
            out["run"].append(state)
        elif state in created or state == lc.initial:
            out["intake"].append(state)
        elif state in lease_from:
            out["retry"].append(state)
        else:
            out["aside"].append(state)
    return out


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


#: an event entering one state from this many states or more is listed under the
#: drawing ("from any of ...") instead of drawn as that many edges
WIDE_SOURCES = 3


@attrs.frozen
class Bundle:
    """One drawn edge: the events from `source` (None: creation) into `dest`, spec order."""

    source: str | None
    dest: str
    events: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"edge-{self.source or 'new'}-{self.dest}"


@attrs.frozen
class Wide:
    """An event entering `dest` from WIDE_SOURCES states or more, with its counts."""

    event: str
    dest: str
    #: (source state, times taken in the window), in spec order
    sources: tuple[tuple[str, int], ...]
    operator: bool

    @property
    def total(self) -> int:
        return sum(n for _s, n in self.sources)


def _sources(lc: Lifecycle) -> dict[tuple[str, str], list[str | None]]:
    out: dict[tuple[str, str], list[str | None]] = {}
    for rule in lc.rules:
        srcs = out.setdefault((rule.event, rule.dest), [])
        if rule.source not in srcs:
            srcs.append(rule.source)
    return out


def wide(lc: Lifecycle, edges: Mapping[Edge, int]) -> list[Wide]:
    """The events listed under the drawing, with how often each source took them."""
    return [
        Wide(
            event,
            dest,
            tuple((s, edges.get((s, event, dest), 0)) for s in srcs if s is not None),
            lc.events[event].operator,
        )
        for (event, dest), srcs in _sources(lc).items()
        if len(srcs) >= WIDE_SOURCES
    ]


def bundles(lc: Lifecycle) -> list[Bundle]:
    """The drawn edges: one per pair of states, the wide events and the unaudited
    self-loops (a heartbeat, never counted) left out."""
    listed = {(w.event, w.dest) for w in wide(lc, {})}
    order: dict[tuple[str | None, str], list[str]] = {}
    for rule in lc.rules:
        if (rule.event, rule.dest) in listed:
            continue
        if rule.source == rule.dest and not lc.events[rule.event].audited:
            continue
        events = order.setdefault((rule.source, rule.dest), [])
        if rule.event not in events:
            events.append(rule.event)
    return [Bundle(src, dst, tuple(evs)) for (src, dst), evs in order.items()]


def _event_line(lc: Lifecycle, event: str, n: int | None) -> str:
    spec = lc.events[event]
    text = event + (" (operator)" if spec.operator else "")
    if n is None:
        return text
    return f"{text}: not audited" if not spec.audited else f"{text}: {n}"


def lifecycle_dot(
    lc: Lifecycle,
    *,
    states: Mapping[str, int],
    edges: Mapping[Edge, int],
    window: str,
    state_url: Callable[[str], str],
) -> str:
    """The whole machine as DOT, top-down and grouped, with live counts and state links."""
    lines = [
        f"// lifecycle {lc.name!r} for the dashboard, generated from the spec",
        f"digraph {lc.name} {{",
        "  rankdir=TB; newrank=true; nodesep=0.5; ranksep=0.55; compound=true;",
        f'  node [shape=box, style="rounded,filled", fillcolor="#ffffff", {_FONT}, '
        'fontsize=17, margin="0.2,0.08"];',
        f'  edge [{_FONT}, fontsize=14, color="#7b8794", fontcolor="#37414d"];',
        '  __start [shape=point, width=0.18, label="", tooltip="created"];',
    ]
    grouped = groups(lc)
    for group, members in grouped.items():
        if not members:
            continue
        lines.append(f"  subgraph cluster_{group} {{")
        lines.append(
            f"    label={_q(GROUP_LABELS[group])}; labeljust=l; fontsize=14; {_FONT}; "
            'style="rounded,dashed"; color="#b8c0ca"; fontcolor="#5f6b7a";'
        )
        if group == "terminal":
            lines.append("    rank=same;")
        for state in members:
            attrs_ = [
                "label=" + _q(state + "\n" + f"{states.get(state, 0)} now"),
                f"id={_q('state-' + state)}",
                f"URL={_q(state_url(state))}",
                'target="_top"',
                f"tooltip={_q(lc.state_docs.get(state, state) + ' (click: its jobs)')}",
            ]
            if state in lc.terminal:
                attrs_ += ["peripheries=2", 'fillcolor="#eceff1"']
            if state in lc.parked:
                attrs_ += ["shape=octagon", 'fillcolor="#ffe0b2"', 'color="#e65100"']
            if states.get(state, 0) and state not in lc.terminal:
                attrs_ += ["penwidth=2"]
            lines.append(f"    {state} [{', '.join(attrs_)}];")
        lines.append("  }")
    # keep the flow top-down: intake above run above terminal
    order = [g for g in ("intake", "run", "terminal") if grouped[g]]
    for upper, lower in pairwise(order):
        a, b = grouped[upper][0], grouped[lower][0]
        lines.append(f"  {a} -> {b} [style=invis, weight=4];")
    for bundle in bundles(lc):
        counted = [(ev, edges.get((bundle.source, ev, bundle.dest), 0)) for ev in bundle.events]
        operator = all(lc.events[ev].operator for ev in bundle.events)
        taken = sum(n for _e, n in counted)
        label = "\n".join(_event_line(lc, ev, n) for ev, n in counted)
        attrs_ = [f"label={_q(label)}", f"id={_q(bundle.id)}"]
        if operator:
            attrs_ += ["style=dashed", 'color="#6a1b9a"', 'fontcolor="#6a1b9a"']
        if taken:
            attrs_ += ["penwidth=2.5", 'color="#6a1b9a"' if operator else 'color="#1f5fbf"']
        src = "__start" if bundle.source is None else bundle.source
        lines.append(f"  {src} -> {bundle.dest} [{', '.join(attrs_)}];")
    lines.append(
        f"  label={_q(f'jobs per state now; events taken in the last {window}')}; "
        "labelloc=t; fontsize=15;"
    )
    lines.append("}")
    return "\n".join(lines) + "\n"


@attrs.frozen
class Step:
    """One applied entry of a job's trail, as its path draws it."""

    n: int
    entry: AuditEntry


def path_of(entries: Sequence[AuditEntry], limit: int = PATH_STEPS) -> tuple[list[Step], int]:
    """The applied entries as numbered steps: (the newest `limit`, how many were left out)."""
    steps = [Step(i, e) for i, e in enumerate((e for e in entries if e.outcome == "applied"), 1)]
    cut = max(0, len(steps) - limit)
    return steps[cut:], cut


def job_path_dot(lc: Lifecycle, entries: Sequence[AuditEntry], limit: int = PATH_STEPS) -> str:
    """One job's own path as DOT: the states it entered in order, each edge the event that
    took it there with the step number, time, fence and attempt."""
    steps, cut = path_of(entries, limit)
    lines = [
        "// one job's path, generated from its audit trail",
        "digraph path {",
        '  rankdir=TB; nodesep=0.3; ranksep=0.3; label="times in UTC"; labelloc=t; fontsize=13;',
        f'  node [shape=box, style="rounded,filled", fillcolor="#ffffff", {_FONT}, fontsize=16];',
        f'  edge [{_FONT}, fontsize=14, color="#1b5e20", fontcolor="#263238"];',
    ]
    first = "__start"
    if cut:
        lines.append(f"  __start [shape=plaintext, label={_q(f'… {cut} earlier steps')}];")
    else:
        lines.append('  __start [shape=point, width=0.18, label=""];')
    prev = first
    last_day = ""  # the date is written on a step's time when it differs from the step before
    for i, step in enumerate(steps):
        e = step.entry
        node = f"s{step.n}"
        fill = "#81c784" if i == len(steps) - 1 else "#c8e6c9"
        if e.to_state in lc.parked:
            fill = "#ffe0b2"
        extra = ", peripheries=2" if e.to_state in lc.terminal else ""
        lines.append(
            f"  {node} [label={_q(e.to_state)}, id={_q(f'step-{step.n}')}, "
            f'fillcolor="{fill}"{extra}];'
        )
        what = e.event + (f" by {e.actor[:40]}" if e.actor and lc.events[e.event].operator else "")
        stamp = fmt_time(e.at)
        when = stamp if stamp[:10] != last_day else stamp[11:]
        last_day = stamp[:10]
        label = f"{step.n}. {what}\n{when} · fence {e.fence} · attempt {e.attempt}"
        style = ', style=dashed, color="#6a1b9a"' if lc.events[e.event].operator else ""
        lines.append(f"  {prev} -> {node} [label={_q(label)}{style}];")
        prev = node
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- the pages' parts, read through the Engine -----------------------------------------


@attrs.frozen
class LifecycleView:
    """What the Lifecycle page shows for one window."""

    window: str
    svg: str | None
    error: str | None
    #: jobs per state now (from the background-refreshed counts)
    states: Mapping[str, int]
    #: applied transitions taken in the window, by edge
    edges: Mapping[Edge, int]
    wide: tuple[Wide, ...]
    counted_at: float
    browsable: bool


def window_counts(engine: Engine, seconds: float) -> dict[Edge, int]:
    """Applied transitions per edge over the last `seconds`: the store's grouped
    aggregate (`JobBrowser.recent_transitions`); empty without a JobBrowser."""
    browser = views.browser_of(engine)
    if browser is None:
        return {}
    edges: dict[Edge, int] = {}
    for c in browser.recent_transitions(engine.clock.now() - seconds):
        if c.outcome == "applied":
            key = (c.from_state, c.event, c.to_state)
            edges[key] = edges.get(key, 0) + c.count
    return edges


def lifecycle_view(
    engine: Engine,
    counts: views.CountsCache,
    renderer: Renderer,
    window: str,
    jobs_path: str,
) -> LifecycleView:
    """The Lifecycle page for `window` (a key of WINDOWS); state links go to `jobs_path`.
    The drawing is cached by what it shows: the same counts are drawn once."""
    label, seconds = window_of(window)
    lc = engine.spec
    per_queue, taken = counts.get()
    states = dict.fromkeys(lc.states, 0)
    for (_q, state), n in per_queue.items():
        states[state] = states.get(state, 0) + n
    edges = window_counts(engine, seconds)
    key = (
        "lifecycle",
        label,
        jobs_path,
        tuple(sorted(states.items())),
        tuple(sorted(edges.items(), key=str)),
    )

    def dot() -> str:
        return lifecycle_dot(
            lc,
            states=states,
            edges=edges,
            window=label,
            state_url=lambda s: f"{jobs_path}?{urlencode({'state': s})}",
        )

    svg, error = renderer.svg(key, dot)
    return LifecycleView(
        window=label,
        svg=svg,
        error=error,
        states=states,
        edges=edges,
        wide=tuple(wide(lc, edges)),
        counted_at=taken,
        browsable=views.browser_of(engine) is not None,
    )


def job_path_svg(
    engine: Engine, renderer: Renderer, view: views.JobView
) -> tuple[str | None, str | None]:
    """A job's own path drawn, cached per (job, version, trail page)."""
    key = ("job-path", view.job.id, view.job.version, view.before)
    return renderer.svg(key, lambda: job_path_dot(engine.spec, view.history))
