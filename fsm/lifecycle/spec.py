"""Load, check and compile the declarative lifecycle (specs/job.toml).

The spec is loaded once into one `transitions.Machine(model=None)`; the lookup
table that `decide` uses is compiled from that machine's events, so the machine
and the table cannot disagree. No machine is ever built per job.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs
from transitions import Machine

from ..errors import SpecError
from .codes import CODE_RULES, REJECTED_STAGE, code_problems
from .rules import EFFECTS, GUARDS, Effect, Guard, Step

#: state and event names: they reach SQL literals, diagrams and log lines as they are
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]{0,63}")

_STATE_KEYS = {"doc", "terminal", "parked", "stage"}
_EVENT_KEYS = {"doc", "transitions", "creates", "fenced", "operator", "audited"}
_TRANSITION_KEYS = {"from", "to", "guards", "effects", "code", "code_rule", "failure"}


@attrs.frozen
class Rule:
    """One compiled transition: from `source` on `event` to `dest` if all guards hold."""

    source: str | None
    event: str
    dest: str
    guards: tuple[str, ...]
    effects: tuple[str, ...]
    #: the reason code of the audit entry: fixed, or picked by a rule of CODE_RULES
    code: str | None = None
    code_rule: str | None = None
    #: where in its run a job failed, on the entries of a failure transition
    #: (`failure = true`): the `stage` of its source state; None on the others
    stage: str | None = None
    #: the guards and effects themselves, looked up once by name in fsm/lifecycle/rules.py
    #: (`decide` runs on every transition; the names above stay the spec's words)
    guard_fns: tuple[Guard, ...] = attrs.field(
        init=False,
        eq=False,
        repr=False,
        default=attrs.Factory(lambda self: tuple(GUARDS[g] for g in self.guards), takes_self=True),
    )
    effect_fns: tuple[Effect, ...] = attrs.field(
        init=False,
        eq=False,
        repr=False,
        default=attrs.Factory(
            lambda self: tuple(EFFECTS[e] for e in self.effects), takes_self=True
        ),
    )

    def holds(self, step: Step) -> bool:
        """Whether every guard of this transition holds for `step` (in spec order)."""
        # a loop, not all(<generator>): decide calls this on every transition
        for guard in self.guard_fns:  # noqa: SIM110
            if not guard(step):
                return False
        return True

    def codes(self) -> tuple[str, ...]:
        """Every code an entry of this transition can carry."""
        if self.code_rule is not None:
            return CODE_RULES[self.code_rule][1]
        return () if self.code is None else (self.code,)

    def code_for(self, step: Step) -> str | None:
        """The reason code of this transition's audit entry, for this step."""
        if self.code_rule is not None:
            return CODE_RULES[self.code_rule][0](step)
        return self.code


@attrs.frozen
class EventSpec:
    name: str
    doc: str
    creates: bool
    fenced: bool
    operator: bool
    audited: bool


@attrs.frozen
class Lifecycle:
    """The compiled spec: states, events and the (state, event) -> rules table."""

    path: str
    name: str
    initial: str
    states: tuple[str, ...]
    state_docs: Mapping[str, str]
    terminal: frozenset[str]
    parked: frozenset[str]
    events: Mapping[str, EventSpec]
    table: Mapping[tuple[str, str], tuple[Rule, ...]]
    create_rule: Rule
    machine: Any = attrs.field(eq=False, repr=False)
    #: the creating event's transitions in spec order (guarded ones first; the last,
    #: `create_rule`, leads to the initial state)
    create_rules: tuple[Rule, ...] = ()
    #: every reason code an audit entry may carry, with its meaning ([codes])
    codes: Mapping[str, str] = attrs.field(factory=dict)
    #: where in its run a job can fail, with the meaning of each ([stages])
    stages: Mapping[str, str] = attrs.field(factory=dict)
    _sources: Mapping[str, tuple[str, ...]] = attrs.field(init=False, eq=False, repr=False)
    _dests: Mapping[str, frozenset[str]] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        sources: dict[str, list[str]] = {}
        dests: dict[str, set[str]] = {}
        for (src, event), rules in self.table.items():
            sources.setdefault(event, []).append(src)
            dests.setdefault(event, set()).update(r.dest for r in rules)
        object.__setattr__(
            self, "_sources", MappingProxyType({e: tuple(s) for e, s in sources.items()})
        )
        object.__setattr__(
            self, "_dests", MappingProxyType({e: frozenset(d) for e, d in dests.items()})
        )

    def sources(self, event: str) -> tuple[str, ...]:
        """The states `event` leaves from, in spec order (empty for an unknown event).
        The one computation of it: the engine, recovery, the CLI, the dashboard and the
        fault suite all ask here."""
        return self._sources.get(event, ())

    def dests(self, event: str) -> frozenset[str]:
        """The states `event` may arrive in (empty for an unknown event)."""
        return self._dests.get(event, frozenset())

    @property
    def rules(self) -> tuple[Rule, ...]:
        """Every rule, creation first, in spec order."""
        out = list(self.create_rules or (self.create_rule,))
        for rules in self.table.values():
            out.extend(rules)
        return tuple(out)

    def events_from(self, state: str) -> tuple[str, ...]:
        return tuple(event for (src, event) in self.table if src == state)

    def is_final(self, state: str) -> bool:
        """Terminal or parked: where every job must end under fair scheduling."""
        return state in self.terminal or state in self.parked


