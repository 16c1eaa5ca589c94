"""The scope of a unique submit, resolved against the lifecycle (docs/uniqueness.md).

`scope` turns the caller's `fsm.inputs.Unique` into the `fsm.records.UniqueScope` a
store looks for twins in: its states checked against the spec, its time window made a
point in time. `decide`'s submit calls it; no other code resolves a scope.

A state set is a scope only if no job can enter it but by submit: it holds the states
a new job starts in, and every state a job can move into it from (operator events
aside: an operator's requeue or resolve is audited and may bring back a second job of
the key, docs/uniqueness.md). Otherwise a job could leave the set and come back while
another job of its key was submitted meanwhile (a released lease returns to `queued`),
and "at most one job per key in the scope" would not hold. So `{"queued"}` alone is
refused, the live states are the smallest scope, and final states may be added.
"""

from __future__ import annotations

from ..errors import BadInput
from ..inputs import Unique
from ..records import UniqueScope
from .spec import Lifecycle


def live_states(lc: Lifecycle) -> tuple[str, ...]:
    """The states that are not final (terminal or parked), in spec order."""
    return tuple(s for s in lc.states if not lc.is_final(s))


def scope(unique: Unique, kind: str, now: float, lc: Lifecycle) -> UniqueScope:
    """The scope of a unique submit of `kind` at `now`; BadInput names a state set that
    is not one (unknown states, a set a job can re-enter)."""
    if unique.states is None:
        states = live_states(lc) if unique.period is None else tuple(lc.states)
    else:
        states = unique.states
        unknown = sorted(set(states) - set(lc.states))
        if unknown:
            raise BadInput(
                f"unique states: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} "
                f"not a state of the lifecycle; its states: {', '.join(lc.states)}"
            )
        check_closed(frozenset(states), lc)
    since = float("-inf") if unique.period is None else now - unique.period
    return UniqueScope(
        kind=kind,
        key=unique.key,
        states=tuple(s for s in lc.states if s in states),
        since=since,
        refuse=unique.on_duplicate == "refuse",
    )


def check_closed(states: frozenset[str], lc: Lifecycle) -> None:
    """BadInput unless `states` holds where a new job starts and every state a job can
    enter it from (by a non-operator event)."""
    starts = sorted({r.dest for r in lc.create_rules or (lc.create_rule,)} - states)
    if starts:
        raise BadInput(
            f"unique states {sorted(states)} must hold {', '.join(starts)}: a new job starts "
            "there (leave states out for the live states)"
        )
    for (source, event), rules in lc.table.items():
        if source in states or lc.events[event].operator:
            continue
        for rule in rules:
            if rule.dest in states:
                raise BadInput(
                    f"unique states {sorted(states)} are not a scope: a job enters "
                    f"{rule.dest!r} from {source!r} ({event}), so two jobs of one key could "
                    f"be in it at once; add {source!r} (or leave states out: the live states)"
                )