class _GuardCondition:
    """A `transitions` condition that evaluates a named guard on the Step passed in."""

    def __init__(self, name: str) -> None:
        self.guard_name = name
        self.__name__ = name

    def __call__(self, event_data: Any) -> bool:
        step: Step = event_data.kwargs["step"]
        return GUARDS[self.guard_name](step)


class _CodeTag:
    """A no-op `prepare` callback that carries a transition's reason code into the machine."""

    def __init__(self, code: str | None, code_rule: str | None, failure: bool = False) -> None:
        self.code = code
        self.code_rule = code_rule
        self.failure = failure
        self.__name__ = f"code:{code or code_rule}"

    def __call__(self, event_data: Any) -> None:
        return None


class _EffectCallback:
    def __init__(self, name: str) -> None:
        self.effect_name = name
        self.__name__ = name

    def __call__(self, event_data: Any) -> None:
        EFFECTS[self.effect_name](event_data.kwargs["step"])


def _read(path: str | Path) -> tuple[dict[str, Any], str]:
    label = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError(label, "(file)", f"cannot read: {err.strerror or err}") from err
    try:
        return tomllib.loads(text), label
    except tomllib.TOMLDecodeError as err:
        raise SpecError(label, "(syntax)", str(err)) from err


def _problems(data: dict[str, Any], path: str) -> list[SpecError]:
    """Structural problems of a parsed spec, each naming the offending key."""
    found: list[SpecError] = []

    def bad(key: str, problem: str) -> None:
        found.append(SpecError(path, key, problem))

    machine = data.get("machine")
    states = data.get("states")
    events = data.get("events")
    if not isinstance(machine, dict):
        bad("machine", "missing [machine] table")
        machine = {}
    if not isinstance(states, dict) or not states:
        bad("states", "missing or empty [states] table")
        states = {}
    if not isinstance(events, dict) or not events:
        bad("events", "missing or empty [events] table")
        events = {}
    initial = machine.get("initial")
    if initial not in states:
        bad("machine.initial", f"{initial!r} is not a declared state")
    for kind, names in (("state", states), ("event", events)):
        for name in names:
            if not _IDENTIFIER.fullmatch(name):
                bad(
                    f"{kind}s.{name}",
                    f"a {kind} name must be a lower-case identifier ([a-z][a-z0-9_]*, "
                    "at most 64 characters): stores and diagrams use it as is",
                )
    stages = data.get("stages", {})
    if not isinstance(stages, dict) or not all(isinstance(v, str) for v in stages.values()):
        bad("stages", 'must be a table of stage = "meaning"')
        stages = {}
    if REJECTED_STAGE not in stages:
        bad("stages", f"must declare {REJECTED_STAGE!r} (rejected reports)")
    for name, body in states.items():
        if not isinstance(body, dict):
            bad(f"states.{name}", "must be a table")
            continue
        for key in set(body) - _STATE_KEYS:
            bad(f"states.{name}.{key}", "unknown key")
        for flag in ("terminal", "parked"):
            if not isinstance(body.get(flag, False), bool):
                bad(f"states.{name}.{flag}", "must be true or false")
        if body.get("terminal") and body.get("parked"):
            bad(f"states.{name}", "cannot be both terminal and parked")
        stage = body.get("stage")
        if stage is not None and stage not in stages:
            bad(f"states.{name}.stage", f"{stage!r} is not declared in [stages]")
    for name, body in events.items():
        where = f"events.{name}"
        if not isinstance(body, dict):
            bad(where, "must be a table")
            continue
        for key in set(body) - _EVENT_KEYS:
            bad(f"{where}.{key}", "unknown key")
        for flag in ("creates", "fenced", "operator", "audited"):
            if not isinstance(body.get(flag, flag == "audited"), bool):
                bad(f"{where}.{flag}", "must be true or false")
        rules = body.get("transitions")
        if not isinstance(rules, list) or not rules:
            bad(f"{where}.transitions", "needs at least one [[transitions]] entry")
            continue
        for i, rule in enumerate(rules):
            at = f"{where}.transitions[{i}]"
            if not isinstance(rule, dict):
                bad(at, "must be a table")
                continue
            for key in set(rule) - _TRANSITION_KEYS:
                bad(f"{at}.{key}", "unknown key")
            if not isinstance(rule.get("failure", False), bool):
                bad(f"{at}.failure", "must be true or false")
            elif rule.get("failure"):
                for src in rule.get("from") or []:
                    state = states.get(src)
                    # (a terminal or parked source is refused by the graph checks)
                    settled = isinstance(state, dict) and (
                        state.get("terminal") or state.get("parked")
                    )
                    if isinstance(state, dict) and state.get("stage") is None and not settled:
                        bad(f"{at}.failure", f"source state {src!r} declares no stage")
            sources = rule.get("from")
            if not isinstance(sources, list):
                bad(f"{at}.from", "must be a list of states")
                sources = []
            if body.get("creates"):
                if sources:
                    bad(f"{at}.from", "a creating event has no source state (from = [])")
                last = i == len(rules) - 1
                if last and (rule.get("to") != initial or rule.get("guards")):
                    bad(
                        f"{at}.to",
                        "a creating event's last transition must be unguarded and lead to "
                        f"the initial state {initial!r}",
                    )
                if not last and not rule.get("guards"):
                    bad(f"{at}.guards", "a creating event's earlier transitions need guards")
            elif not sources:
                bad(f"{at}.from", "names no source state")
            for src in sources:
                if src not in states:
                    bad(f"{at}.from", f"unknown state {src!r}")
            dest = rule.get("to")
            if dest != "=" and dest not in states:
                bad(f"{at}.to", f"unknown state {dest!r}")
            for kind, registry in (("guards", GUARDS), ("effects", EFFECTS)):
                names = rule.get(kind, [])
                if not isinstance(names, list):
                    bad(f"{at}.{kind}", "must be a list of names")
                    continue
                for n in names:
                    if n not in registry:
                        bad(
                            f"{at}.{kind}",
                            f"unknown {kind[:-1]} {n!r} (not in fsm/lifecycle/rules.py)",
                        )
    found += code_problems(data, events, path, _IDENTIFIER)
    creators = [n for n, b in events.items() if isinstance(b, dict) and b.get("creates")]
    if len(creators) != 1:
        bad("events", f"exactly one event must have creates = true, found {creators}")
    return found


def _graph_problems(lc: Lifecycle) -> list[SpecError]:
    """Semantic checks on a compiled lifecycle."""
    found: list[SpecError] = []
    for (src, event), rules in lc.table.items():
        seen: set[tuple[str, ...]] = set()
        for i, rule in enumerate(rules):
            key = f"events.{event}.transitions (from {src!r})"
            if rule.guards in seen:
                found.append(
                    SpecError(lc.path, key, f"two transitions with the same guards {rule.guards}")
                )
            seen.add(rule.guards)
            if not rule.guards and i < len(rules) - 1:
                found.append(
                    SpecError(
                        lc.path,
                        key,
                        f"unguarded transition to {rule.dest!r} hides the ones after it",
                    )
                )
    edges: dict[str, set[str]] = {s: set() for s in lc.states}
    for (src, _event), rules in lc.table.items():
        for rule in rules:
            edges[src].add(rule.dest)
    reached = {lc.initial} | {r.dest for r in lc.create_rules}
    frontier = list(reached)
    while frontier:
        for nxt in edges[frontier.pop()]:
            if nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    for state in lc.states:
        if state not in reached:
            found.append(SpecError(lc.path, f"states.{state}", f"unreachable from {lc.initial!r}"))
    finals = set(lc.terminal | lc.parked)
    if not lc.terminal:
        found.append(SpecError(lc.path, "states", "no state is marked terminal"))
    for state in lc.states:
        if state in finals:
            continue
        seen_states = {state}
        frontier = [state]
        ok = False
        while frontier and not ok:
            for nxt in edges[frontier.pop()]:
                if nxt in finals:
                    ok = True
                    break
                if nxt not in seen_states:
                    seen_states.add(nxt)
                    frontier.append(nxt)
        if not ok:
            found.append(
                SpecError(lc.path, f"states.{state}", "cannot reach a terminal or parked state")
            )
    for state in sorted(lc.terminal):
        for event in lc.events_from(state):
            if not lc.events[event].operator:
                found.append(
                    SpecError(
                        lc.path,
                        f"events.{event}",
                        f"applies to terminal state {state!r} but is not operator-only",
                    )
                )
    return found


def _named(callback: object, attr: str) -> str:
    name = getattr(callback, attr, None)
    if not isinstance(name, str):
        raise TypeError(f"machine callback {callback!r} was not built from the spec")
    return name


def _tag(callbacks: list[Any]) -> _CodeTag:
    tags = [c for c in callbacks if isinstance(c, _CodeTag)]
    if len(tags) != 1:
        raise TypeError("machine transition was not built from the spec (no code tag)")
    return tags[0]


def _compile(data: dict[str, Any], path: str) -> Lifecycle:
    states_data: dict[str, dict[str, Any]] = data["states"]
    events_data: dict[str, dict[str, Any]] = data["events"]
    initial: str = data["machine"]["initial"]
    transitions_list: list[dict[str, Any]] = []
    event_specs: dict[str, EventSpec] = {}
    create_rule: Rule | None = None
    create_rules: list[Rule] = []
    for name, body in events_data.items():
        event_specs[name] = EventSpec(
            name=name,
            doc=str(body.get("doc", "")),
            creates=bool(body.get("creates", False)),
            fenced=bool(body.get("fenced", False)),
            operator=bool(body.get("operator", False)),
            audited=bool(body.get("audited", True)),
        )
        for rule in body["transitions"]:
            guards = tuple(rule.get("guards", []))
            effects = tuple(rule.get("effects", []))
            code, code_rule = rule.get("code"), rule.get("code_rule")
            if body.get("creates"):
                create_rule = Rule(None, name, rule["to"], guards, effects, code, code_rule)
                create_rules.append(create_rule)
                continue
            transitions_list.append(
                {
                    "trigger": name,
                    "source": list(rule["from"]),
                    "dest": rule["to"],
                    "conditions": [_GuardCondition(g) for g in guards],
                    "after": [_EffectCallback(e) for e in effects],
                    "prepare": [_CodeTag(code, code_rule, bool(rule.get("failure", False)))],
                }
            )
    machine = Machine(
        model=None,
        states=list(states_data),
        transitions=transitions_list,
        initial=initial,
        auto_transitions=False,
        send_event=True,
        ignore_invalid_triggers=False,
    )
    # Compile the lookup table from the machine itself.
    table: dict[tuple[str, str], list[Rule]] = {}
    for event_name, event in machine.events.items():
        for source, trans_list in event.transitions.items():
            for t in trans_list:
                table.setdefault((source, event_name), []).append(
                    Rule(
                        source=source,
                        event=event_name,
                        dest=source if t.dest is None else t.dest,
                        guards=tuple(_named(c.func, "guard_name") for c in t.conditions),
                        effects=tuple(_named(cb, "effect_name") for cb in t.after),
                        code=_tag(t.prepare).code,
                        code_rule=_tag(t.prepare).code_rule,
                        stage=states_data[source].get("stage") if _tag(t.prepare).failure else None,
                    )
                )
    assert create_rule is not None  # _problems checked there is exactly one
    return Lifecycle(
        path=path,
        name=str(data["machine"].get("name", "job")),
        initial=initial,
        states=tuple(states_data),
        state_docs=MappingProxyType({s: str(b.get("doc", "")) for s, b in states_data.items()}),
        terminal=frozenset(s for s, b in states_data.items() if b.get("terminal")),
        parked=frozenset(s for s, b in states_data.items() if b.get("parked")),
        events=MappingProxyType(event_specs),
        table=MappingProxyType({k: tuple(v) for k, v in table.items()}),
        create_rule=create_rule,
        machine=machine,
        create_rules=tuple(create_rules),
        codes=MappingProxyType(dict(data.get("codes", {}))),
        stages=MappingProxyType(dict(data.get("stages", {}))),
    )


def check_spec(path: str | Path) -> tuple[Lifecycle | None, list[SpecError]]:
    """Every problem of the spec at `path` (empty when it is valid)."""
    try:
        data, label = _read(path)
    except SpecError as err:
        return None, [err]
    problems = _problems(data, label)
    if problems:
        return None, problems
    lifecycle = _compile(data, label)
    problems = _graph_problems(lifecycle)
    return (None if problems else lifecycle), problems


def load_spec(path: str | Path) -> Lifecycle:
    """Load and validate a spec; raise the first SpecError found."""
    lifecycle, problems = check_spec(path)
    if problems:
        raise problems[0]
    assert lifecycle is not None
    return lifecycle


def default_spec_path() -> Path:
    """specs/job.toml: shipped inside the wheel as fsm/specs/, else beside the package."""
    shipped = resources.files("fsm").joinpath("specs", "job.toml")
    if shipped.is_file():
        return Path(str(shipped))
    return Path(__file__).resolve().parents[2] / "specs" / "job.toml"


_DEFAULT: Lifecycle | None = None


def lifecycle() -> Lifecycle:
    """The default lifecycle, loaded once per process."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load_spec(default_spec_path())
    return _DEFAULT
